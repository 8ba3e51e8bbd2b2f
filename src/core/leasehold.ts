import { EventEmitter } from 'node:events';
import { realClock, type Clock, type ClockTimer } from './clock.js';
import { ClosedError, ConfigError, LeaseLostError, errorMessage } from './errors.js';
import { newHolderId } from './identity.js';
import { Lease, type AcquireOptions, type LeaseOptions, type Term } from './lease.js';
import type { HeldTerm } from './leasehold-host.js';
import { RenewalBatcher } from './renewal-batcher.js';
import { ReleaseBatcher } from './release-batcher.js';
import { silentLogger, type LoggerLike } from './logger.js';
import { Elector, type ElectorHandlers } from './elector.js';
import type { ClaimRequest, ClaimResult, LeasePort, ReleaseRequest } from './port.js';
import { AGENT_LEASE_OPTIONS, AGENT_LEASE_PREFIX } from './reserved.js';

export type SuspicionDetector = 'wall-clock-jump' | 'store-clock-advance' | 'deadline-passed' | 'manual';

export interface SuspensionOptions {
  /** Stand down when the wall clock moves this much more (or less) than the monotonic clock between two checks. Default 2000ms. */
  wallJumpMs?: number;
  /** How often to compare the clocks. Default 500ms. */
  checkIntervalMs?: number;
  /**
   * Stand down when the store's clock advanced this much more than the local monotonic clock
   * between two renewals. Default max(ttl/4, 500ms) of the lease concerned.
   */
  storeAdvanceMs?: number;
}

export interface LeaseholdOptions {
  store: LeasePort;
  /** pino-compatible; default silent. */
  logger?: LoggerLike;
  /** A readable prefix for the holder id (default `host:pid`). 128 kernel-random bits are always appended. */
  holderLabel?: string;
  /** close() also closes the store. Default false (true when leasehold opened it from a URL). */
  closeStore?: boolean;
  /** Suspension detectors (wall-clock jump, store-clock advance). `false` turns off the wall-clock watchdog. */
  suspension?: SuspensionOptions | false;
  /**
   * The clocks and timers the engine uses (default: the process's own). For tests: a fake clock
   * proves the engine's timing rules without sleeping. The store's clock still decides expiry.
   */
  clock?: Clock;
}

export interface RunContext {
  token: bigint;
  signal: AbortSignal;
  term: Term;
  lease: Lease;
  /** One renewal round trip; the token if still held. Use before an unfenceable side effect. */
  confirm(): Promise<bigint>;
}

export interface RunExclusiveOptions extends LeaseOptions, AcquireOptions {}

export interface LeaseholdEvents {
  /** A detector decided this process was suspended, restored or cloned; every term was ended. */
  suspected: [detector: SuspicionDetector, detail: string];
  identity: [holder: string, why: string];
}

/**
 * A process's connection to one store: it owns the holder identity, one renewal batcher through
 * which every acquisition and renewal goes (in as few round trips as possible), one "freed"
 * listener, and the suspension detectors. Create one per store per process.
 */
// Not `implements LeaseHost`: that interface is the engine's plumbing, stripped from the public
// types; Lease checks the shape where it is handed a Leasehold.
export class Leasehold extends EventEmitter<LeaseholdEvents> {
  readonly store: LeasePort;
  readonly logger: LoggerLike;
  readonly clock: Clock;
  private holderId: string;
  private readonly holderLabel: string | undefined;
  private readonly closeStore: boolean;
  private readonly suspension: Required<SuspensionOptions> | undefined;
  private closed = false;
  private readonly leases = new Set<Lease>();
  private readonly enrolled = new Set<HeldTerm>();
  private readonly batcher: RenewalBatcher;
  private readonly releases: ReleaseBatcher;
  private wallTimer: ClockTimer | undefined;
  private lastWall: number;
  private lastMono: number;
  private readonly freedWaiters = new Map<string, Set<() => void>>();
  private freedStop: Promise<(() => Promise<void>) | undefined> | undefined;
  private freedRetryAt = 0;
  /** Counts the freed channel's ups and downs; meaningful only while `freedUp`. */
  private freedEpochCount = 0;
  private freedUp = false;

  constructor(options: LeaseholdOptions) {
    super();
    if (options?.store === undefined) throw new ConfigError('new Leasehold({ store }) needs a store; see openStore(url)');
    this.store = options.store;
    this.logger = options.logger ?? silentLogger;
    this.clock = options.clock ?? realClock;
    this.lastWall = this.clock.wallNow();
    this.lastMono = this.clock.monoNow();
    this.batcher = new RenewalBatcher(this.store, this.clock, () => this.checkSuspension());
    this.releases = new ReleaseBatcher(this.store);
    this.holderLabel = options.holderLabel;
    this.holderId = newHolderId(options.holderLabel);
    this.closeStore = options.closeStore ?? false;
    if (options.suspension !== false) {
      this.suspension = {
        wallJumpMs: options.suspension?.wallJumpMs ?? 2000,
        checkIntervalMs: options.suspension?.checkIntervalMs ?? 500,
        storeAdvanceMs: options.suspension?.storeAdvanceMs ?? -1,
      };
    }
  }

  /** This process instance's holder id. Changes after a suspected clone, restore or wake. */
  get holder(): string {
    return this.holderId;
  }

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  currentHolder(): string {
    return this.holderId;
  }

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  regenerateIdentity(why: string): void {
    this.holderId = newHolderId(this.holderLabel);
    this.logger.warn({ holder: this.holderId, why }, 'leasehold: new holder identity');
    this.emit('identity', this.holderId, why);
  }

  /**
   * A handle on one named lease. Nothing happens until `acquire()`.
   * @throws {ConfigError} bad name or timing, or a name under `agent/` (reserved for fleet agents).
   */
  lease(name: string, options: LeaseOptions = {}): Lease {
    if (this.closed) throw new ClosedError('this Leasehold is closed; create a new one to take leases again');
    if (typeof name === 'string' && name.startsWith(AGENT_LEASE_PREFIX) && !AGENT_LEASE_OPTIONS.has(options)) {
      // Holding agent/<id> is what makes fleet agent <id> alive (src/fleet): only an Agent may.
      throw new ConfigError(
        `lease name ${JSON.stringify(name)} is reserved: leases under "${AGENT_LEASE_PREFIX}" are fleet agents' liveness, and holding one would make ` +
          `agent "${name.slice(AGENT_LEASE_PREFIX.length)}" look alive. Run an agent with \`leasehold agent --id ID\` (or Agent.start), or pick another name`,
      );
    }
    const lease = new Lease(this, name, options);
    this.leases.add(lease);
    return lease;
  }

  /**
   * Acquires `name`, runs `fn` with the token and a signal that aborts if the lease is lost,
   * and releases when `fn` settles. Rejects with the LeaseLostError if the term ended before
   * `fn` finished, even if `fn` itself resolved: its later writes may have been fenced.
   */
  async runExclusive<T>(name: string, fn: (ctx: RunContext) => Promise<T> | T, options: RunExclusiveOptions = {}): Promise<T> {
    const lease = this.lease(name, options);
    try {
      const term = await lease.acquire({ wait: options.wait ?? true, signal: options.signal });
      const result = await fn({ token: term.token, signal: term.signal, term, lease, confirm: () => lease.confirm() });
      if (term.signal.aborted && !(term.signal.reason instanceof LeaseLostError && term.signal.reason.reason === 'released')) {
        throw term.signal.reason as Error;
      }
      return result;
    } finally {
      await lease.close();
    }
  }

  /** A long-running contender: `onElected(term)` for each term won, `onRevoked(term, error)` when it ends. */
  elect(name: string, handlers: ElectorHandlers, options: LeaseOptions & { signal?: AbortSignal } = {}): Elector {
    const elector = new Elector(this.lease(name, options), handlers, this.logger, options.signal, this.clock);
    elector.start();
    return elector;
  }

  // ---- the renewal batcher's terms ---------------------------------------------------------------

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  claim(req: ClaimRequest): Promise<ClaimResult> {
    this.checkStoreSettings();
    return this.batcher.acquire(req);
  }

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  release(req: ReleaseRequest): Promise<boolean> {
    return this.releases.release(req);
  }

  private settingsChecked = false;

  /**
   * Once per client, at its first claim: store settings that break leasehold's promises without
   * failing any call (a Redis that may evict lease records) are one warn line each, not silence.
   */
  private checkStoreSettings(): void {
    if (this.settingsChecked || this.store.checkSettings === undefined) return;
    this.settingsChecked = true;
    void this.store.checkSettings().then(
      (found) => {
        for (const c of found) {
          if (c.status !== 'ok') this.logger.warn({ store: this.store.description, check: c.check, status: c.status }, `leasehold: store setting: ${c.detail}`);
        }
      },
      () => {}, // never rejects by contract; a store that does anyway costs only the warning
    );
  }

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  enroll(held: HeldTerm): void {
    this.enrolled.add(held);
    // A holder listens for its own lease being freed: an operator's revocation then reaches it
    // in milliseconds instead of at the next scheduled renewal (see wake()).
    this.ensureFreedWatch();
    this.startWallWatchdog();
    this.updateKeepAlive();
    this.batcher.add(held);
  }

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  unenroll(held: HeldTerm): void {
    this.enrolled.delete(held);
    this.batcher.delete(held);
    if (this.enrolled.size === 0) this.stopWallWatchdog();
    this.updateKeepAlive();
  }

  /**
   * While this process holds a term or someone awaits an acquisition, keep the event loop
   * alive: some drivers unref their sockets, and a process that exits while it believes it
   * leads (or while `await acquire()` is pending) surprises everyone. Release or close to exit.
   */
  private contending = 0;
  private keepAlive: NodeJS.Timeout | undefined;
  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  retainWhileContending(delta: 1 | -1): void {
    this.contending += delta;
    this.updateKeepAlive();
  }

  private updateKeepAlive(): void {
    const want = !this.closed && (this.enrolled.size > 0 || this.contending > 0);
    if (want && this.keepAlive === undefined) this.keepAlive = setInterval(() => {}, 1 << 30);
    if (!want && this.keepAlive !== undefined) {
      clearInterval(this.keepAlive);
      this.keepAlive = undefined;
    }
  }

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  forget(lease: Lease): void {
    this.leases.delete(lease);
  }

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  renewNow(): void {
    this.batcher.wake();
  }

  // ---- suspension detectors ------------------------------------------------------------------

  private startWallWatchdog(): void {
    if (this.suspension === undefined || this.wallTimer !== undefined) return;
    this.lastWall = this.clock.wallNow();
    this.lastMono = this.clock.monoNow();
    const interval = this.suspension.checkIntervalMs;
    const check = (): void => {
      const mine = this.wallTimer;
      this.checkSuspension();
      // Re-armed after the check, unless the check stood everything down (which stopped it).
      if (this.wallTimer !== mine) return;
      this.wallTimer = this.clock.setTimeout(check, interval);
      this.wallTimer.unref();
    };
    this.wallTimer = this.clock.setTimeout(check, interval);
    this.wallTimer.unref();
  }

  private stopWallWatchdog(): void {
    this.clock.clearTimeout(this.wallTimer);
    this.wallTimer = undefined;
  }

  /**
   * Detector 1: the wall clock moved much more (or less) than the monotonic clock since the
   * last check. That is what a restored or woken guest looks like once its clock is re-synced:
   * the suspension shows on the wall clock, never on the monotonic one.
   * @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API
   */
  checkSuspension(): void {
    const wall = this.clock.wallNow();
    const mono = this.clock.monoNow();
    const drift = wall - this.lastWall - (mono - this.lastMono);
    this.lastWall = wall;
    this.lastMono = mono;
    if (this.suspension === undefined) return;
    if (Math.abs(drift) > this.suspension.wallJumpMs) {
      this.suspect('wall-clock-jump', `the wall clock moved ${Math.round(drift)}ms more than the monotonic clock`);
    }
  }

  /**
   * Detector 2: the store's clock advanced much more than our monotonic clock between two
   * renewals. Works when the guest's wall clock was never re-synced after a restore.
   * @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API
   */
  noteStoreAdvance(storeAdvanceMs: number, localAdvanceMs: number, ttlMs: number): void {
    if (this.suspension === undefined) return;
    const limit = this.suspension.storeAdvanceMs >= 0 ? this.suspension.storeAdvanceMs : Math.max(ttlMs / 4, 500);
    const gap = storeAdvanceMs - localAdvanceMs;
    if (gap > limit) {
      this.suspect('store-clock-advance', `the store's clock advanced ${Math.round(gap)}ms more than the monotonic clock between renewals`);
    }
  }

  /**
   * Treat it exactly as a process start: end every term (their signals fire with reason
   * "suspended" and the detector in the message), take a new identity, contend afresh.
   */
  suspect(detector: SuspicionDetector, detail: string): void {
    // Reached again from inside (a 'lost' or abort listener reading another term, which then
    // notices the same freeze): end whatever is still held, but it is one suspicion, not two.
    if (this.suspecting) {
      for (const h of [...this.enrolled]) h.suspend(`${detector}: ${detail}`);
      return;
    }
    this.suspecting = true;
    try {
      this.standDownAll(detector, detail);
    } finally {
      this.suspecting = false;
    }
  }

  private suspecting = false;

  private standDownAll(detector: SuspicionDetector, detail: string): void {
    const held = [...this.enrolled];
    if (held.length > 0 || detector !== 'wall-clock-jump') {
      this.logger.warn({ detector, detail, held: held.length }, 'leasehold: suspension suspected; standing down');
    }
    this.regenerateIdentity(`${detector}: ${detail}`);
    // Released as well as ended: the release only matches our own nonces, so it can never end
    // a term the store has since given to someone else, and it spares the next holder the wait.
    for (const h of held) h.suspend(`${detector}: ${detail}`);
    this.emit('suspected', detector, detail);
  }

  // ---- freed notifications -----------------------------------------------------------------

  /** @internal the engine's own plumbing (Lease, the renewal batcher, the detectors), not public API */
  waitForFreed(name: string, signal: AbortSignal): { promise: Promise<void>; cancel(): void } {
    let wake: () => void = () => {};
    const promise = new Promise<void>((resolve) => {
      wake = resolve;
    });
    const onAbort = (): void => wake();
    // An already-aborted signal never fires 'abort' again: wake at once.
    if (signal.aborted) wake();
    else signal.addEventListener('abort', onAbort, { once: true });
    let set = this.freedWaiters.get(name);
    if (set === undefined) this.freedWaiters.set(name, (set = new Set()));
    set.add(wake);
    this.ensureFreedWatch();
    return {
      promise,
      cancel: () => {
        signal.removeEventListener('abort', onAbort);
        const s = this.freedWaiters.get(name);
        s?.delete(wake);
        if (s?.size === 0) this.freedWaiters.delete(name);
      },
    };
  }

  /**
   * @internal the engine's own plumbing: while a freed channel that also reports expiry
   * (LeasePort.freedCoversExpiry) is up, an id of this up-period; else undefined. A follower
   * that read it before its claim and finds it unchanged after may wait on the channel alone.
   */
  freedEpoch(): number | undefined {
    return this.freedUp && this.store.freedCoversExpiry === true ? this.freedEpochCount : undefined;
  }

  private setFreedUp(up: boolean): void {
    this.freedUp = up && !this.closed;
    this.freedEpochCount++;
  }

  private ensureFreedWatch(): void {
    if (this.freedStop !== undefined || this.store.watchFreed === undefined || this.closed) return;
    if (this.clock.monoNow() < this.freedRetryAt) return;
    let wentDown = false;
    this.freedStop = this.store
      .watchFreed(
        (name) => this.wake(name),
        () => {
          this.setFreedUp(true);
          // Notifications sent while the channel was down are gone: everyone re-checks.
          for (const n of [...this.freedWaiters.keys()]) this.wake(n);
          for (const l of this.enrolled) l.checkNow();
        },
        () => {
          wentDown = true;
          if (!this.freedUp) return;
          this.setFreedUp(false);
          // Followers waiting on the channel alone go back to polling at expiry.
          for (const n of [...this.freedWaiters.keys()]) this.wake(n);
        },
      )
      .then((stop) => {
        if (wentDown) return stop;
        this.setFreedUp(true);
        // Followers that claimed before the channel was up re-check now, and then wait on it,
        // rather than at their next poll: the same one check, sooner.
        if (this.store.freedCoversExpiry === true) for (const n of [...this.freedWaiters.keys()]) this.wake(n);
        return stop;
      })
      .catch((err: unknown) => {
        this.logger.warn({ err: errorMessage(err) }, 'leasehold: could not listen for releases; followers poll at expiry');
        this.freedRetryAt = this.clock.monoNow() + 5000;
        this.freedStop = undefined;
        return undefined;
      });
  }

  private wake(name: string): void {
    // A lease this process holds was freed (revoked, or released by a clone): renew it now. The
    // notification only triggers the check; the store's answer decides, and it never counts
    // as a renewal, so a forged or stale notification can cost a round trip, never extend a term.
    for (const l of this.enrolled) if (l.name === name) l.checkNow();
    const set = this.freedWaiters.get(name);
    if (set === undefined) return;
    for (const w of [...set]) w();
  }

  // ---- shutdown ------------------------------------------------------------------------------

  /** Releases every held lease (best effort), stops listening, and closes the store if owned. */
  async close(): Promise<void> {
    if (this.closed) return;
    const leases = [...this.leases];
    await Promise.allSettled(leases.map((l) => l.close()));
    this.closed = true;
    this.updateKeepAlive();
    this.batcher.close();
    this.stopWallWatchdog();
    const stop = await this.freedStop;
    this.setFreedUp(false);
    await stop?.().catch(() => {});
    if (this.closeStore) await this.store.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

