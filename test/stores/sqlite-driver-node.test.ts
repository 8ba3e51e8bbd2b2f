/**
 * On Node 22.13+ and 24 the embedded store needs no package and no compiler: leasehold as npm
 * installs it with `--omit=optional` (no better-sqlite3 anywhere up the tree) opens SQLite
 * files through node:sqlite, and the demo runs start to finish. Skipped, with the reason, on a
 * Node without node:sqlite (20): scripts/node-versions.mjs runs it on 22 and 24.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadNodeSqlite } from '../../src/backends/sqlite/node-sqlite.js';

/** dist/test/stores/x.js -> the repository root. */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SKIP = loadNodeSqlite() === undefined ? `Node ${process.version} has no node:sqlite (22.13+ does): here SQLite needs better-sqlite3` : undefined;

let app: string;
before(() => {
  if (SKIP !== undefined) return;
  app = mkdtempSync(join(tmpdir(), 'lh-sqlite-node-'));
  // `node_modules/leasehold` as `npm install --omit=optional leasehold` lays it out: no driver package.
  const pkg = join(app, 'node_modules', 'leasehold');
  mkdirSync(pkg, { recursive: true });
  cpSync(join(ROOT, 'dist', 'src'), join(pkg, 'dist', 'src'), { recursive: true });
  cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
});
after(() => {
  if (app !== undefined) rmSync(app, { recursive: true, force: true });
});

function env(): NodeJS.ProcessEnv {
  const e: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LEASEHOLD_') && k !== 'NODE_PATH' && k !== 'NODE_OPTIONS') e[k] = v;
  e['XDG_STATE_HOME'] = join(app, 'state');
  return e;
}

function node(args: string[], timeout = 60_000): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, args, { cwd: app, env: env(), encoding: 'utf8', timeout });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

void describe(`installed without better-sqlite3, on Node ${process.version}`, () => {
  void it('the library opens SQLite through node:sqlite: a store, a claim, and a fenced write on a DatabaseSync', (t) => {
    if (SKIP !== undefined) return t.skip(SKIP);
    const db = join(app, 'lib', 'leases.db');
    writeFileSync(
      join(app, 'check.mjs'),
      `import { SqliteStore, openStore } from 'leasehold';
       import { createSqliteFenceTable, fencedWriteSync } from 'leasehold/fence';
       let resolved = true;
       try { (await import('node:module')).createRequire(import.meta.url).resolve('better-sqlite3'); } catch { resolved = false; }
       const store = await openStore('sqlite:${db}');
       const [r] = await store.claim([{ name: 'job', holder: 'h', ttlMs: 5000, expect: null, nextNonce: 'n' }]);
       // Imported after leasehold loaded node:sqlite: a script importing it first gets Node 22's
       // ExperimentalWarning from its own import, which is not leasehold's to hide.
       const { DatabaseSync } = await import('node:sqlite');
       const resource = new DatabaseSync(${JSON.stringify(join(app, 'lib', 'resource.db'))});
       createSqliteFenceTable(resource);
       const wrote = fencedWriteSync(resource, { resource: 'r', token: r.token }, () => 'wrote');
       await store.close();
       process.stdout.write(JSON.stringify({ resolved, driver: store.driver, outcome: r.outcome, token: String(r.token), wrote, own: new SqliteStore({ path: ${JSON.stringify(db)} }).driver }));`,
    );
    const r = node([join(app, 'check.mjs')]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, '', 'nothing on stderr: no warning either');
    assert.deepEqual(JSON.parse(r.stdout), { resolved: false, driver: 'node:sqlite', outcome: 'acquired', token: '1', wrote: 'wrote', own: 'node:sqlite' });
  });

  void it('the demo runs and every claim it checks holds; doctor names node:sqlite', (t) => {
    if (SKIP !== undefined) return t.skip(SKIP);
    const bin = join(app, 'node_modules', 'leasehold', 'bin', 'leasehold.js');
    const demo = node([bin, 'demo'], 120_000);
    assert.equal(demo.code, 0, demo.stdout + demo.stderr);
    assert.match(demo.stdout, /All 6 claims held/);
    assert.doesNotMatch(demo.stderr, /Warning/);
    const doctor = node([bin, 'doctor', '--store', `sqlite:${join(app, 'doc.db')}`]);
    assert.equal(doctor.code, 0, doctor.stdout + doctor.stderr);
    assert.match(doctor.stdout, /^ok\s+sqlite-driver\s+node:sqlite \(SQLite \d+\.\d+\.\d+; built into Node/m);
    assert.equal(existsSync(join(app, 'node_modules', 'better-sqlite3')), false, 'the test tree is what it claims to be');
  });
});
