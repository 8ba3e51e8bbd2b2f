/**
 * Watching leases without contending for them: who holds which lease, with which token, until
 * when (by the store's clock). Never claims, never renews: it only reads `store.list()`.
 *
 * Load, and why it is bounded like a follower's:
 * - A held lease is read again when the store said it would expire (a dead holder shows there),
 *   not before: while its holder keeps renewing, that is one read per 2/3 to 1 TTL.
 * - The store's "freed" notifications (where it has them) wake the watcher at once: a release
 *   or a revocation is seen in one round trip.
 * - An expired or freed lease is about to be taken by a follower, and nothing notifies an
 *   acquisition: it is re-read after 100ms, then 200ms, 400ms, ... up to `maxIntervalMs` (by
 *   default the TTL the lease was last granted for, as seen while held; 30s when never seen held:
 *   a freed row's expiry is the release instant, which says nothing about its TTL). A "no holder" answer is never kept: it is
 *   re-read on that schedule for as long as it lasts.
 * - Reads are at least `minIntervalMs` apart whatever wakes them, so many leases expiring at
 *   different moments cannot turn into a read storm.
 */
import { EventEmitter } from 'node:events';
import { ConfigError, errorMessage } from '../core/errors.js';
import { DEFAULT_TTL_MS, validateLeaseName } from '../core/config.js';
import { realClock, type Clock, type ClockTimer } from '../core/clock.js';
import type { LeaseInfo, LeaseStore } from '../backends/store.js';

/** One lease as the store reported it, with the moment (monotonic) the answer came back. */
export interface LeaseView {
  name: string;
  /** Null when free. */
  holder: string | null;
  /** The last token issued for this name (the current term's, when held). */
  token: bigint;
  state: LeaseInfo['state'];
  expiresAtMs: number | null;
  /** The store's clock when it answered: `expiresAtMs - storeNowMs` is the time left. */
  storeNowMs: number;
  termStartedAtMs: number | null;
  renewedAtMs: number | null;
}

/**
 * What changed, as seen from outside: `initial` (the first reading), `new-term` (a new holder or
 * token), `expired` (the holder stopped renewing; not taken yet), `freed` (released or revoked;
 * `leasehold history` says which), `renewed` is never reported (a renewal changes nothing an
 * observer acts on), `gone` (the lease no longer exists in the store).
 */
export type ChangeKind = 'initial' | 'new-term' | 'expired' | 'freed' | 'gone';

export interface LeaseChange {
  kind: ChangeKind;
  lease: LeaseView;
  previous: LeaseView | null;
}

export interface WatchOptions {
  /** Stops the watcher (and ends its async iteration). */
  signal?: AbortSignal;
  /** The longest time between two reads while nothing changes. Default: the leases' TTL as last granted (30s when unknown). */
  maxIntervalMs?: number;
  /** The shortest time between two reads, whatever wakes the watcher. Default 100ms. */
  minIntervalMs?: number;
  /**
   * How long the back-off may grow while a lease is free or expired, or no lease exists yet (an
   * acquisition notifies nothing). Default: maxIntervalMs.
   */
  idleIntervalMs?: number;
  /**
   * Also re-read a held lease after this fraction of its TTL (0 < f <= 1), to show a fresh
   * expiry (a renewal notifies nothing). Default: only at the expiry. The dashboard uses 0.5:
   * its countdown then never runs out on a healthy holder that renews at TTL/3.
   */
  heldRefresh?: number;
  /**
   * The clock and timers the watcher reads and schedules by (default: the process's own). For
   * tests: a fake clock counts the watcher's reads over hours without sleeping.
   */
  clock?: Clock;
}

export interface WatcherEvents {
  /** Every lease, after each successful read; `changes` is empty when nothing changed (a renewal). */
  update: [leases: ReadonlyMap<string, LeaseView>, changes: LeaseChange[]];
  change: [change: LeaseChange];
  /** A read failed; the watcher retries (backing off up to maxIntervalMs) and never gives up. */
  'store-error': [error: unknown];
}

const FIRST_FAST_MS = 100;
/** After the store-reported expiry: the holder's last renewal may still be landing. */
const EXPIRY_SLACK_MS = 50;

/**
 * A store, or a Leasehold. A Leasehold's store is typed as the engine's narrow port; observing
 * needs the store's `list()` as well, which every built-in store has (checked at run time).
 */
/** What observing needs of a store: its list, and its "freed" notifications where it has them. */
export type ObservableStore = Pick<LeaseStore, 'list' | 'watchFreed'>;
type Source = ObservableStore | { readonly store: object };
const storeOf = (s: Source): ObservableStore =>
  typeof (s as Partial<ObservableStore>).list === 'function' ? (s as ObservableStore) : ((s as { store: object }).store as ObservableStore);

function view(l: LeaseInfo): LeaseView {
  return {
    name: l.name,
    holder: l.holder,
    token: l.token,
    state: l.state,
    expiresAtMs: l.expiresAtMs,
    storeNowMs: l.storeNowMs,
    termStartedAtMs: l.termStartedAtMs,
    renewedAtMs: l.renewedAtMs,
  };
}

/** The shortest TTL a lease can be granted (resolveTiming refuses less). */
const MIN_TTL_MS = 100;

/**
 * The TTL a reading shows, or undefined when it shows none. Only a held lease with a future expiry
 * (or an expired one: its expiry is where its last renewal put it) has expiry minus last renewal
 * equal to its TTL. A released or revoked row's expiry is the release instant, so there it is the
 * gap between the last renewal and the release, often a few ms: capping the read interval at it
 * read such a lease ten times a second for ever (issue 31).
 */
function ttlOf(l: LeaseView): number | undefined {
  const from = l.renewedAtMs ?? l.termStartedAtMs;
  if (l.expiresAtMs === null || from === null || l.expiresAtMs <= from) return undefined;
  if (l.state === 'held' ? l.expiresAtMs > l.storeNowMs : l.state === 'expired') return l.expiresAtMs - from;
  return undefined;
}

function classify(prev: LeaseView | undefined, next: LeaseView, first: boolean): ChangeKind | undefined {
  if (prev === undefined && first) return 'initial';
  if (prev === undefined) return next.state === 'held' ? 'new-term' : next.state === 'expired' ? 'expired' : 'freed';
  if (next.holder !== null && next.state === 'held' && (next.token !== prev.token || next.holder !== prev.holder || prev.state !== 'held')) return 'new-term';
  if (next.state === prev.state && next.holder === prev.holder && next.token === prev.token) return undefined;
  if (next.state === 'expired') return 'expired';
  if (next.state === 'free' || next.holder === null) return 'freed';
  return 'new-term';
}

/**
 * Watches every lease in a store (or one, with `name`). One store subscription and one read
 * loop, however many listeners: the dashboard shares one between all its browsers.
 */
export class LeaseWatcher extends EventEmitter<WatcherEvents> {
  readonly store: ObservableStore;
  readonly name: string | undefined;
  private readonly minIntervalMs: number;
  private readonly maxIntervalMs: number | undefined;
  private readonly idleIntervalMs: number | undefined;
  private readonly heldRefresh: number | undefined;
  private leases = new Map<string, LeaseView>();
  private readAt = new Map<string, number>();
  /** Each lease's TTL as last granted, kept while it is free (see ttlOf). */
  private ttls = new Map<string, number>();
  private started = false;
  private stopped = false;
  private readonly clock: Clock;
  private timer: ClockTimer | undefined;
  private timerAt = Infinity;
  private reading = false;
  private haveRead = false;
  private again = false;
  private lastReadAt = -Infinity;
  private fastMs = FIRST_FAST_MS;
  private failures = 0;
  private unwatch: Promise<(() => Promise<void>) | undefined> | undefined;
  private ready: Promise<void>;
  private markReady: () => void = () => {};
  /** Reads made, by what caused them: the load this watcher puts on the store. */
  readonly reads = { total: 0, timer: 0, notification: 0, start: 0 };

  constructor(source: Source, options: WatchOptions & { name?: string } = {}) {
    super();
    for (const key of ['maxIntervalMs', 'minIntervalMs', 'idleIntervalMs'] as const) {
      const v = options[key];
      if (v !== undefined && !(Number.isFinite(v) && v > 0)) throw new ConfigError(`${key} must be a positive number of milliseconds, got ${String(v)}`);
    }
    if (options.heldRefresh !== undefined && !(options.heldRefresh > 0 && options.heldRefresh <= 1)) {
      throw new ConfigError(`heldRefresh is a fraction of the TTL, from just above 0 to 1; got ${String(options.heldRefresh)}`);
    }
    this.store = storeOf(source);
    if (typeof (this.store as Partial<ObservableStore> | undefined)?.list !== 'function') throw new ConfigError('observe() needs a Leasehold or a LeaseStore (see openStore(url))');
    if (options.name !== undefined) validateLeaseName(options.name);
    this.name = options.name;
    this.minIntervalMs = Math.max(10, options.minIntervalMs ?? 100);
    this.maxIntervalMs = options.maxIntervalMs;
    this.idleIntervalMs = options.idleIntervalMs;
    this.heldRefresh = options.heldRefresh === undefined ? undefined : Math.min(1, Math.max(0.05, options.heldRefresh));
    this.clock = options.clock ?? realClock;
    this.ready = new Promise((resolve) => (this.markReady = resolve));
    const signal = options.signal;
    if (signal !== undefined) {
      if (signal.aborted) this.stopped = true;
      else signal.addEventListener('abort', () => void this.close(), { once: true });
    }
  }

  private storeClock: { storeNowMs: number; at: number } | undefined;

  /** The store's clock now, estimated from the last reading (undefined before one with a lease in it). */
  storeNow(): number | undefined {
    return this.storeClock === undefined ? undefined : this.storeClock.storeNowMs + (this.clock.monoNow() - this.storeClock.at);
  }

  /** Every lease as last read. */
  get current(): ReadonlyMap<string, LeaseView> {
    return this.leases;
  }

  /** Starts reading and listening. Resolves after the first read (successful or not). */
  start(): Promise<void> {
    if (this.started || this.stopped) return this.ready;
    this.started = true;
    if (this.store.watchFreed !== undefined) {
      this.unwatch = this.store
        .watchFreed(
          (name) => {
            if (this.name === undefined || name === this.name) this.wake('notification');
          },
          () => this.wake('notification'),
        )
        .catch((err: unknown) => {
          // Without notifications the expiry and back-off schedule still sees every change, later.
          this.emit('store-error', err);
          return undefined;
        });
    }
    void this.read('start');
    return this.ready;
  }

  /** Re-read soon (at most minIntervalMs after the last read). */
  private wake(cause: 'notification'): void {
    if (this.stopped) return;
    this.fastMs = FIRST_FAST_MS;
    this.schedule(Math.max(0, this.lastReadAt + this.minIntervalMs - this.clock.monoNow()), cause);
  }

  private schedule(delayMs: number, cause: 'timer' | 'notification'): void {
    if (this.stopped) return;
    const at = this.clock.monoNow() + delayMs;
    if (this.timer !== undefined && this.timerAt <= at) return;
    this.clock.clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.timerAt = Infinity;
      void this.read(cause);
    }, delayMs);
    this.timer.unref();
  }

  /** Never throws: a timer calls it. */
  private async read(cause: 'timer' | 'notification' | 'start'): Promise<void> {
    if (this.stopped) return;
    if (this.reading) {
      this.again = true;
      return;
    }
    this.reading = true;
    this.lastReadAt = this.clock.monoNow();
    this.reads.total++;
    this.reads[cause]++;
    let changes: LeaseChange[] = [];
    const first = !this.haveRead;
    let ok = false;
    try {
      const list = await this.store.list(this.name === undefined ? {} : { name: this.name });
      const at = this.clock.monoNow();
      const next = new Map<string, LeaseView>();
      for (const l of list) {
        const v = view(l);
        next.set(v.name, v);
        this.readAt.set(v.name, at);
        const ttl = ttlOf(v);
        if (ttl !== undefined) this.ttls.set(v.name, ttl);
        const kind = classify(this.leases.get(v.name), v, first);
        if (kind !== undefined) changes.push({ kind, lease: v, previous: this.leases.get(v.name) ?? null });
      }
      for (const [name, prev] of this.leases) {
        if (!next.has(name)) {
          changes.push({ kind: 'gone', lease: { ...prev, holder: null, state: 'free', expiresAtMs: null }, previous: prev });
          this.readAt.delete(name);
          this.ttls.delete(name);
        }
      }
      this.leases = next;
      if (list.length > 0) this.storeClock = { storeNowMs: Math.max(...list.map((l) => l.storeNowMs)), at };
      this.failures = 0;
      this.haveRead = true;
      ok = true;
    } catch (err) {
      changes = [];
      this.failures++;
      if (!this.stopped) this.emit('store-error', err);
    } finally {
      this.reading = false;
    }
    if (this.stopped) return;
    if (changes.some((c) => c.kind !== 'initial')) this.fastMs = FIRST_FAST_MS;
    if (ok) {
      try {
        for (const c of changes) this.emit('change', c);
        this.emit('update', this.leases, changes);
      } catch (err) {
        // A listener's bug must not stop the watch.
        this.emit('store-error', new Error(`a listener threw: ${errorMessage(err)}`));
      }
    }
    if (cause === 'start') this.markReady();
    if (this.again) {
      this.again = false;
      this.schedule(this.minIntervalMs, 'notification');
      return;
    }
    this.schedule(this.nextDelay(), 'timer');
  }

  private cap(): number {
    if (this.maxIntervalMs !== undefined) return this.maxIntervalMs;
    let ttl = Infinity;
    for (const name of this.leases.keys()) {
      const known = this.ttls.get(name);
      if (known !== undefined) ttl = Math.min(ttl, known);
    }
    return ttl === Infinity ? DEFAULT_TTL_MS : Math.max(MIN_TTL_MS, ttl);
  }

  private nextDelay(): number {
    const cap = this.cap();
    if (this.failures > 0) return Math.min(cap, FIRST_FAST_MS * 2 ** Math.min(this.failures, 10));
    const now = this.clock.monoNow();
    let delay = cap;
    let fast = false;
    for (const l of this.leases.values()) {
      if (l.state === 'held' && l.expiresAtMs !== null) {
        const readAt = this.readAt.get(l.name) ?? now;
        delay = Math.min(delay, readAt + (l.expiresAtMs - l.storeNowMs) + EXPIRY_SLACK_MS - now);
        const from = l.renewedAtMs ?? l.termStartedAtMs;
        if (this.heldRefresh !== undefined && from !== null && l.expiresAtMs > from) {
          delay = Math.min(delay, readAt + this.heldRefresh * (l.expiresAtMs - from) - now);
        }
      } else fast = true;
    }
    // Expired, free or not there yet: a follower may take it any moment and nothing tells us when.
    if (fast || this.leases.size === 0) {
      const idle = Math.min(cap, this.idleIntervalMs ?? cap);
      delay = Math.min(delay, this.fastMs, idle);
      this.fastMs = Math.min(this.fastMs * 2, idle);
    }
    return Math.max(this.minIntervalMs, delay);
  }

  /** Stops reading and listening. Idempotent. */
  async close(): Promise<void> {
    if (this.stopped && this.unwatch === undefined) return;
    this.stopped = true;
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.markReady();
    const unwatch = this.unwatch;
    this.unwatch = undefined;
    const stop = await unwatch;
    await stop?.().catch(() => {});
    this.emit('update', this.leases, []);
  }

  get closed(): boolean {
    return this.stopped;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/**
 * Follows one lease's holder without contending: an async iterable of changes (the first
 * reading included) and an emitter of the same ('change', 'store-error'). Store errors do not
 * end the iteration; the watcher retries. Stop with `signal`, `close()`, or by leaving a
 * `for await` loop.
 *
 *   for await (const c of observe(leasehold, 'nightly-report', { signal })) {
 *     console.log(c.kind, c.lease.holder, c.lease.token, c.lease.expiresAtMs);
 *   }
 */
export function observe(source: Source, name: string, options: WatchOptions = {}): LeaseObserver {
  return new LeaseObserver(source, name, options);
}

export class LeaseObserver extends LeaseWatcher implements AsyncIterable<LeaseChange> {
  private readonly queue: LeaseChange[] = [];
  private waiting: ((r: IteratorResult<LeaseChange>) => void) | undefined;

  constructor(source: Source, name: string, options: WatchOptions = {}) {
    super(source, { ...options, name });
    this.on('change', (c) => {
      const w = this.waiting;
      if (w !== undefined) {
        this.waiting = undefined;
        w({ value: c, done: false });
      } else {
        this.queue.push(c);
        // A consumer that stopped reading must not make the observer grow without bound.
        if (this.queue.length > 1000) this.queue.shift();
      }
    });
    this.on('update', () => {
      if (this.closed && this.waiting !== undefined) {
        const w = this.waiting;
        this.waiting = undefined;
        w({ value: undefined, done: true });
      }
    });
    // Listening for errors keeps an EventEmitter from throwing them; iteration goes on.
    this.on('store-error', () => {});
    void this.start();
  }

  /** The lease as last read (undefined before the first read, or when it does not exist). */
  get lease(): LeaseView | undefined {
    return this.name === undefined ? undefined : this.current.get(this.name);
  }

  [Symbol.asyncIterator](): AsyncIterator<LeaseChange> {
    return {
      next: () => {
        const c = this.queue.shift();
        if (c !== undefined) return Promise.resolve({ value: c, done: false });
        if (this.closed) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiting = resolve));
      },
      return: async () => {
        await this.close();
        return { value: undefined, done: true };
      },
    };
  }
}
