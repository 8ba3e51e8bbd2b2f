/**
 * The nemesis: which fault comes next, and how each one is done to real processes and a real
 * store. Every choice (kind, target role, durations, offsets) comes from one seeded PRNG, so a
 * seed replays the same sequence of faults with the same parameters. Which process is "the
 * leader" at that moment can differ between replays; targets are chosen by role.
 *
 * One fault at a time. Every wait is bounded.
 */
import { copyFileSync, mkdirSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChaosProxy } from './proxy.js';
import type { Restarter } from './services.js';
import type { SessionEnder } from './sessions.js';
import type { Fleet, Worker } from './fleet.js';
import { monoMs, PROCESS_FAULTS, type FaultKind, type FaultRecord, type Timing, type WorkerMode } from './types.js';

/** mulberry32: small, fast, and the same on every platform. */
export class Prng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    let t = (this.s = (this.s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  range(a: number, b: number): number {
    return a + (b - a) * this.next();
  }
  int(a: number, b: number): number {
    return Math.floor(this.range(a, b + 1));
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.min(xs.length - 1, Math.floor(this.next() * xs.length))]!;
  }
  shuffle<T>(xs: readonly T[]): T[] {
    const a = [...xs];
    for (let i = a.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [a[i], a[j]] = [a[j]!, a[i]!];
    }
    return a;
  }
}

/** libfaketime re-reads a clock file at most this long after it changed (FAKETIME_CACHE_DURATION=1). */
export const FAKETIME_CACHE_MS = 1000;

/** How many times a kind without a target is tried again in the first round (about 0.5-1 s apart). */
const MAX_RETRIES = 20;

/** How often each kind comes up after the first round (which has every kind once). */
const WEIGHTS: Record<FaultKind, number> = {
  pause: 3,
  kill: 2,
  term: 2,
  snapshot: 1.5,
  fork: 1,
  'clock-jump': 1,
  'clock-past': 1,
  'proxy-delay': 1,
  'proxy-blackhole': 1,
  'proxy-reset': 1,
  restart: 1,
  'session-end': 2,
};

export interface NemesisDeps {
  fleet: Fleet;
  proxy: ChaosProxy | null;
  restarter: Restarter | null;
  /** Ends the leader's session on the server (liveness 'session'); null when the kind is not injected. */
  sessions: SessionEnder | null;
  /** The lease the workers contend for. */
  lease: string;
  timing: Timing;
  prng: Prng;
  /** 'short' keeps holds near the low end so a run of every kind fits in under a minute. */
  profile: 'short' | 'long';
  /**
   * The store's clock is each worker's own (SQLite): clock faults move every worker's clock
   * together, forward, and for good, as an NTP step does to every process on a host. Processes
   * sharing one SQLite file share one kernel clock, so per-process skew cannot happen there.
   */
  hostClock: boolean;
  dir: string;
  say(line: string): void;
}

export class Nemesis {
  private readonly d: NemesisDeps;
  private readonly kinds: FaultKind[];
  private readonly firstRound: FaultKind[];
  private n = 0;
  private hostOffsetS = 0;
  private readonly retries = new Map<FaultKind, number>();

  constructor(deps: NemesisDeps, kinds: readonly FaultKind[]) {
    this.d = deps;
    this.kinds = [...kinds];
    this.firstRound = deps.prng.shuffle(kinds);
    mkdirSync(join(deps.dir, 'snapshots'), { recursive: true });
  }

  /** True once every kind has been injected at least once. */
  get firstRoundDone(): boolean {
    return this.firstRound.length === 0;
  }

  /**
   * A kind that could not be injected (no target right now) comes back in the first round, up
   * to MAX_RETRIES times: a session-end finds no target while the leader's term is not tied to
   * a session, which can last a whole tenure (docs/chaos.md), and the run must still end.
   * @returns false when the kind is given up on for the first round.
   */
  retry(kind: FaultKind): boolean {
    const n = (this.retries.get(kind) ?? 0) + 1;
    this.retries.set(kind, n);
    if (n > MAX_RETRIES) return false;
    if (!this.firstRound.includes(kind)) this.firstRound.push(kind);
    return true;
  }

  nextKind(): FaultKind {
    const first = this.firstRound.shift();
    if (first !== undefined) return first;
    const total = this.kinds.reduce((s, k) => s + WEIGHTS[k], 0);
    let x = this.d.prng.next() * total;
    for (const k of this.kinds) {
      x -= WEIGHTS[k];
      if (x < 0) return k;
    }
    return this.kinds[this.kinds.length - 1]!;
  }

  private mode(): WorkerMode {
    return this.d.prng.chance(0.5) ? 'elector' : 'acquire';
  }

  /** A running worker: the believed leader with probability p (when there is one), else a follower. */
  private pick(p: number): { w: Worker; role: 'leader' | 'follower' } | null {
    const live = this.d.fleet.live.filter((w) => w.state === 'running' && w.started);
    const leaders = live.filter((w) => w.leading);
    const followers = live.filter((w) => !w.leading);
    const wantLeader = this.d.prng.chance(p);
    if (wantLeader && leaders.length > 0) return { w: this.d.prng.pick(leaders), role: 'leader' };
    if (followers.length > 0) return { w: this.d.prng.pick(followers), role: 'follower' };
    if (leaders.length > 0) return { w: this.d.prng.pick(leaders), role: 'leader' };
    return null;
  }

  /** Lets a leader get into a unit first, so a freeze lands between its token read and its write. */
  private async midUnit(w: Worker): Promise<void> {
    const since = monoMs();
    await w.waitFor((x) => x.lastUnitAt > since, this.d.timing.workMaxMs * 3);
    await sleep(this.d.prng.range(0, this.d.timing.workMinMs / 2));
  }

  private hold(shortRange: [number, number], longRange: [number, number]): number {
    const [a, b] = this.d.profile === 'short' ? shortRange : longRange;
    return Math.round(this.d.prng.range(a, b));
  }

  /** Injects one fault of `kind` and returns what was done; resolves once the fault has healed. */
  async inject(kind: FaultKind): Promise<FaultRecord> {
    const n = ++this.n;
    const rec: FaultRecord = { n, kind, targets: [], role: 'store', start: monoMs(), heal: 0, ref: 0, params: {}, spawned: [], note: '' };
    const { fleet, timing, prng } = this.d;
    const ttl = timing.ttlMs;
    switch (kind) {
      case 'pause': {
        const t = this.pick(0.8);
        if (t === null) return this.skipped(rec, 'no running worker');
        rec.targets = [t.w.id];
        rec.role = t.role;
        if (t.role === 'leader') await this.midUnit(t.w);
        // Past the TTL the store grants (etcd rounds up to whole seconds, 2s at least): a pause
        // shorter than that leaves the leader's lease alive, and it rightly carries on leading.
        const ms = Math.round(timing.storeTtlMs * prng.range(1.5, 3));
        rec.params = { ms };
        rec.start = monoMs();
        t.w.signal('SIGSTOP');
        await sleep(ms);
        t.w.signal('SIGCONT');
        rec.heal = monoMs();
        rec.note = `SIGSTOP ${t.w.id} for ${ms}ms (TTL ${timing.storeTtlMs}ms as the store grants it), then SIGCONT`;
        break;
      }
      case 'kill': {
        const t = this.pick(0.7);
        if (t === null) return this.skipped(rec, 'no running worker');
        rec.targets = [t.w.id];
        rec.role = t.role;
        if (t.role === 'leader') await this.midUnit(t.w);
        rec.start = monoMs();
        t.w.signal('SIGKILL');
        await Promise.race([t.w.exited, sleep(5000)]);
        const gap = Math.round(prng.range(0, 300));
        await sleep(gap);
        const r = fleet.spawn({ origin: 'replacement', parent: t.w.id, mode: t.w.info.mode });
        rec.spawned = [r.id];
        rec.params = { replacementAfterMs: gap };
        rec.heal = monoMs();
        rec.note = `SIGKILL ${t.w.id}; replacement ${r.id}`;
        break;
      }
      case 'term': {
        const t = this.pick(0.8);
        if (t === null) return this.skipped(rec, 'no running worker');
        rec.targets = [t.w.id];
        rec.role = t.role;
        // A rolling deploy: the new one is up before the old one is asked to go.
        const r = fleet.spawn({ origin: 'rolling', parent: t.w.id, mode: t.w.info.mode });
        rec.spawned = [r.id];
        await r.waitFor((x) => x.started, 15_000);
        if (t.role === 'leader') await this.midUnit(t.w);
        rec.start = monoMs();
        const how = await fleet.stopWorker(t.w, 5000);
        rec.heal = monoMs();
        rec.params = { drainMs: Math.round(rec.heal - rec.start) };
        rec.note = `started ${r.id}, then SIGTERM ${t.w.id} (${how === 'drained' ? 'drained and released' : 'did not drain in 5s: SIGKILLed'})`;
        break;
      }
      case 'snapshot': {
        const t = this.pick(0.85);
        if (t === null) return this.skipped(rec, 'no running worker');
        rec.targets = [t.w.id];
        rec.role = t.role;
        // The two restores are started first and wait, warm, for the snapshot file: a restore
        // is fast, and only a fast one races the original term's renewal.
        const snap = join(this.d.dir, 'snapshots', `fault-${n}-${t.w.id}.json`);
        const copies = [0, 1].map(() => fleet.spawn({ origin: 'restore', parent: t.w.id, mode: t.w.info.mode, copyStateFrom: t.w.stateDir, resume: snap }));
        rec.spawned = copies.map((c) => c.id);
        await Promise.all(copies.map((c) => c.waitFor((x) => x.started, 15_000)));
        if (t.role === 'leader') await this.midUnit(t.w);
        rec.start = monoMs();
        t.w.snapshotFile = null;
        t.w.signal('SIGUSR2'); // the worker writes its state and SIGSTOPs itself
        const got = await t.w.waitFor((x) => x.snapshotFile !== null, 3000);
        if (!got) {
          for (const c of copies) await fleet.stopWorker(c, 3000);
          return this.skipped(rec, `${t.w.id} did not write a snapshot within 3s`);
        }
        for (let i = 0; i < 40 && !t.w.kernelStopped() && t.w.alive; i++) await sleep(25);
        t.w.markStopped();
        // Half the time the restore beats the TTL (the clones race one live term), half not.
        const frozenMs = Math.round(ttl * (prng.chance(0.5) ? prng.range(0, 0.3) : prng.range(0.3, 2)));
        await sleep(frozenMs);
        // The paused VM is replaced by two restores of its snapshot.
        t.w.signal('SIGKILL');
        await Promise.race([t.w.exited, sleep(5000)]);
        copyFileSync(t.w.snapshotFile!, `${snap}.tmp`);
        renameSync(`${snap}.tmp`, snap);
        rec.heal = monoMs();
        rec.params = { frozenMs, withinTtl: frozenMs < ttl };
        rec.note = `snapshot of ${t.w.id} (frozen ${frozenMs}ms), original destroyed, restored twice as ${copies.map((c) => c.id).join(' and ')}`;
        break;
      }
      case 'fork': {
        const t = this.pick(0.8);
        if (t === null) return this.skipped(rec, 'no running worker');
        rec.targets = [t.w.id];
        rec.role = t.role;
        rec.start = monoMs();
        // A disk fork: the parent is paused while its disk is copied, then resumes.
        t.w.signal('SIGSTOP');
        const c = fleet.spawn({ origin: 'fork', parent: t.w.id, mode: this.mode(), copyStateFrom: t.w.stateDir, forkedFrom: t.w.id });
        t.w.signal('SIGCONT');
        rec.spawned = [c.id];
        await c.waitFor((x) => x.started, 15_000);
        rec.heal = monoMs();
        rec.note = `${c.id} started from a copy of ${t.w.id}'s state dir (identity file${t.role === 'leader' ? ' and leader marker' : ''})`;
        break;
      }
      case 'clock-jump': {
        if (this.d.hostClock) {
          const secs = Math.round(prng.range(5, 120));
          this.hostOffsetS += secs;
          rec.role = 'store';
          rec.start = monoMs();
          fleet.defaultClock = `+${this.hostOffsetS}s`;
          for (const w of fleet.live) w.setClock(fleet.defaultClock);
          rec.targets = fleet.live.map((w) => w.id);
          // libfaketime reads the clock file about once a second: the step lands within that.
          await sleep(FAKETIME_CACHE_MS);
          rec.heal = rec.ref = monoMs();
          rec.params = { offset: `+${secs}s`, hostOffset: fleet.defaultClock };
          rec.note = `the host's wall clock stepped forward ${secs}s (every worker; now ${fleet.defaultClock})`;
          break;
        }
        const t = this.pick(0.6);
        if (t === null) return this.skipped(rec, 'no running worker');
        rec.targets = [t.w.id];
        rec.role = t.role;
        const secs = Math.round(prng.range(5, 120));
        const offset = `${prng.chance(0.7) ? '+' : '-'}${secs}s`;
        const ms = this.hold([1500, 3000], [2000, 5000]);
        rec.start = monoMs();
        t.w.setClock(offset);
        await sleep(ms);
        if (t.w.alive) t.w.setClock('+0');
        rec.heal = monoMs();
        // The process reads its clock file about once a second: it has certainly jumped by then.
        rec.ref = rec.start + FAKETIME_CACHE_MS;
        rec.params = { offset, ms };
        rec.note = `${t.w.id}'s wall clock jumped ${offset} for ${ms}ms, then back`;
        break;
      }
      case 'clock-past': {
        const days = prng.int(14, 42);
        rec.role = 'new';
        rec.start = monoMs();
        const w = fleet.spawn({ origin: 'old-clock', mode: this.mode(), clock: `-${days}d` });
        rec.targets = [w.id];
        rec.spawned = [w.id];
        await w.waitFor((x) => x.started, 15_000);
        rec.heal = monoMs();
        rec.params = { days };
        rec.note = `${w.id} started with its wall clock ${days} days in the past (a guest restored from an old snapshot, never re-synced)`;
        break;
      }
      case 'proxy-delay': {
        const proxy = this.proxy();
        const ms = Math.round(prng.range(50, ttl * 0.6));
        const hold = this.hold([1500, 3000], [2000, 6000]);
        rec.start = monoMs();
        proxy.delay(ms);
        await sleep(hold);
        proxy.heal();
        rec.heal = monoMs();
        rec.params = { delayMs: ms, holdMs: hold };
        rec.note = `every byte to and from the store ${ms}ms late for ${hold}ms`;
        break;
      }
      case 'proxy-blackhole': {
        const proxy = this.proxy();
        const hold = Math.round(ttl * prng.range(1.5, 4));
        const after = prng.chance(0.5) ? 'flush' : 'reset';
        rec.start = monoMs();
        proxy.blackhole();
        await sleep(hold);
        proxy.heal(after);
        rec.heal = monoMs();
        rec.params = { holdMs: hold, after };
        rec.note = `store traffic held for ${hold}ms, then ${after === 'flush' ? 'delivered (the partition healed)' : 'the connections reset (TCP gave up)'}`;
        break;
      }
      case 'proxy-reset': {
        const proxy = this.proxy();
        const hold = Math.round(prng.range(200, 2000));
        rec.start = monoMs();
        proxy.reset();
        await sleep(hold);
        proxy.heal();
        rec.heal = monoMs();
        rec.params = { refusedMs: hold };
        rec.note = `every store connection reset, new ones refused for ${hold}ms`;
        break;
      }
      case 'restart': {
        const r = this.d.restarter;
        if (r === null) throw new Error('restart fault without a restarter');
        const down = Math.round(prng.range(200, 1500));
        rec.start = monoMs();
        await r.restart(down);
        rec.heal = monoMs();
        rec.params = { downMs: down };
        rec.note = `${r.describe} (down ${Math.round(rec.heal - rec.start)}ms)`;
        break;
      }
      case 'session-end': {
        const ender = this.d.sessions;
        if (ender === null) throw new Error('session-end fault without a session ender');
        const t = this.pick(1);
        if (t === null || t.role !== 'leader') return this.skipped(rec, 'no leader to end the session of');
        rec.targets = [t.w.id];
        rec.role = t.role;
        await this.midUnit(t.w);
        const since = monoMs();
        rec.start = since;
        const id = await ender.end(this.d.lease);
        if (id === null) return this.skipped(rec, `${t.w.id}'s term is not tied to a session (yet)`);
        // Healed when the holder has stood down (its session's close reached it), bounded by the
        // TTL: past that the term has expired whatever the holder noticed.
        const stood = await t.w.waitFor((x) => !x.leading, timing.storeTtlMs);
        rec.heal = monoMs();
        rec.params = { session: id, stoodDown: stood };
        rec.note = `${ender.describe} (${id}) of ${t.w.id}, whose process lives; ${stood ? 'it stood down' : 'it did not stand down within the TTL'}`;
        break;
      }
    }
    if (rec.ref === 0) rec.ref = PROCESS_FAULTS.has(kind) ? rec.start : rec.heal;
    return rec;
  }

  private proxy(): ChaosProxy {
    if (this.d.proxy === null) throw new Error('proxy fault without a proxy');
    return this.d.proxy;
  }

  private skipped(rec: FaultRecord, why: string): FaultRecord {
    rec.heal = rec.ref = monoMs();
    rec.note = `not injected: ${why}`;
    rec.params = { skipped: true };
    return rec;
  }
}
