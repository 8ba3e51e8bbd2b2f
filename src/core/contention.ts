/**
 * Contention as a pure machine, as TermMachine (./term.ts) is for a held term: `Lease.contend`
 * (./lease.ts) does the I/O (the claim, the freed channel, the sleep, the events) and asks this
 * what each answer means. Every input carries its time (monotonic milliseconds); randomness is
 * injected, so the unit layer drives every case with numbers alone.
 *
 * One attempt, in order: `plan(holder, now)` before the claim is sent; then `answered(result)`
 * or `failed(err, now, ranOut)`; then `next(result, channelHeld, now)` says acquire, sleep or
 * give up. When contention stops without a term, `withdrawal()` names the registration to take
 * back.
 */
import { NotAcquiredError, isRetryableError } from './errors.js';
import type { ClaimResult } from './port.js';

/** While the store is unreachable, contention says so at most this often. */
export const OUTAGE_LINE_EVERY_MS = 5000;

/**
 * Handoff nonces one contender presents: the latest registration's, and the claims before it
 * whose answers were lost. Within the port's MAX_EXPECTED_NONCES.
 */
export const MAX_HANDOFF_NONCES = 4;

/**
 * How long a follower waits between checks while a freed channel that also reports expiry is up
 * (LeasePort.freedCoversExpiry): every release, revocation and expiry wakes it at once, and a
 * reconnect or a drop of the channel wakes it too, so this only bounds what a channel could miss
 * silently (a half-open connection, a watch on an etcd member cut off from its cluster). Ten TTLs
 * keep an idle follower's cost at a tenth of one request per TTL; the minute keeps short-TTL
 * followers from checking every few seconds.
 */
export function followerRecheckMs(ttlMs: number): number {
  return Math.max(10 * ttlMs, 60_000);
}

interface ContentionInit {
  name: string;
  ttlMs: number;
  renewMs: number;
  /** Monotonic time the wait ends: 0 for `wait: false`, Infinity for no bound. */
  waitUntil: number;
  /** The store hands a released term to its registered waiter (LeasePort.handover) and this lease takes part. */
  handsOver: boolean;
  /** In [0, 1): Math.random unless a test fixes it. */
  random?: () => number;
  /** AcquireOptions.unlessReleasedSince: a term granted since it, held or released, ends the wait. */
  unlessReleasedSince?: number;
  /**
   * An earlier contention's registration this one takes over (AcquireOptions.stayRegistered):
   * its nonces are this contender's as if it had sent them, so a term a release handed to them
   * is recognised as ours, and a withdrawal withdraws them too.
   */
  carried?: Registration | undefined;
}

/** A waiter registration: the holder id and the nonces it registered under. */
export interface Registration {
  holder: string;
  expect: string[];
}

/** What to send. */
interface AttemptPlan {
  /** This claim registers as the waiter a release may hand the term to. */
  waits: boolean;
  /** The nonces of earlier claims that may have left this contender a term (only when `waits`). */
  handoff: string[] | undefined;
  /** Listen for "freed" from before the claim: there is wait left to sleep in. */
  listen: boolean;
  /** The last look after a 'busy' answer as the wait ends: let it run to the store's own timeouts. */
  lastLook: boolean;
}

type ErrorVerdict =
  /** Waiting cannot fix it (a missing schema, a bad setting), or there is no wait: throw it. */
  | { kind: 'throw' }
  /** Retry; `warn` when this failure is worth a log line (the first, then one per OUTAGE_LINE_EVERY_MS). */
  | { kind: 'retry'; warn: { unreachableForMs: number } | undefined };

export type NextStep =
  /** The store granted a term under `nonce` (the registered one when a release handed it over). */
  | { kind: 'acquired'; nonce: string }
  /** Sleep up to `ms` (a "freed" notification ends it early). `busy`: who holds it, for the event. */
  | { kind: 'sleep'; ms: number; busy: BusyInfo | undefined }
  /** The wait is over without a term. */
  | { kind: 'give-up'; error: NotAcquiredError; busy: BusyInfo | undefined };

interface BusyInfo {
  holder: string | null;
  /** By the store's clock; null when the store did not say. */
  remainingMs: number | null;
}

export class ContentionMachine {
  private readonly init: ContentionInit;
  /** The caller stopped the wait (endWait). */
  private stopped = false;
  private readonly random: () => number;
  private errors = 0;
  private lastError: unknown;
  private lastErrorRanOut = false;
  private lastWarnedMs = -Infinity;
  private outageSinceMs = 0;
  private handoff: string[] = [];
  private handoffHolder: string | undefined;
  /** A 'busy' answer came: the store registered us (an outage alone never sends a withdrawal). */
  private registered = false;
  private won = false;
  /** The last 'busy' answer: a wait that ends on an unanswered claim after it is still contention, not an outage. */
  private lastBusy: (ClaimResult & { outcome: 'busy' }) | undefined;
  private attempt: { waits: boolean; nonce: string } | undefined;

  constructor(init: ContentionInit) {
    this.init = init;
    this.random = init.random ?? Math.random;
    if (init.carried !== undefined && init.handsOver) [this.handoff, this.handoffHolder, this.registered] = [[...init.carried.expect], init.carried.holder, true];
  }

  /** Before a claim with `nonce` is sent by `holder` at `now`. */
  plan(holder: string, nonce: string, now: number): AttemptPlan {
    // Nonces are only ever the holder id's they were sent with: a new identity starts afresh
    // (its first 'busy' claim replaces the old identity's registration).
    if (holder !== this.handoffHolder) [this.handoff, this.handoffHolder, this.registered] = [[], holder, false];
    // Only a contender that will wait registers: one that gives up at once never needs withdrawing.
    // One already registered (a claim answered 'busy', or a registration carried over) sends its
    // nonces whatever is left of the wait: a term a release handed it is then recognised as
    // ours, where a claim without them would find it 'busy', held by our own holder id.
    const waits = this.init.handsOver && ((this.init.waitUntil > now && !this.stopped) || this.registered);
    this.attempt = { waits, nonce };
    return {
      waits,
      handoff: waits ? [...this.handoff] : undefined,
      listen: this.init.waitUntil > now && !this.stopped,
      lastLook: this.lastBusy !== undefined && (this.init.waitUntil <= now || this.stopped),
    };
  }

  /**
   * The caller stopped the wait (AcquireOptions.stopWaiting): from here on it is a wait that has
   * run out, so the next answer that is not a term ends it (a claim in flight still counts).
   */
  endWait(): void {
    this.stopped = true;
  }

  /** The claim answered. */
  answered(result: ClaimResult): void {
    if (result.outcome === 'busy') this.lastBusy = result;
    this.errors = 0;
    this.noteRegistration(result);
  }

  /** The claim failed; `ranOut`: it was given up on because the wait ended while it was in flight. */
  failed(err: unknown, now: number, ranOut: boolean): ErrorVerdict {
    this.lastError = err;
    this.lastErrorRanOut = ranOut;
    // First, whatever the verdict: a registering claim whose answer was not seen may have
    // registered, and the withdrawal (or the next contention that carries it) must name it.
    this.noteRegistration(undefined);
    if (this.init.waitUntil === 0 || !isRetryableError(err)) return { kind: 'throw' };
    let warn: { unreachableForMs: number } | undefined;
    // An outage retried for minutes is one line every few seconds, not one per attempt; a claim
    // given up on as the wait ended is not retried, so there is nothing to warn about.
    if (!ranOut && (this.errors === 0 || now - this.lastWarnedMs >= OUTAGE_LINE_EVERY_MS)) {
      this.lastWarnedMs = now;
      if (this.errors === 0) this.outageSinceMs = now;
      warn = { unreachableForMs: Math.round(now - this.outageSinceMs) };
    }
    this.errors++;
    return { kind: 'retry', warn };
  }

  /**
   * What follows the attempt. `channelHeld`: a freed channel that also reports expiry was up
   * before the claim was sent and still is, so the holder's release or expiry will be notified.
   */
  next(result: ClaimResult | undefined, channelHeld: boolean, now: number): NextStep {
    const nonce = this.attempt?.nonce ?? '';
    if (result?.outcome === 'acquired') return { kind: 'acquired', nonce: result.nonce ?? nonce };
    const { ttlMs, renewMs, waitUntil } = this.init;
    let sleepMs: number;
    let busy: BusyInfo | undefined;
    if (result === undefined) {
      // Store down: back off exponentially, never a tight loop, never longer than a TTL.
      sleepMs = Math.min(ttlMs, 100 * 2 ** Math.min(this.errors, 10)) * (0.5 + this.random() / 2);
    } else {
      const remaining = result.expiresAtMs === null ? null : Math.max(0, result.expiresAtMs - result.storeNowMs);
      // A released-since refusal finds the lease free (its work done): nobody to report as holding it.
      if (!(result.outcome === 'busy' && result.releasedSince === true)) busy = { holder: result.holder, remainingMs: remaining };
      sleepMs = channelHeld
        ? followerRecheckMs(ttlMs) + this.random() * Math.min(5000, ttlMs)
        : // Never longer than one TTL: a reported expiry far away (a holder with a much longer
          // TTL, or a clock step on a one-host store) must not keep us asleep past a release we
          // missed. Never a negative answer cached for longer than it can be true.
          Math.min(remaining ?? renewMs, ttlMs) + this.random() * Math.min(250, ttlMs / 10) + 1;
    }
    const left = this.stopped ? 0 : waitUntil - now;
    if (left > 0 && !this.servedSince(result)) return { kind: 'sleep', ms: Math.min(sleepMs, left), busy };
    const last = result !== undefined ? result : this.lastErrorRanOut ? this.lastBusy : undefined;
    const error = new NotAcquiredError(
      this.init.name,
      last?.holder ?? null,
      last?.expiresAtMs == null ? null : Math.max(0, Math.round(last.expiresAtMs - last.storeNowMs)),
      waitUntil === 0 ? 'another process holds it' : this.stopped ? 'the wait was stopped' : 'the wait ran out',
    );
    if (result === undefined && last === undefined) (error as { cause?: unknown }).cause = this.lastError;
    if (last?.outcome === 'busy' && last.releasedSince === true) error.releasedSince = true;
    if (last?.outcome === 'busy' && last.grantedAtMs !== undefined) error.grantedAtMs = last.grantedAtMs;
    return { kind: 'give-up', error, busy };
  }

  /**
   * With unlessReleasedSince: the answer shows a term granted since then (released, or holding
   * the lease now). That term is the one this contender waited to follow: nothing to wait for.
   */
  private servedSince(result: ClaimResult | undefined): boolean {
    const since = this.init.unlessReleasedSince;
    if (since === undefined || result?.outcome !== 'busy') return false;
    return result.releasedSince === true || (result.grantedAtMs !== undefined && result.grantedAtMs >= since);
  }

  /**
   * Stopped without a term, with the last answer a term granted before unlessReleasedSince (or
   * none answered at all): the registration is still worth keeping for a contention that
   * follows at once (AcquireOptions.stayRegistered). Not when the last answer was a term granted
   * since (its holder is the one to follow; a registration kept would be handed its term).
   */
  staysRegistered(): boolean {
    return !this.won && this.registered && !this.servedSince(this.lastBusy);
  }

  /** A term from this contention began. */
  wins(): void {
    this.won = true;
  }

  /**
   * Stopped without a term (aborted, closed, the wait ran out): the registration to withdraw, so
   * that no release hands the term to a process that is not waiting for it. The same statement
   * releases a term handed over meanwhile.
   */
  withdrawal(): { holder: string; expect: string[] } | undefined {
    if (this.won || !this.registered || this.handoffHolder === undefined) return undefined;
    return { holder: this.handoffHolder, expect: [...this.handoff] };
  }

  /** One-write handover: a claim that waits and got 'busy', or no answer, may be the registered waiter. */
  private noteRegistration(result: ClaimResult | undefined): void {
    const a = this.attempt;
    if (a === undefined || !a.waits) return;
    if (result === undefined || result.outcome === 'busy') this.handoff = [...this.handoff, a.nonce].slice(-MAX_HANDOFF_NONCES);
    if (result?.outcome === 'busy') this.registered = true;
  }
}
