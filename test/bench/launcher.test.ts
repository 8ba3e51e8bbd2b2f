/**
 * `npm run bench -- --help` and `npm run chaos -- --help` answer at once, without compiling:
 * scripts/launch.mjs is run from a copy of the repository with no dist/ and no node_modules,
 * where a build could not even start. Its usage text is checked against the compiled program's
 * own, so the two cannot drift.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const bare = mkdtempSync(join(tmpdir(), 'lh-launch-'));
mkdirSync(join(bare, 'scripts'));
cpSync(join(ROOT, 'scripts', 'launch.mjs'), join(bare, 'scripts', 'launch.mjs'));
after(() => rmSync(bare, { recursive: true, force: true }));

const PROGRAMS = { bench: 'dist/bench/run.js', chaos: 'dist/test/chaos/run.js' } as const;

void describe('the bench and chaos launcher', () => {
  for (const [name, entry] of Object.entries(PROGRAMS)) {
    void it(`${name} --help answers without a build (no dist/, no tsc) with the program's own usage`, () => {
      const r = spawnSync(process.execPath, [join(bare, 'scripts', 'launch.mjs'), name, '--help'], { encoding: 'utf8', timeout: 10_000 });
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stderr, '');
      const own = spawnSync(process.execPath, [join(ROOT, entry), '--help'], { encoding: 'utf8', timeout: 30_000 });
      assert.equal(own.status, 0, own.stderr);
      assert.equal(r.stdout, own.stdout, `scripts/launch.mjs's usage for ${name} differs from ${entry} --help: copy it over`);
    });
  }

  void it('an unknown program is one line and exit 2', () => {
    const r = spawnSync(process.execPath, [join(bare, 'scripts', 'launch.mjs'), 'nope'], { encoding: 'utf8', timeout: 10_000 });
    assert.equal(r.status, 2);
    assert.equal(r.stderr.trim().split('\n').length, 1);
  });
});
