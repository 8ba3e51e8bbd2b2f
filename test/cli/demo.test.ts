import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

// Compiled to dist/test/cli/: the repository root is three levels up.
const root = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(root, 'bin', 'leasehold.js');

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Runs `leasehold demo` with its own XDG_STATE_HOME, so the embedded default store is a fresh
 * file. `onLine` sees stdout as it comes (to interrupt the demo at a chosen moment).
 */
function leasehold(args: string[], stateHome: string, onLine?: (line: string, pid: number) => void): Promise<Run> {
  const env: NodeJS.ProcessEnv = { ...process.env, XDG_STATE_HOME: stateHome };
  delete env['LEASEHOLD_STORE'];
  const started = Date.now();
  const child = spawn(process.execPath, [bin, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let partial = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    partial += chunk;
    const lines = partial.split('\n');
    partial = lines.pop()!;
    for (const line of lines) onLine?.(line, child.pid!);
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  // The demo aims at ~15s; a minute means it hung, and the test must not hang with it.
  const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      clearTimeout(guard);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/** The pids from the demo's "Started worker A (pid 123), worker B (pid 124), ..." line. */
function workerPids(stdout: string): number[] {
  const started = stdout.split('\n').find((l) => l.includes('Started worker')) ?? '';
  return [...started.matchAll(/worker [A-H] \(pid (\d+)\)/g)].map((m) => Number(m[1]));
}

/** A worker counts as gone when the pid no longer exists (a zombie awaiting a reaper is not running either). */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

function withStateHome<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-demo-test-'));
  return fn(dir).finally(() => rmSync(dir, { recursive: true, force: true }));
}

void describe('leasehold demo', () => {
  void it("fences a frozen leader's stale write, holds every claim it prints, and leaves no worker running", () =>
    withStateHome(async (state) => {
      const r = await leasehold(['demo'], state);
      const output = `${r.stdout}\n${r.stderr}`;
      assert.equal(r.code, 0, output);
      assert.ok(existsSync(join(state, 'leasehold', 'leasehold.db')), 'the demo used the embedded default store');
      assert.match(r.stdout, /FENCED: [A-H]'s write #\d+ with token \d+ was rejected by the fence/, output);

      const claims = r.stdout.split('\n').filter((l) => /^\s+[✓✗] \([a-z]\)/.test(l));
      assert.deepEqual(
        claims.map((l) => l.trim().slice(0, 5)),
        ['✓ (a)', '✓ (b)', '✓ (c)', '✓ (d)', '✓ (e)', '✓ (f)'],
        output,
      );
      assert.match(r.stdout, /All 6 claims held/);

      const pids = workerPids(r.stdout);
      assert.equal(pids.length, 3, output);
      for (const pid of pids) assert.equal(isRunning(pid), false, `worker pid ${pid} outlived the demo`);
      assert.ok(r.ms < 60_000, `took ${r.ms}ms`);
    }));

  void it('interrupted while a worker is frozen, it thaws and stops every worker and exits 130', () =>
    withStateHome(async (state) => {
      let sent = false;
      const r = await leasehold(['demo'], state, (line, pid) => {
        if (!sent && line.includes('Freezing worker')) {
          sent = true;
          process.kill(pid, 'SIGINT'); // the demo only, not its process group: it must clean up by itself
        }
      });
      const output = `${r.stdout}\n${r.stderr}`;
      assert.ok(sent, `the demo never froze a worker:\n${output}`);
      assert.equal(r.code, 130, output);
      const pids = workerPids(r.stdout);
      assert.equal(pids.length, 3, output);
      for (const pid of pids) assert.equal(isRunning(pid), false, `worker pid ${pid} outlived the interrupted demo`);
    }));

  void it('refuses a bad flag with a usage error', () =>
    withStateHome(async (state) => {
      const r = await leasehold(['demo', '--workers', '1'], state);
      assert.equal(r.code, 2);
      assert.match(r.stderr, /--workers must be a whole number from 2/);
    }));
});
