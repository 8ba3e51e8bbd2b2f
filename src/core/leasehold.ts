import { EventEmitter } from 'node:events';
import { realClock, type Clock, type ClockTimer } from './clock.js';
import { LeaseLostError, LeaseholdError, errorMessage } from './errors.js';
import { newHolderId, newNonces } from './identity.js';
import { Lease, type AcquireOptions, type LeaseHost, type LeaseOptions, type RenewalTicket, type Term } from './lease.js';
import { silentLogger, type LoggerLike } from './logger.js';
import { Elector, type ElectorHandlers } from './elector.js';
import type { ClaimRequest, LeaseStore } from '../backends/store.js';

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
  store: LeaseStore;
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

interface Renewal {
  lease: Lease;
  req: ClaimRequest;
  ticket: RenewalTicket;
  waiters: Array<{ resolve: () => void }>;
}

/** How many leases one claim round trip carries at most. */
const MAX_BATCH = 5000;

/**
 * A process's connection to one store: it owns the holder identity, one renewal scheduler that
 * renews every held lease in as few round trips as possible, one "freed" listener, and the
 * suspension detectors. Create one per store per process.
 */
export class Leasehold extends EventEmitter<LeaseholdEvents> implements LeaseHost {
  readonly store: LeaseStore;
  readonly logger: LoggerLike;
  readonly clock: Clock;
  private holderId: string;
  private readonly holderLabel: string | undefined;
  private readonly closeStore: boolean;
  private readonly suspension: Required<SuspensionOptions> | undefined;
  private closed = false;
  private readonly leases = new Set<Lease>();
  private readonly enrolled = new Set<Lease>();
  private tickTimer: ClockTimer | undefined;
  private tickAt = Infinity;
  private wallTimer: ClockTimer | undefined;
  private lastWall: number;
  private lastMono: number;
  private readonly freedWaiters = new Map<string, Set<() => void>>();
  private freedStop: Promise<(() => Promise<void>) | undefined> | undefined;
  private freedRetryAt = 0;

  constructor(options: LeaseholdOptions) {
    super();
    if (options?.store === undefined) throw new LeaseholdError('CONFIG', 'new Leasehold({ store }) needs a store; see openStore(url)');
    this.store = options.store;
    this.logger = options.logger ?? silentLogger;
    this.clock = options.clock ?? realClock;
    this.lastWall = this.clock.wallNow();
    this.lastMono = this.clock.monoNow();
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

  currentHolder(): string {
    return this.holderId;
  }

  regenerateIdentity(why: string): void {
    this.holderId = newHolderId(this.holderLabel);
    this.logger.warn({ holder: this.holderId, why }, 'leasehold: new holder identity');
    this.emit('identity', this.holderId, why);
  }

  /**
   * A handle on one named lease. Nothing happens until `acquire()`.
   * @throws {ConfigError} bad name or timing.
   */
  lease(name: string, options: LeaseOptions = {}): Lease {
    if (this.closed) throw new LeaseholdError('CONFIG', 'this Leasehold is closed');
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

  // ---- renewal scheduler -------------------------------------------------------------------

  enroll(lease: Lease): void {
    this.enrolled.add(lease);
    // A holder listens for its own lease being freed: an operator's revocation then reaches it
    // in milliseconds instead of at the next scheduled renewal (see wake()).
    this.ensureFreedWatch();
    this.startWallWatchdog();
    this.updateKeepAlive();
    this.scheduleTick();
  }

  unenroll(lease: Lease): void {
    this.enrolled.delete(lease);
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

  forget(lease: Lease): void {
    this.leases.delete(lease);
  }

  requestRenewal(_lease: Lease): void {
    this.scheduleTick(true);
  }

  private scheduleTick(now = false): void {
    if (this.closed) return;
    let at = Infinity;
    if (now) at = this.clock.monoNow();
    else {
      for (const l of this.enrolled) {
        if (l.inFlight) continue;
        const due = l.confirmWaiters.length > 0 ? -Infinity : (l.renewDueAt ?? Infinity);
        if (due < at) at = due;
      }
    }
    if (at === Infinity) return;
    if (this.tickTimer !== undefined && at >= this.tickAt) return;
    this.clock.clearTimeout(this.tickTimer);
    this.tickAt = at;
    this.tickTimer = this.clock.setTimeout(() => {
      this.tickTimer = undefined;
      this.tickAt = Infinity;
      this.tick();
    }, Math.max(0, at - this.clock.monoNow()));
    // The keep-alive interval holds the process open while a term is held, not this timer.
    this.tickTimer.unref();
  }

  /**
   * Renews every held lease that is due, or due within half a renew interval, in one claim per
   * MAX_BATCH leases. Renewing early is harmless, and it aligns leases acquired at different
   * moments: leases renewed together share a send time and stay together, and groups closer
   * than half an interval merge, so a process holding 10,000 leases settles into one or two
   * round trips per renew interval.
   */
  private tick(): void {
    const now = this.clock.monoNow();
    this.checkSuspension();
    const due = [...this.enrolled].filter(
      (lease) => !lease.inFlight && (lease.confirmWaiters.length > 0 || lease.renewalDue(now, lease.timing.renewMs / 2)),
    );
    // One kernel read for every nonce of this tick, not one per lease.
    const nonces = newNonces(due.length);
    const batch: Renewal[] = [];
    due.forEach((lease, i) => {
      const r = lease.renewalRequest(now, nonces[i]);
      if (r !== undefined) batch.push({ lease, req: r.req, ticket: r.ticket, waiters: lease.confirmWaiters.splice(0) });
    });
    for (let i = 0; i < batch.length; i += MAX_BATCH) {
      void this.sendBatch(batch.slice(i, i + MAX_BATCH), now);
    }
    this.scheduleTick();
  }

  private async sendBatch(batch: Renewal[], sentAt: number): Promise<void> {
    // An answer that is late is as unknown as an error: jeopardy after half a renew interval,
    // and after a whole one we stop waiting (the call may hang on a dead connection for far
    // longer) so the retry can go out on another. A late answer is then ignored; its nonce
    // stays among the ones the next renewal presents.
    const renewMs = Math.min(...batch.map((b) => b.lease.timing.renewMs));
    const overdue = this.clock.setTimeout(() => {
      for (const b of batch) b.lease.renewalOverdue(b.ticket, this.clock.monoNow() - sentAt);
    }, renewMs / 2);
    overdue.unref();
    let giveUp: ClockTimer | undefined;
    const controller = new AbortController();
    try {
      const results = await Promise.race([
        this.store.claim(
          batch.map((b) => b.req),
          { signal: controller.signal },
        ),
        new Promise<never>((_, reject) => {
          giveUp = this.clock.setTimeout(() => {
            controller.abort();
            reject(new LeaseholdError('STORE_UNAVAILABLE', `the renewal was not answered within ${renewMs}ms`, { retryable: true }));
          }, renewMs);
          giveUp.unref();
        }),
      ]);
      batch.forEach((b, i) => {
        const r = results[i];
        b.lease.renewalSettled(b.ticket);
        if (r === undefined || r.name !== b.req.name) b.lease.renewalFailed(b.ticket, new LeaseholdError('STORE_UNAVAILABLE', 'store answered out of order', { retryable: true }));
        else b.lease.renewalAnswered(b.ticket, b.req, r, sentAt, this);
      });
    } catch (err) {
      for (const b of batch) {
        b.lease.renewalSettled(b.ticket);
        b.lease.renewalFailed(b.ticket, err);
      }
    } finally {
      this.clock.clearTimeout(overdue);
      this.clock.clearTimeout(giveUp);
      for (const b of batch) for (const w of b.waiters) w.resolve();
      this.scheduleTick();
    }
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
   */
  noteStoreAdvance(storeAdvanceMs: number, localAdvanceMs: number, lease: Lease): void {
    if (this.suspension === undefined) return;
    const limit = this.suspension.storeAdvanceMs >= 0 ? this.suspension.storeAdvanceMs : Math.max(lease.timing.ttlMs / 4, 500);
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
    const held = [...this.enrolled];
    if (held.length > 0 || detector !== 'wall-clock-jump') {
      this.logger.warn({ detector, detail, held: held.length }, 'leasehold: suspension suspected; standing down');
    }
    this.regenerateIdentity(`${detector}: ${detail}`);
    // Released as well as ended: the release only matches our own nonces, so it can never end
    // a term the store has since given to someone else, and it spares the next holder the wait.
    for (const lease of held) lease.suspend(`${detector}: ${detail}`);
    this.emit('suspected', detector, detail);
  }

  // ---- freed notifications -----------------------------------------------------------------

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

  private ensureFreedWatch(): void {
    if (this.freedStop !== undefined || this.store.watchFreed === undefined || this.closed) return;
    if (this.clock.monoNow() < this.freedRetryAt) return;
    this.freedStop = this.store
      .watchFreed(
        (name) => this.wake(name),
        () => {
          // Notifications sent while the channel was down are gone: everyone re-checks.
          for (const n of [...this.freedWaiters.keys()]) this.wake(n);
          for (const l of this.enrolled) l.checkNow();
        },
      )
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
    this.clock.clearTimeout(this.tickTimer);
    this.stopWallWatchdog();
    const stop = await this.freedStop;
    await stop?.().catch(() => {});
    if (this.closeStore) await this.store.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

