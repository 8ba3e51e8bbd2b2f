import type { Clock, ClockTimer } from './clock.js';
import { ClosedError, StoreUnavailableError } from './errors.js';
import { newNonces } from './identity.js';
import type { ClaimRequest, ClaimResult, LeasePort } from './port.js';

/** How many leases one claim round trip carries at most, unless the store says otherwise (maxClaimBatch). */
export const MAX_BATCH = 5000;

/**
 * The renewal batcher's view of one held term. Answers go back to the object the request came from,
 * which belongs to that term alone: an answer for a term that has since ended finds it ended.
 */
export interface Renewal {
  readonly name: string;
  readonly renewMs: number;
  /** When the next renewal is wanted; -Infinity for "now"; undefined for none (in flight, or over). */
  dueAt(): number | undefined;
  /** The claim to send at `now` (undefined: nothing to send after all). */
  request(now: number, nextNonce: string): ClaimRequest | undefined;
  answered(req: ClaimRequest, result: ClaimResult, sentAt: number): void;
  /** The outcome is unknown: an error, or no answer within a renew interval. */
  failed(error: unknown): void;
  /** No answer after half a renew interval. */
  overdue(waitedMs: number): void;
  /** Callers waiting for the next round trip of this term (woken once it is over). */
  takeWaiters(): Array<() => void>;
}

type Item =
  | { kind: 'renew'; renewal: Renewal; req: ClaimRequest; waiters: Array<() => void> }
  | { kind: 'acquire'; req: ClaimRequest; resolve: (r: ClaimResult) => void; reject: (err: unknown) => void };

/**
 * The one I/O loop between a process's leases and its store: acquisitions and renewals alike
 * go out through it, so both share round trips. Each tick sends everything that is due (every
 * queued acquisition, every renewal due within half a renew interval) in one claim per
 * MAX_BATCH leases (or the store's maxClaimBatch). Renewing early is harmless, and it aligns leases acquired at different
 * moments: leases renewed together share a send time and stay together, and groups closer than
 * half an interval merge, so a process holding 10,000 leases settles into one or two round
 * trips per renew interval.
 */
export class RenewalBatcher {
  private readonly renewals = new Set<Renewal>();
  private acquisitions: Array<Extract<Item, { kind: 'acquire' }>> = [];
  private timer: ClockTimer | undefined;
  private timerAt = Infinity;
  private immediate = false;
  private closed = false;

  constructor(
    private readonly store: LeasePort,
    private readonly clock: Clock,
    /** Runs before each tick (the suspension check: a woken process must not renew first). */
    private readonly beforeTick: () => void,
  ) {}

  add(renewal: Renewal): void {
    this.renewals.add(renewal);
    // Only the newcomer can make the next tick earlier: no scan of every held term (a process
    // acquiring 10,000 leases would otherwise scan 10,000 x 10,000 times).
    const due = renewal.dueAt();
    if (due !== undefined) this.arm(due);
  }

  delete(renewal: Renewal): void {
    this.renewals.delete(renewal);
  }

  /** Ticks at once (someone waits for a round trip). */
  wake(): void {
    this.schedule(true);
  }

  /** One acquisition attempt, sent with the next tick (at once, with whatever else is due). */
  acquire(req: ClaimRequest): Promise<ClaimResult> {
    return new Promise((resolve, reject) => {
      if (this.closed) return reject(new ClosedError('this Leasehold is closed; create a new one to take leases again'));
      this.acquisitions.push({ kind: 'acquire', req, resolve, reject });
      this.schedule(true);
    });
  }

  close(): void {
    this.closed = true;
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(now = false): void {
    if (this.closed) return;
    if (now) {
      // Within this turn of the event loop, not on a timer: whatever else is asked for in the
      // same turn (acquisitions of many leases at start-up) goes out in the same round trip.
      if (this.immediate) return;
      this.immediate = true;
      queueMicrotask(() => {
        this.immediate = false;
        if (!this.closed) this.tick();
      });
      return;
    }
    let at = Infinity;
    for (const r of this.renewals) {
      const due = r.dueAt();
      if (due !== undefined && due < at) at = due;
    }
    this.arm(at);
  }

  /** Makes sure a tick happens at `at` or earlier. */
  private arm(at: number): void {
    if (this.closed || at === Infinity) return;
    if (this.timer !== undefined && at >= this.timerAt) return;
    this.clock.clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = this.clock.setTimeout(
      () => {
        this.timer = undefined;
        this.timerAt = Infinity;
        this.tick();
      },
      Math.max(0, at - this.clock.monoNow()),
    );
    // The Leasehold's keep-alive holds the process open while a term is held, not this timer.
    this.timer.unref();
  }

  private tick(): void {
    this.beforeTick();
    const now = this.clock.monoNow();
    const due = [...this.renewals].filter((r) => {
      const at = r.dueAt();
      return at !== undefined && at - r.renewMs / 2 <= now;
    });
    // One kernel read for every nonce of this tick, not one per lease.
    const nonces = newNonces(due.length);
    const batch: Item[] = this.acquisitions.splice(0);
    due.forEach((renewal, i) => {
      const req = renewal.request(now, nonces[i]!);
      if (req !== undefined) batch.push({ kind: 'renew', renewal, req, waiters: renewal.takeWaiters() });
    });
    const cap = this.store.maxClaimBatch ?? MAX_BATCH;
    for (let i = 0; i < batch.length; i += cap) void this.send(batch.slice(i, i + cap), now);
    this.schedule();
  }

  private async send(batch: Item[], sentAt: number): Promise<void> {
    const renewals = batch.filter((b): b is Extract<Item, { kind: 'renew' }> => b.kind === 'renew');
    const acquisitions = batch.filter((b): b is Extract<Item, { kind: 'acquire' }> => b.kind === 'acquire');
    // An answer that is late is as unknown as an error: jeopardy after half a renew interval,
    // and after a whole one we stop waiting (the call may hang on a dead connection for far
    // longer) so the retry can go out on another. A late answer is then ignored; its nonce
    // stays among the ones the next renewal presents. Acquisitions wait for the store's own
    // answer (or error), as they would alone: a lost acquisition answer costs a TTL's wait.
    const renewMs = Math.min(...renewals.map((b) => b.renewal.renewMs));
    const controller = new AbortController();
    const call = this.store.claim(
      batch.map((b) => b.req),
      acquisitions.length === 0 ? { signal: controller.signal } : {},
    );
    void call.then(
      (results) =>
        batch.forEach((a, i) => {
          if (a.kind !== 'acquire') return;
          const r = results[i];
          if (r === undefined || r.name !== a.req.name) a.reject(new StoreUnavailableError('the store answered out of order; this is retryable'));
          else a.resolve(r);
        }),
      (err: unknown) => acquisitions.forEach((a) => a.reject(err)),
    );
    if (renewals.length === 0) return;
    const overdue = this.clock.setTimeout(() => {
      for (const b of renewals) b.renewal.overdue(this.clock.monoNow() - sentAt);
    }, renewMs / 2);
    overdue.unref();
    let giveUp: ClockTimer | undefined;
    try {
      const results = await Promise.race([
        call,
        new Promise<never>((_, reject) => {
          giveUp = this.clock.setTimeout(() => {
            controller.abort();
            reject(new StoreUnavailableError(`the renewal was not answered within ${renewMs}ms; this is retryable`));
          }, renewMs);
          giveUp.unref();
        }),
      ]);
      batch.forEach((b, i) => {
        if (b.kind !== 'renew') return;
        const r = results[i];
        if (r === undefined || r.name !== b.req.name) b.renewal.failed(new StoreUnavailableError('the store answered out of order; this is retryable'));
        else b.renewal.answered(b.req, r, sentAt);
      });
    } catch (err) {
      for (const b of renewals) b.renewal.failed(err);
    } finally {
      this.clock.clearTimeout(overdue);
      this.clock.clearTimeout(giveUp);
      for (const b of renewals) for (const w of b.waiters) w();
      this.schedule();
    }
  }
}
