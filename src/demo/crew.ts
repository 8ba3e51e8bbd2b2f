import { fork, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { parseReport, type Report } from './protocol.js';

export interface WorkerProc {
  readonly id: string;
  readonly pid: number;
  readonly child: ChildProcess;
  /** Set once the process is gone. */
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  /** The demo ended it on purpose (SIGKILL, SIGTERM): its exit is not a failure. */
  expectExit: boolean;
  frozen: boolean;
  stderr: string[];
}

/** A step of the demo did not happen in time, or a worker failed. The message says which. */
export class DemoStepError extends Error {
  override readonly name = 'DemoStepError';
}

/**
 * The demo's worker processes and everything they reported. All waiting goes through
 * {@link Crew.waitFor}, which has a deadline, so a loaded machine produces a clear failure
 * message instead of a hang. No worker outlives the crew: {@link Crew.killAll} is wired to the
 * demo's exit and interrupt paths.
 */
export class Crew {
  readonly workers = new Map<string, WorkerProc>();
  readonly reports: Report[] = [];
  private readonly wakers = new Set<() => void>();
  private failure: DemoStepError | undefined;

  constructor(
    private readonly script: string,
    private readonly signal: AbortSignal,
  ) {}

  start(id: string, args: string[], env: Record<string, string> = {}): WorkerProc {
    // The IPC channel carries nothing: it is there so a worker notices the demo dying (disconnect).
    const child = fork(this.script, [...args, '--worker', id], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], env: { ...process.env, ...env } });
    if (child.pid === undefined) throw new DemoStepError(`could not start worker ${id}`);
    const w: WorkerProc = { id, pid: child.pid, child, exit: undefined, expectExit: false, frozen: false, stderr: [] };
    this.workers.set(id, w);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const r = parseReport(line);
      if (r !== undefined) this.push(r);
    });
    createInterface({ input: child.stderr! }).on('line', (line) => {
      w.stderr.push(line);
      if (w.stderr.length > 20) w.stderr.shift();
    });
    child.on('error', () => {}); // signalling a process that just exited; 'exit' tells the story
    child.on('exit', (code, sig) => {
      w.exit = { code, signal: sig };
      if (!w.expectExit && this.failure === undefined) {
        const last = [...this.reports].reverse().find((r) => r.worker === id && r.type === 'error');
        const why = last?.type === 'error' ? last.message : (w.stderr.at(-1) ?? 'no message');
        this.failure = new DemoStepError(`worker ${id} (pid ${w.pid}) exited unexpectedly (${sig ?? `code ${code}`}): ${why}`);
      }
      this.wake();
    });
    return w;
  }

  get running(): WorkerProc[] {
    return [...this.workers.values()].filter((w) => w.exit === undefined);
  }

  private push(r: Report): void {
    this.reports.push(r);
    this.wake();
  }

  private wake(): void {
    for (const w of [...this.wakers]) w();
  }

  /**
   * Resolves with the first non-undefined answer of `find`, re-asked after every report and
   * worker exit. Rejects when `timeoutMs` passes ("timed out after 8s waiting for <what>"),
   * when a worker died unexpectedly, or when the demo is interrupted.
   */
  waitFor<T>(what: string, timeoutMs: number, find: () => T | undefined): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const done = (): void => {
        this.wakers.delete(check);
        this.signal.removeEventListener('abort', check);
        clearTimeout(timer);
      };
      const check = (): void => {
        if (this.signal.aborted) {
          done();
          reject(this.signal.reason as Error);
          return;
        }
        if (this.failure !== undefined) {
          done();
          reject(this.failure);
          return;
        }
        let found: T | undefined;
        try {
          found = find();
        } catch (err) {
          done();
          reject(err as Error);
          return;
        }
        if (found !== undefined) {
          done();
          resolve(found);
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new DemoStepError(`timed out after ${(timeoutMs / 1000).toFixed(1)}s waiting for ${what}`));
      }, timeoutMs);
      this.wakers.add(check);
      this.signal.addEventListener('abort', check, { once: true });
      check();
    });
  }

  /** A pause that the interrupt cuts short. */
  sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        clearTimeout(t);
        reject(this.signal.reason as Error);
      };
      const t = setTimeout(() => {
        this.signal.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      if (this.signal.aborted) onAbort();
      else this.signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  send(w: WorkerProc, sig: NodeJS.Signals): void {
    if (w.exit !== undefined) return;
    if (sig === 'SIGKILL' || sig === 'SIGTERM') w.expectExit = true;
    try {
      process.kill(w.pid, sig);
    } catch {
      // already gone: its exit event says so
    }
    if (sig === 'SIGSTOP') w.frozen = true;
    if (sig === 'SIGCONT') w.frozen = false;
  }

  /**
   * Asks every running worker to stop (SIGCONT first: a stopped process holds SIGTERM pending),
   * waits up to `graceMs`, then SIGKILLs stragglers. True when all exited with code 0 in time.
   */
  async stopAll(graceMs: number): Promise<{ clean: boolean; killed: string[] }> {
    const asked = this.running;
    for (const w of asked) {
      if (w.frozen) this.send(w, 'SIGCONT');
      this.send(w, 'SIGTERM');
    }
    const killed: string[] = [];
    const gone = new Promise<void>((resolve) => {
      const check = (): void => {
        if (asked.every((w) => w.exit !== undefined)) {
          this.wakers.delete(check);
          resolve();
        }
      };
      this.wakers.add(check);
      check();
    });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([gone, new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
    for (const w of asked) {
      if (w.exit === undefined) {
        killed.push(w.id);
        this.send(w, 'SIGKILL');
      }
    }
    if (killed.length > 0) await Promise.race([gone, new Promise<void>((resolve) => setTimeout(resolve, 2000).unref())]);
    return { clean: killed.length === 0 && asked.every((w) => w.exit?.code === 0), killed };
  }

  /** Last resort, synchronous (safe in an 'exit' handler): SIGKILL every worker still running. */
  killAll(): void {
    for (const w of this.workers.values()) {
      if (w.exit !== undefined) continue;
      w.expectExit = true;
      try {
        process.kill(w.pid, 'SIGKILL'); // works on a stopped process too
      } catch {
        // already gone
      }
    }
  }
}
