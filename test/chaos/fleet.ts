/**
 * The worker processes of one run: spawning them (each under libfaketime with its own clock
 * file, so any one clock can be moved later), following what they say on stdout, signalling
 * them by pid, and making sure none outlives the run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { monoMs, type ChaosLiveness, type StoreKind, type Timing, type WorkerEvent, type WorkerInfo, type WorkerMode, type WorkerOrigin } from './types.js';

const workerJs = fileURLToPath(new URL('./worker.js', import.meta.url));

export interface FleetConfig {
  dir: string;
  storeKind: StoreKind;
  /** The store URL the workers use (through the chaos proxy when there is one). */
  workerStoreUrl: string;
  resourceUrl: string;
  schema: string;
  lease: string;
  timing: Timing;
  unfenced: boolean;
  faketime: string | null;
  maxLifeMs: number;
  liveness: ChaosLiveness;
}

export interface SpawnOptions {
  origin: WorkerOrigin;
  parent?: string;
  mode: WorkerMode;
  /** Start with a copy of this state dir (a fork, a restore). */
  copyStateFrom?: string;
  resume?: string;
  forkedFrom?: string;
  /** libfaketime offset to start with, e.g. "-21d". Default "+0". */
  clock?: string;
}

export class Worker {
  readonly info: WorkerInfo;
  readonly stateDir: string;
  readonly clockFile: string;
  readonly logFile: string;
  /** Believes it leads, per its own last acquired/lost/released line. */
  leading = false;
  token: string | null = null;
  lastUnitAt = 0;
  /** The snapshot file this worker last wrote (SIGUSR2). */
  snapshotFile: string | null = null;
  state: 'running' | 'stopped' | 'exited' = 'running';
  started = false;
  private readonly child: ChildProcess;
  private readonly waiters = new Set<() => void>();
  private stoppedSince = 0;
  readonly exited: Promise<void>;

  constructor(child: ChildProcess, info: WorkerInfo, stateDir: string, clockFile: string, logFile: string, onLine: (w: Worker, e: WorkerEvent) => void) {
    this.child = child;
    this.info = info;
    this.stateDir = stateDir;
    this.clockFile = clockFile;
    this.logFile = logFile;
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        let e: WorkerEvent;
        try {
          e = JSON.parse(line) as WorkerEvent;
        } catch {
          continue;
        }
        this.note(e);
        onLine(this, e);
        for (const w of [...this.waiters]) w();
      }
    });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => {
      if (err.length < 20_000) {
        err += d.toString();
        writeFileSync(`${logFile.replace(/\.jsonl$/, '')}.stderr`, err);
      }
    });
    this.exited = new Promise<void>((resolve) => {
      child.on('exit', (code, signal) => {
        this.state = 'exited';
        this.leading = false;
        if (this.stoppedSince > 0) this.info.stopped.push([this.stoppedSince, monoMs()]);
        this.info.exitedAt = monoMs();
        this.info.exit = signal !== null ? signal : `exit ${code}`;
        if (code !== 0 && code !== null && err !== '') this.info.exit += `: ${err.trim().split('\n').slice(-3).join(' | ').slice(0, 300)}`;
        for (const w of [...this.waiters]) w();
        resolve();
      });
    });
  }

  get id(): string {
    return this.info.id;
  }
  get pid(): number {
    return this.info.pid;
  }
  get alive(): boolean {
    return this.state !== 'exited';
  }

  private note(e: WorkerEvent): void {
    switch (e.ev) {
      case 'start':
        this.started = true;
        break;
      case 'acquired':
        this.leading = true;
        this.token = e.token;
        break;
      case 'lost':
      case 'released':
        if (this.token === e.token) this.leading = false;
        break;
      case 'unit':
        this.lastUnitAt = e.t;
        break;
      case 'snapshot':
        this.snapshotFile = e.file;
        break;
    }
  }

  /** Waits (bounded) until `pred` holds; false on timeout or exit. */
  async waitFor(pred: (w: Worker) => boolean, timeoutMs: number): Promise<boolean> {
    if (pred(this)) return true;
    return new Promise<boolean>((resolve) => {
      const check = (): void => {
        if (pred(this)) finish(true);
        else if (!this.alive) finish(false);
      };
      const finish = (v: boolean): void => {
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve(v);
      };
      const timer = setTimeout(() => finish(false), timeoutMs);
      this.waiters.add(check);
    });
  }

  /** Sends a signal by pid; false when the process is gone. */
  signal(sig: NodeJS.Signals): boolean {
    if (!this.alive) return false;
    try {
      process.kill(this.pid, sig);
    } catch {
      return false;
    }
    if (sig === 'SIGSTOP') this.markStopped();
    if (sig === 'SIGCONT') this.markContinued();
    if (sig === 'SIGKILL' || sig === 'SIGTERM') this.info.askedToStop = true;
    return true;
  }

  markStopped(): void {
    if (this.state === 'running') {
      this.state = 'stopped';
      this.stoppedSince = monoMs();
    }
  }

  private markContinued(): void {
    if (this.state === 'stopped') {
      this.info.stopped.push([this.stoppedSince, monoMs()]);
      this.stoppedSince = 0;
      this.state = 'running';
    }
  }

  /** Moves this process's wall clock (libfaketime reads the file about once a second). */
  setClock(offset: string): void {
    writeFileSync(this.clockFile, `${offset}\n`);
  }

  /** True when the kernel says the process is stopped (state T). */
  kernelStopped(): boolean {
    try {
      return /\) T /.test(readFileSync(`/proc/${this.pid}/stat`, 'utf8'));
    } catch {
      return false;
    }
  }
}

export class Fleet {
  readonly workers: Worker[] = [];
  private seq = 0;
  /** The clock offset new workers start with (a host-wide step moves it). */
  defaultClock = '+0';
  private readonly listeners = new Set<(w: Worker, e: WorkerEvent) => void>();

  constructor(private readonly cfg: FleetConfig) {
    mkdirSync(join(cfg.dir, 'workers'), { recursive: true });
    mkdirSync(join(cfg.dir, 'state'), { recursive: true });
    // If the harness dies, no worker may outlive it: SIGKILL whatever is left, by pid.
    process.on('exit', () => {
      for (const w of this.workers) {
        if (w.alive) {
          try {
            process.kill(w.pid, 'SIGCONT');
            process.kill(w.pid, 'SIGKILL');
          } catch {
            // already gone
          }
        }
      }
    });
  }

  onEvent(fn: (w: Worker, e: WorkerEvent) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  get live(): Worker[] {
    return this.workers.filter((w) => w.alive);
  }

  get leaders(): Worker[] {
    return this.live.filter((w) => w.leading);
  }

  spawn(o: SpawnOptions): Worker {
    const id = `w${++this.seq}`;
    const cfg = this.cfg;
    const stateDir = join(cfg.dir, 'state', id);
    if (o.copyStateFrom !== undefined) cpSync(o.copyStateFrom, stateDir, { recursive: true });
    mkdirSync(stateDir, { recursive: true });
    const clockFile = join(stateDir, 'clock');
    writeFileSync(clockFile, `${o.clock ?? this.defaultClock}\n`);
    const logFile = join(cfg.dir, 'workers', `${id}.jsonl`);
    const args = [
      workerJs,
      '--id', id,
      '--store-kind', cfg.storeKind,
      '--store', cfg.workerStoreUrl,
      '--resource', cfg.resourceUrl,
      '--schema', cfg.schema,
      '--lease', cfg.lease,
      '--ttl', String(cfg.timing.ttlMs),
      '--work-min', String(cfg.timing.workMinMs),
      '--work-max', String(cfg.timing.workMaxMs),
      '--log', logFile,
      '--state-dir', stateDir,
      '--mode', o.mode,
      '--max-life', String(cfg.maxLifeMs),
      '--liveness', cfg.liveness,
      ...(cfg.unfenced ? ['--unfenced'] : []),
      ...(o.resume === undefined ? [] : ['--resume', o.resume]),
      ...(o.forkedFrom === undefined ? [] : ['--forked-from', o.forkedFrom]),
    ];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], env: faketimeEnv(cfg.faketime, clockFile) });
    if (child.pid === undefined) throw new Error(`could not start worker ${id}`);
    const info: WorkerInfo = {
      id,
      pid: child.pid,
      origin: o.origin,
      ...(o.parent === undefined ? {} : { parent: o.parent }),
      mode: o.mode,
      spawnedAt: monoMs(),
      exitedAt: null,
      exit: 'running',
      askedToStop: false,
      stopped: [],
      events: [],
    };
    const w = new Worker(child, info, stateDir, clockFile, logFile, (wk, e) => {
      for (const l of this.listeners) l(wk, e);
    });
    // The IPC channel only tells the worker when the harness is gone; it must not hold us open.
    child.unref();
    (child as unknown as { channel?: { unref(): void } }).channel?.unref();
    this.workers.push(w);
    return w;
  }

  /** Waits (bounded) until any worker's line satisfies `pred`. */
  async waitForEvent(pred: (w: Worker, e: WorkerEvent) => boolean, timeoutMs: number): Promise<{ w: Worker; e: WorkerEvent } | null> {
    return new Promise((resolve) => {
      const off = this.onEvent((w, e) => {
        if (pred(w, e)) finish({ w, e });
      });
      const finish = (v: { w: Worker; e: WorkerEvent } | null): void => {
        clearTimeout(timer);
        off();
        resolve(v);
      };
      const timer = setTimeout(() => finish(null), timeoutMs);
    });
  }

  /** SIGTERM, then SIGKILL after `graceMs`; resolves when it has exited. */
  stopWorker(w: Worker, graceMs: number): Promise<'drained' | 'killed'> {
    return stopProcess(w, graceMs);
  }

  async stopAll(graceMs: number): Promise<void> {
    await Promise.all(this.live.map((w) => this.stopWorker(w, graceMs)));
  }

  /** Reads every worker's own log (the authoritative record; stdout was only for following). */
  collect(): WorkerInfo[] {
    for (const w of this.workers) {
      w.info.events = readJsonLines<WorkerEvent>(w.logFile);
    }
    return this.workers.map((w) => w.info);
  }
}

/**
 * The environment of a process whose wall clock the harness may move: libfaketime reading
 * `clockFile` (about once a second). The monotonic clock stays real: it is the time base of
 * every log, and leasehold's deadlines. Without libfaketime, the plain environment.
 */
export function faketimeEnv(faketime: string | null, clockFile: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (faketime !== null) {
    env['LD_PRELOAD'] = faketime;
    env['FAKETIME_TIMESTAMP_FILE'] = clockFile;
    env['FAKETIME_CACHE_DURATION'] = '1';
    env['FAKETIME_DONT_FAKE_MONOTONIC'] = '1';
  }
  return env;
}

/** SIGTERM (after SIGCONT if frozen), then SIGKILL after `graceMs`; resolves when it has exited. */
export async function stopProcess(w: Worker, graceMs: number): Promise<'drained' | 'killed'> {
  if (!w.alive) return 'drained';
  if (w.state === 'stopped') w.signal('SIGCONT');
  w.signal('SIGTERM');
  const done = await Promise.race([w.exited.then(() => true), sleep(graceMs).then(() => false)]);
  if (done) return 'drained';
  w.signal('SIGKILL');
  await Promise.race([w.exited, sleep(5000)]);
  return 'killed';
}

/** A process's own JSON-lines log (the authoritative record); a line cut by SIGKILL is skipped. */
export function readJsonLines<T>(file: string): T[] {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as T];
      } catch {
        return [];
      }
    });
}
