/**
 * The layering check (scripts/layering.mjs, part of `npm test`) catches each kind of violation:
 * run on a small tree with one of each, it names every one and fails; on the same tree with
 * them removed, it passes. The real tree is checked by `npm test` itself.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tree(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'lh-layering-'));
  dirs.push(dir);
  copyFileSync(join(repo, '.dependency-cruiser.cjs'), join(dir, '.dependency-cruiser.cjs'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'fixture', type: 'module', exports: { '.': { default: './dist/src/index.js' } } }));
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', strict: true }, include: ['src'] }));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

function check(dir: string): { code: number | null; out: string } {
  const r = spawnSync(process.execPath, [join(repo, 'scripts', 'layering.mjs'), '--root', dir], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, out: r.stdout + r.stderr };
}

const clean: Record<string, string> = {
  'src/index.ts': "export { openStore } from './backends/index.js';\nexport { Engine } from './core/engine.js';\nexport { RedStore } from './backends/red/store.js';\n",
  'src/core/engine.ts': "export class Engine {}\n",
  'src/backends/index.ts': "export async function openStore(): Promise<unknown> {\n  const { RedStore } = await import('./red/store.js');\n  return new RedStore();\n}\n",
  'src/backends/shared.ts': "export const SHARED = 1;\n",
  'src/backends/red/store.ts': "import { SHARED } from '../shared.js';\nexport class RedStore {\n  n = SHARED;\n}\n",
  'src/backends/blue/store.ts': "export class BlueStore {}\n",
  'src/cli/main.ts': "import { openStore } from '../backends/index.js';\nexport const main = (): Promise<unknown> => openStore();\n",
};

void describe('the layering check', () => {
  void it('passes a tree that keeps the rules', () => {
    const r = check(tree(clean));
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /layering: ok/);
  });

  void it('names a cycle, core importing outside core, a backend reached around the registry, two backends importing each other, and a long file', () => {
    const r = check(
      tree({
        ...clean,
        'src/cli/a.ts': "import { b } from './b.js';\nexport const a = (): number => b() + 1;\n",
        'src/cli/b.ts': "import { a } from './a.js';\nexport const b = (): number => (Math.random() > 2 ? a() : 0);\n",
        'src/core/engine.ts': "import { main } from '../cli/main.js';\nexport class Engine {\n  m = main;\n}\n",
        'src/cli/main.ts': "import { RedStore } from '../backends/red/store.js';\nexport const main = (): unknown => new RedStore();\n",
        'src/backends/blue/store.ts': "import { RedStore } from '../red/store.js';\nexport class BlueStore extends RedStore {}\n",
        'src/cli/long.ts': Array.from({ length: 601 }, (_, i) => `export const v${i} = ${i};`).join('\n') + '\n',
      }),
    );
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /no-cycle: src\/cli\/a\.ts/);
    assert.match(r.out, /core-stays-core: src\/core\/engine\.ts → src\/cli\/main\.ts/);
    assert.match(r.out, /backend-behind-registry: src\/cli\/main\.ts → src\/backends\/red\/store\.ts/);
    assert.match(r.out, /backends-apart: src\/backends\/blue\/store\.ts → src\/backends\/red\/store\.ts/);
    assert.match(r.out, /too-long: src\/cli\/long\.ts has 601 lines, over 600/);
    // The package entry re-exports a backend's class, and the registry opens it: both allowed.
    assert.doesNotMatch(r.out, /src\/index\.ts →|src\/backends\/index\.ts →/);
  });

  void it('names a direct read of the process clock in the etcd backend outside its clock adapter (not one in a comment)', () => {
    const etcd = {
      'src/backends/etcd/time.ts': 'export const processWall = (): number => Date.now();\n',
      'src/backends/etcd/store.ts': '// never Date.now() here: the clock is injected\nexport class EtcdStore {\n  now = (clock: { wallNow(): number }): number => clock.wallNow();\n}\n',
    };
    const ok = check(tree({ ...clean, ...etcd }));
    assert.equal(ok.code, 0, ok.out);
    const r = check(tree({ ...clean, ...etcd, 'src/backends/etcd/session.ts': 'export const at = (): number => performance.now() + new Date().getTime();\n' }));
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /clock-read: src\/backends\/etcd\/session\.ts reads the process clock directly 2 time\(s\)/);
    assert.doesNotMatch(r.out, /etcd\/(time|store)\.ts reads/);
  });
});
