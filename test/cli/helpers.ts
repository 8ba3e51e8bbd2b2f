/**
 * The CLI under test is the real executable: `node bin/leasehold.js ...` in a subprocess, with
 * its own temp dir (SQLite file, XDG_STATE_HOME) or its own PostgreSQL schema. Every process a
 * test starts is tracked so the leak check can prove none outlived its test.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { parseDuration } from '../../src/core/config.js';

/** dist/test/cli/helpers.js -> the repository root. */
export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const BIN = join(ROOT, 'bin', 'leasehold.js');
export const PG_URL = process.env['LEASEHOLD_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
export const HAS_SETPRIV = existsSync('/usr/bin/setpriv') || (process.env['PATH'] ?? '').split(':').some((d) => d !== '' && existsSync(join(d, 'setpriv')));

export interface Done {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

export interface Running {
  proc: ChildProcess;
  pid: number;
  readonly stdout: string;
  readonly stderr: string;
  done: Promise<Done>;
}

const started = new Set<ChildProcess>();

/** A temp dir with its own XDG_STATE_HOME, and an env with no LEASEHOLD_* leaking in from outside. */
export class Sandbox {
  readonly dir: string;
  readonly env: NodeJS.ProcessEnv;
  constructor(label: string) {
    this.dir = mkdtempSync(join(tmpdir(), `lh-cli-${label}-`));
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LEASEHOLD_')) env[k] = v;
    env['XDG_STATE_HOME'] = join(this.dir, 'state');
    this.env = env;
  }

  path(name: string): string {
    return join(this.dir, name);
  }

  /** Writes an executable shell script and returns its path. */
  script(name: string, body: string): string {
    const p = this.path(name);
    writeFileSync(p, `#!/bin/sh\n${body}\n`);
    chmodSync(p, 0o755);
    return p;
  }

  read(name: string): string {
    return readFileSync(this.path(name), 'utf8');
  }

  has(name: string): boolean {
    return existsSync(this.path(name));
  }

  start(args: string[], env: NodeJS.ProcessEnv = {}): Running {
    return start(args, { ...this.env, ...env });
  }

  /** Runs the command to its end; `timeoutMs` (default: hangBoundMs(args)) only stops a hang. */
  async run(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = hangBoundMs(args)): Promise<Done> {
    const r = this.start(args, env);
    return withTimeout(r, timeoutMs);
  }

  cleanup(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * How long a command may run before it counts as hung: what it may wait by its own flags (a
 * `--wait D`, plus one `--ttl` for a term it waits on to run out, 10 s when not given; at most 5
 * minutes, under the runner's 12-minute bound on a file) on top of 20 s to start, connect and
 * finish. The tests assert exit codes and output, never this time: a fixed 20 s failed a
 * `--wait 15s` run whose Node start-up took over 5 s on a loaded host.
 */
export function hangBoundMs(args: readonly string[]): number {
  const flag = (name: string): number => {
    const i = args.indexOf(name);
    const end = args.indexOf('--'); // the command's own arguments are not leasehold's flags
    const v = i === -1 || (end !== -1 && end < i) ? undefined : args[i + 1];
    if (v === undefined) return 0;
    try {
      return parseDuration(v, name);
    } catch {
      return 0; // a bad value is what the test gives on purpose: the command refuses it at once
    }
  };
  const waits = flag('--wait');
  return 20_000 + Math.min(waits > 0 ? waits + (flag('--ttl') || 10_000) : 0, 5 * 60_000);
}

export function start(args: string[], env: NodeJS.ProcessEnv): Running {
  const t0 = performance.now();
  const proc = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  started.add(proc);
  let stdout = '';
  let stderr = '';
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const done = new Promise<Done>((resolve) => {
    proc.on('close', (code, signal) => {
      started.delete(proc);
      resolve({ code, signal, stdout, stderr, ms: performance.now() - t0 });
    });
  });
  return {
    proc,
    pid: proc.pid!,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
    done,
  };
}

async function withTimeout(r: Running, ms: number): Promise<Done> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      r.done,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          r.proc.kill('SIGKILL');
          reject(new Error(`leasehold ${r.proc.spawnargs.slice(2).join(' ')} did not finish in ${ms}ms; stderr: ${r.stderr}`));
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once `check` holds, polling; rejects with `what` after `ms`. */
export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const end = performance.now() + ms;
  for (;;) {
    if (await check()) return;
    if (performance.now() > end) {
      // Held off the CPU past the deadline, this wakes in the timers phase, before the I/O that
      // arrived meanwhile (a child's output) is read in the poll phase: one turn through it, then
      // the last look (CI: a replica's lines read only after the wait had timed out).
      await new Promise((r) => setImmediate(r));
      if (await check()) return;
      throw new Error(`timed out after ${ms}ms waiting until ${what}`);
    }
    await sleep(20);
  }
}

/**
 * What a process's threads are doing, from Linux's /proc, for a test whose child went quiet: per
 * thread its state (R running, S sleeping, D in uninterruptible I/O, T stopped), the CPU it has
 * used (user+system ticks), where it sleeps in the kernel (wchan) and its current system call.
 * Two readings a second apart tell a busy loop (ticks grow, R) from a wait on the event loop
 * (S, epoll_wait) from a disk stall (D). Never throws: what cannot be read is said.
 */
export function threadStates(pid: number): string {
  const read = (f: string): string => {
    try {
      return readFileSync(f, 'utf8').trim();
    } catch (e) {
      return `(${(e as NodeJS.ErrnoException).code ?? 'unreadable'})`;
    }
  };
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch (e) {
    return `pid ${pid}: no /proc entry (${(e as NodeJS.ErrnoException).code ?? 'unreadable'})`;
  }
  return tids
    .map((tid) => {
      const { name, fields: f } = procStat(read(`/proc/${pid}/task/${tid}/stat`));
      return `${tid} ${name} ${f[0] ?? '?'} cpu ${Number(f[11]) + Number(f[12])} ticks, wchan ${read(`/proc/${pid}/task/${tid}/wchan`)}, syscall ${read(`/proc/${pid}/task/${tid}/syscall`).split(' ')[0]}`;
    })
    .join('; ');
}

/**
 * A /proc stat line: the command name, in parentheses and possibly with spaces or parentheses of
 * its own, then the fields from the state on (fields[0] is the state).
 */
function procStat(stat: string): { name: string; fields: string[] } {
  return { name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), fields: stat.slice(stat.lastIndexOf(')') + 2).split(' ') };
}

/** Alive means: exists and is not a zombie (a SIGKILLed orphan may linger as one until reaped). */
export function isAlive(pid: number): boolean {
  try {
    return procStat(readFileSync(`/proc/${pid}/stat`, 'utf8')).fields[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Asserts an error exit: the code, exactly one line on stderr in the house format, no stack trace. */
export function assertOneLineError(r: Done, code: number, pattern?: RegExp): void {
  assert.equal(r.code, code, `exit code ${r.code}, expected ${code}; stderr: ${r.stderr}`);
  const lines = r.stderr.split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 1, `expected one line on stderr, got:\n${r.stderr}`);
  assert.match(lines[0]!, /^leasehold: \S/);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  if (pattern !== undefined) assert.match(lines[0]!, pattern);
}

/** Kills whatever a test left running and fails if there was anything (the leak check). */
export function assertNoLeftovers(extraPids: number[] = []): void {
  const left = [...started].filter((p) => p.exitCode === null && p.signalCode === null);
  for (const p of left) p.kill('SIGKILL');
  const orphans = extraPids.filter(isAlive);
  for (const pid of orphans) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  assert.deepEqual(
    { runners: left.map((p) => p.spawnargs.slice(2).join(' ')), commands: orphans },
    { runners: [], commands: [] },
    'a test left processes running',
  );
}

/** A fresh PostgreSQL schema name for one test file; dropped with dropSchema. */
export function freshSchema(): string {
  return `lh_cli_${Math.random().toString(36).slice(2, 10)}`;
}

export function pgUrl(schema: string, base = PG_URL): string {
  const u = new URL(base);
  u.searchParams.set('schema', schema);
  return u.toString();
}

export async function dropSchema(schema: string): Promise<void> {
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await c.end();
  }
}

/** A child script that records its pid and token, then waits to be killed. */
export function sleeperScript(sb: Sandbox, tag: string): string {
  // Each file is written beside its name and renamed into place: tests wait for `${tag}.token` to exist and
  // then read it, and a plain `>` creates the file empty before the echo fills it (a Node 24 run read "").
  const pid = sb.path(`${tag}.pid`);
  const token = sb.path(`${tag}.token`);
  return sb.script(
    `${tag}.sh`,
    `echo $$ > "${pid}.tmp" && mv "${pid}.tmp" "${pid}"\necho "$LEASEHOLD_TOKEN" > "${token}.tmp" && mv "${token}.tmp" "${token}"\nexec sleep 30`,
  );
}

export function readPid(sb: Sandbox, tag: string): number {
  return Number(sb.read(`${tag}.pid`).trim());
}
