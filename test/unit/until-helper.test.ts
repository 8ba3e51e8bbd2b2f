/**
 * The tests' shared wait (test/cli/helpers.ts `until`, which test/integrations/replicas.ts
 * re-exports) takes a last look after their deadline, once the output that arrived meanwhile has been read: a test
 * process held off the CPU past the deadline (a loaded CI host) otherwise wakes in the timers
 * phase and times out on a condition already met in its unread pipes.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { until } from '../cli/helpers.js';

void test(`until: output that arrived while the event loop was blocked past the deadline is read before timing out`, async () => {
  const marker = join(mkdtempSync(join(tmpdir(), 'lh-until-')), 'written');
  // Writes its line, and only then the marker file: once the marker exists the line is in the pipe.
  const script = `process.stdout.write('ready\\n', () => { require('node:fs').writeFileSync(${JSON.stringify(marker)}, ''); setTimeout(() => {}, 5000); })`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  // The pipe is read from the next turns on, as a replica's has long been when a test waits on it.
  await once(child, 'spawn');
  await new Promise((r) => setImmediate(r));
  try {
    const waiting = until('the child says ready', () => out.includes('ready'), 200);
    // Blocked (as a starved process is) past the deadline, and until the child has written.
    const blockedFrom = performance.now();
    while (performance.now() < blockedFrom + 300 || !existsSync(marker)) {
      if (performance.now() > blockedFrom + 30_000) throw new Error('the child wrote nothing in 30 s');
    }
    await waiting;
    assert.ok(out.includes('ready'));
  } finally {
    child.kill('SIGKILL');
  }
});
