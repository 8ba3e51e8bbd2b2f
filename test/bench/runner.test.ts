/**
 * The test runner's own behaviour (scripts/test.mjs), on throwaway test files in a temporary
 * `unit/` folder (a unit file needs no service, so the runner starts none):
 *  - a file named after a store left out of LEASEHOLD_TEST_STORES is left out, and said so;
 *  - a file that reports nothing for LEASEHOLD_TEST_QUIET_MS is named on stderr with the test it
 *    was in (scripts/file-times.mjs), so a hang in CI names itself.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'lh-runner-'));
const unit = join(dir, 'unit');
mkdirSync(unit);
after(() => rmSync(dir, { recursive: true, force: true }));

function fixture(name: string, body: string): string {
  const path = join(unit, name);
  writeFileSync(path, `import { test } from 'node:test';\nimport assert from 'node:assert/strict';\n${body}\n`);
  return path;
}

function withoutTestContext(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { NODE_TEST_CONTEXT: _ignored, ...rest } = env;
  return rest;
}

function runner(files: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(ROOT, 'scripts', 'test.mjs'), ...files], {
      cwd: ROOT,
      // Without NODE_TEST_CONTEXT: set by the node:test running this file, it would make the
      // runner's own node --test report to us in node's internal format instead of its own.
      env: { ...withoutTestContext(process.env), LEASEHOLD_TEST_TIMES: join(dir, `times-${Math.random()}.txt`), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

void describe('the test runner (scripts/test.mjs)', () => {
  void it('leaves out a file named after a store that is not selected, says which, and runs the rest', async () => {
    const plain = fixture('plain.test.js', "test('runs', () => assert.ok(true));");
    const redis = fixture('redis-only.test.js', "test('must not run here', () => assert.fail('a redis file ran with LEASEHOLD_TEST_STORES=sqlite'));");
    const r = await runner([plain, redis], { LEASEHOLD_TEST_STORES: 'sqlite' });
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout + r.stderr, /leaving out 1 file\(s\) about stores not in LEASEHOLD_TEST_STORES \(sqlite\): .*redis-only\.test\.js/);
    assert.match(r.stdout, /✔ runs/);
    assert.doesNotMatch(r.stdout, /must not run here/);
  });

  void it('a file that goes quiet is named on stderr with the test it is in', async () => {
    // Quiet for 2.5 s against a 500 ms watch: named at least once, whatever the machine's load.
    const quiet = fixture('quiet.test.js', "test('sits still', async () => { await new Promise((r) => setTimeout(r, 2500)); });");
    const r = await runner([quiet], { LEASEHOLD_TEST_STORES: 'sqlite', LEASEHOLD_TEST_QUIET_MS: '500' });
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stderr, /\[test\] no progress for \d+ s in .*quiet\.test\.js \(last started: sits still\)/);
  });

  void it('a module whose tests have all ended is not named (the exported suites in dist/src), the test file that goes on is', async () => {
    // A suite module, as dist/src/conformance is: its tests report it as their file, and it never
    // ends as a file does. Each CI run named it every three minutes, though nothing in it ran.
    writeFileSync(join(unit, 'suite-module.js'), "import { test } from 'node:test';\nexport function suite() { test('from the module', () => {}); }\n");
    const user = fixture('uses-suite.test.js', "import { suite } from './suite-module.js';\nsuite();\ntest('sits still after', async () => { await new Promise((r) => setTimeout(r, 2500)); });");
    const r = await runner([user], { LEASEHOLD_TEST_STORES: 'sqlite', LEASEHOLD_TEST_QUIET_MS: '500' });
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /✔ from the module/, 'the module\'s test ran, reported under the module');
    assert.match(r.stderr, /no progress for \d+ s in .*uses-suite\.test\.js \(last started: sits still after\)/);
    assert.doesNotMatch(r.stderr, /no progress for \d+ s in .*suite-module\.js/);
  });
});
