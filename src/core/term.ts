import type { Timing } from './config.js';
import type { LeaseLostReason } from './errors.js';
import type { ClaimRequest, ClaimResult, GrantedClaim } from './port.js';

/**
 * One continuous tenure of a lease by one process: from an acquisition to the moment this
 * process stops believing it holds it. Renewals keep the term (and its token); anything else
 * starts a new one with a larger token.
 */
export interface Term {
  readonly name: string;
  /** The fencing token: pass it with every write to the resource. */
  readonly token: bigint;
  /** The holder id this term was acquired under. */
  readonly holder: string;
  /**
   * Aborts, with a LeaseLostError as its reason, when the term ends for any reason. Reading it
   * (`aborted`, `reason`, `throwIfAborted()`) first checks the local deadline and the suspension
   * detectors, so after a freeze it reads aborted at the same moment `lease.token` would refuse,
   * even before any timer has run: check it right before each write.
   */
  readonly signal: AbortSignal;
  /** When the term began, by the store's clock. */
  readonly acquiredAtMs: number;
  /**
   * The one check to make right before each write: returns the token while this term may still
   * write with it, exactly when `lease.token` would.
   * @throws {LeaseLostError} the term is over (its signal has aborted, with this error as reason).
   * @throws {NotLeaderError} a renewal is overdue or failed (jeopardy): wait for it, or stop.
   */
  assertValid(): bigint;
}

/** Unanswered renewal nonces remembered per term (etcd compares at most eight per renewal). */
export const MAX_UNCONFIRMED = 6;

/**
 * What a same-database fence keeps per term, apart from the renewal nonces: the lease row's
 * fence nonce (set by fenced writes only) and which values of it this process may have set.
 * Two processes restored from one snapshot share this state; the first fenced write after the
 * restore sets a nonce from fresh kernel randomness that the other has never seen.
 */
interface TermFenceState {
  /** Fence nonces this process set, or may have set (a COMMIT whose answer was lost). */
  known: string[];
  /** No fenced write of this term may have committed yet (the row's fence columns are an older term's). */
  first: boolean;
  /** The last fenced write's turn, while it has not settled; the next one waits for it. */
  tail: Promise<void> | undefined;
}

/** What an input did to the term; the Lease turns it into events, log lines and side effects. */
export type TermOutcome =
  /** Nothing changed that anyone needs to hear about (or the input was for a term already over). */
  | { kind: 'none' }
  /** The local deadline has passed: the term must end (see {@link TermMachine.deadlineVerdict}). */
  | { kind: 'deadline' }
  | { kind: 'renewed'; expiresInMs: number; roundTripMs: number; storeAdvanceMs: number; localAdvanceMs: number; recovered: boolean }
  /** The store ended it. `conflict`: re-contend under a new identity (a clone may share ours). */
  | { kind: 'lost'; reason: LeaseLostReason; detail: string; conflict: string | undefined }
  | { kind: 'jeopardy'; error: unknown };

interface TermInit {
  name: string;
  token: bigint;
  holder: string;
  acquiredAtMs: number;
  confirmed: string;
  unconfirmed: string[];
  deadline: number;
  renewDueAt: number;
  lastStoreNowMs: number;
  lastSentAt: number;
  fence: TermFenceState;
}

/**
 * The renewal side of one term, as a state machine: it is fed the store's answers, errors and
 * timeouts, each with the monotonic time it happened at, and says what they mean. It makes no
 * I/O and reads no clock, so every rule here is proven with plain numbers (test/unit).
 *
 * The instance is also the term's identity for answers in flight: an answer is only ever fed
 * to the machine of the term its request was made for, and a machine that has ended ignores it.
 */
export class TermMachine implements Term {
  readonly name: string;
  readonly token: bigint;
  readonly holder: string;
  readonly acquiredAtMs: number;
  readonly controller = new AbortController();
  readonly signal: AbortSignal = probedSignal(this.controller.signal, () => {
    if (!this.ended) this.probe?.();
  });
  /**
   * Set by the Lease: run before every read of the signal (and by assertValid). It notices a
   * passed deadline or a suspension no timer has noticed yet, and ends the term right there.
   */
  probe: (() => void) | undefined;
  /** Set by the Lease: assertValid's answer while the term has not ended (the token, or a throw). */
  validate: (() => bigint) | undefined;
  phase: 'leading' | 'jeopardy' | 'ended' = 'leading';
  /** The nonce the store confirmed last. */
  confirmed: string;
  /** Nonces sent in renewals whose answers never came: the store may hold one of them. */
  unconfirmed: string[];
  /** Monotonic ms after which this process no longer believes it leads. */
  deadline: number;
  renewDueAt: number;
  failures = 0;
  lastStoreNowMs: number;
  /** When the renewal that produced lastStoreNowMs was sent. */
  lastSentAt: number;
  /** A renewal of this term is in flight (one at a time, never overlapping). */
  inFlight = false;
  /** confirm() callers (and "freed" checks) waiting for the next round trip. */
  waiters: Array<() => void> = [];
  readonly fence: TermFenceState;

  constructor(
    private readonly timing: Timing,
    init: TermInit,
    private readonly random: () => number = Math.random,
  ) {
    this.name = init.name;
    this.token = init.token;
    this.holder = init.holder;
    this.acquiredAtMs = init.acquiredAtMs;
    this.confirmed = init.confirmed;
    this.unconfirmed = init.unconfirmed;
    this.deadline = init.deadline;
    this.renewDueAt = init.renewDueAt;
    this.lastStoreNowMs = init.lastStoreNowMs;
    this.lastSentAt = init.lastSentAt;
    this.fence = init.fence;
  }

  /**
   * A term from an acquisition the store granted to a claim sent at `sentAt`, or undefined when
   * the answer came back too late to use (its deadline already passed at `now`).
   */
  static granted(timing: Timing, result: GrantedClaim, holder: string, nonce: string, sentAt: number, now: number): TermMachine | undefined {
    // Measured from when the claim was sent: the store may have granted it at any point after.
    const deadline = sentAt + (result.expiresAtMs - result.storeNowMs) - timing.marginMs;
    if (deadline <= now) return undefined;
    // The first renewal is due a renew interval after the send, but never after the point where
    // the term would have to stand down without one, as for a renewal (answered). Defence in
    // depth: every store grants a whole TTL today (MySQL offers only to waiters that registered
    // to accept, `waiter_accepts`), but a grant shorter than a renew interval, renewed only
    // after its deadline, would pass that deadline while leading, which reads as a suspension
    // (deadlineVerdict): every lease of the process would stand down and its identity be replaced.
    const renewDueAt = Math.min(sentAt + timing.renewMs, deadline - timing.renewMs / 2);
    return new TermMachine(timing, {
      name: result.name,
      token: result.token,
      holder,
      acquiredAtMs: result.storeNowMs,
      confirmed: nonce,
      unconfirmed: [],
      deadline,
      renewDueAt,
      lastStoreNowMs: result.storeNowMs,
      lastSentAt: sentAt,
      fence: { known: [], first: true, tail: undefined },
    });
  }

  get ended(): boolean {
    return this.phase === 'ended';
  }

  assertValid(): bigint {
    this.probe?.();
    if (this.ended) throw this.controller.signal.reason as Error;
    return this.validate !== undefined ? this.validate() : this.token;
  }

  /** When the renewal batcher should send this term's next renewal: -Infinity when someone waits for one; undefined for none. */
  dueAt(): number | undefined {
    if (this.ended || this.inFlight) return undefined;
    return this.waiters.length > 0 ? -Infinity : this.renewDueAt;
  }

  pastDeadline(now: number): boolean {
    return !this.ended && now >= this.deadline;
  }

  /**
   * The claim for the next renewal, sent at `now` with a fresh nonce; 'deadline' when it is
   * too late to renew; undefined when nothing is to be sent.
   */
  request(now: number, nextNonce: string): ClaimRequest | 'deadline' | undefined {
    if (this.ended || this.inFlight) return undefined;
    if (now >= this.deadline) return 'deadline';
    const expect = [this.confirmed, ...this.unconfirmed];
    // Until an answer comes, the store may hold any nonce we sent: a renewal can land and its
    // answer be lost. Keep them all for the term (a term makes only a handful of attempts
    // before its deadline); past MAX_UNCONFIRMED the oldest is dropped, which at worst makes
    // the store call this process a clone and end the term: safe, and very unlikely.
    this.unconfirmed = [...this.unconfirmed, nextNonce].slice(-MAX_UNCONFIRMED);
    this.inFlight = true;
    return { name: this.name, holder: this.holder, ttlMs: this.timing.ttlMs, expect, nextNonce };
  }

  /** The store answered the renewal `req`, sent at `sentAt`; the answer arrived at `now`. */
  answered(req: ClaimRequest, result: ClaimResult, sentAt: number, now: number): TermOutcome {
    this.inFlight = false;
    if (this.ended) return { kind: 'none' }; // the term this was sent for already ended
    if (now >= this.deadline) return { kind: 'deadline' }; // a pause (or a slow answer) carried us past the point where we promised to stop
    if (result.outcome === 'renewed') {
      if (result.token !== this.token) {
        return { kind: 'lost', reason: 'superseded', detail: `the store renewed token ${result.token}, not this term's ${this.token}`, conflict: undefined };
      }
      // Between the previous store reading (taken after the previous send) and this one (taken
      // before now), at most now - previous send has really passed: anything beyond that on
      // the store's clock is time this process did not experience.
      const storeAdvanceMs = result.storeNowMs - this.lastStoreNowMs;
      const localAdvanceMs = now - this.lastSentAt;
      const { renewMs, marginMs } = this.timing;
      this.confirmed = req.nextNonce;
      this.unconfirmed = [];
      this.deadline = sentAt + (result.expiresAtMs - result.storeNowMs) - marginMs;
      // From the send time, like the deadline; but an answer that came back late must not make
      // the next renewal due at once (a slow store would then be renewed ever faster).
      // ...and never after the point where we would have to stand down without it.
      this.renewDueAt = Math.min(Math.max(sentAt + renewMs, now + renewMs / 2), this.deadline - renewMs / 2);
      this.lastStoreNowMs = result.storeNowMs;
      this.lastSentAt = sentAt;
      this.failures = 0;
      const recovered = this.phase === 'jeopardy';
      this.phase = 'leading';
      return { kind: 'renewed', expiresInMs: Math.round(result.expiresAtMs - result.storeNowMs), roundTripMs: now - sentAt, storeAdvanceMs, localAdvanceMs, recovered };
    }
    if (result.outcome === 'lost') {
      const why: Record<typeof result.reason, [LeaseLostReason, string]> = {
        expired: ['expired', 'the store says the term expired before the renewal reached it'],
        superseded: ['superseded', `the store says ${result.holder ?? 'another process'} holds it now`],
        cloned: ['superseded', 'another process with this holder id renewed it: a restored snapshot or a fork of this process'],
        revoked: ['revoked', 'an operator revoked it'],
        released: ['superseded', 'another process with this holder id released it: a restored snapshot or a fork of this process'],
      };
      const [reason, detail] = why[result.reason];
      // A term that ended in a conflict is re-contended under a new identity: if a clone
      // shares ours, that is the only way to tell the two apart from now on.
      return { kind: 'lost', reason, detail, conflict: result.reason === 'revoked' ? undefined : `term ended: ${result.reason}` };
    }
    return { kind: 'lost', reason: 'superseded', detail: `unexpected renewal outcome "${result.outcome}"`, conflict: undefined };
  }

  /** The renewal's outcome is unknown (an error, or no answer in time). Unknown is not yes. */
  failed(error: unknown, now: number): TermOutcome {
    this.inFlight = false;
    if (this.ended) return { kind: 'none' };
    this.failures++;
    // Retry soon, but never in a tight loop, and at least once more before the deadline.
    // (Once that last retry has failed too, the deadline ends the term: no retries in a loop.)
    const backoff = Math.min(this.timing.renewMs / 2, 100 * 2 ** Math.min(this.failures, 8));
    const retryAt = now + backoff * (0.5 + this.random() / 2);
    this.renewDueAt = now < this.deadline - 1 ? Math.min(retryAt, this.deadline - 1) : retryAt;
    if (this.phase !== 'leading') return { kind: 'none' };
    this.phase = 'jeopardy';
    return { kind: 'jeopardy', error };
  }

  /** The renewal in flight has not been answered after `waitedMs`: stop handing out the token. */
  overdue(error: unknown): TermOutcome {
    if (this.ended || !this.inFlight || this.phase !== 'leading') return { kind: 'none' };
    this.phase = 'jeopardy';
    return { kind: 'jeopardy', error };
  }

  /**
   * The local deadline passed, noticed at `now`. Noticed late, or reached without a single
   * failed or overdue renewal: nothing explains it but this process (or its event loop) having
   * been stopped, which is treated as a wake (every term ends, the identity is replaced).
   */
  deadlineVerdict(now: number): { suspect: boolean; lateMs: number; reason: LeaseLostReason; detail: string } {
    const lateMs = now - this.deadline;
    const suspect = lateMs > Math.max(250, this.timing.renewMs / 4) || this.phase === 'leading';
    return this.phase === 'jeopardy'
      ? { suspect, lateMs, reason: 'store-unreachable', detail: 'renewals kept failing until the local deadline' }
      : { suspect, lateMs, reason: 'expired', detail: 'no renewal landed before the local deadline' };
  }

  /** Ends the machine; returns the round-trip waiters to wake. Inputs after this are ignored. */
  end(): Array<() => void> {
    this.phase = 'ended';
    return this.waiters.splice(0);
  }
}

const abortSignalProto = AbortSignal.prototype as AbortSignal;
const abortedOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'aborted')!.get!;
const reasonOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'reason')!.get!;

/**
 * `signal`, with `probe` run before each read of `aborted`, `reason` and `throwIfAborted()`.
 * Timers alone cannot keep the signal in step with the token: after a freeze (SIGSTOP, a
 * blocked loop) every overdue timer fires in due order, and a work loop's is usually due before
 * the engine's, so it would read "not aborted" and write with a stale token one turn before the
 * deadline timer aborts. The probe aborts first, synchronously, its listeners included. The
 * signal stays a real AbortSignal (an own getter on the instance, not a Proxy: EventTarget and
 * AbortSignal.any check the instance's internal slots).
 */
function probedSignal(signal: AbortSignal, probe: () => void): AbortSignal {
  Object.defineProperties(signal, {
    aborted: {
      configurable: true,
      get(this: AbortSignal): boolean {
        probe();
        return abortedOf.call(this) as boolean;
      },
    },
    reason: {
      configurable: true,
      get(this: AbortSignal): unknown {
        probe();
        return reasonOf.call(this);
      },
    },
    throwIfAborted: {
      configurable: true,
      writable: true,
      value(this: AbortSignal): void {
        probe();
        abortSignalProto.throwIfAborted.call(this);
      },
    },
  });
  return signal;
}

/**
 * Fence: queues one fenced write of term `t` (Lease.fenceWrite). `previous` is the turn to wait
 * for, undefined when no write of the term is in flight: then the write goes at once, with no
 * abort listener and no race on its critical path (the common case; bench fence). `release`
 * ends this write's turn.
 */
export function queueFenceWrite(t: TermMachine): { previous: Promise<void> | undefined; release: () => void } {
  const f = t.fence;
  const previous = f.tail;
  let resolve!: () => void;
  const mine = new Promise<void>((r) => {
    resolve = r;
  });
  f.tail = mine;
  const release = (): void => {
    if (f.tail === mine) f.tail = undefined;
    resolve();
  };
  return { previous, release };
}

/** Fence: one fenced write's view of its term; see Lease.fenceWrite. */
export interface TermFenceWrite {
  readonly name: string;
  readonly holder: string;
  readonly token: bigint;
  /** The fence nonces the row may hold if no other process wrote with this term. */
  readonly expect: readonly string[];
  /** The row may still carry an older term's fence columns (no write of this term committed yet). */
  readonly first: boolean;
  /** The nonce to set: fresh kernel randomness, drawn after any snapshot of this process. */
  readonly next: string;
  /** The write's outcome, once known; lets the next fenced write of the term go. */
  settle(outcome: 'written' | 'not-written' | 'unknown'): void;
}

/**
 * One fenced write's view of term `t`, setting fence nonce `next` (fresh kernel randomness).
 * `release` lets the term's next fenced write go once this one has settled.
 */
export function issueFenceWrite(t: TermMachine, release: () => void, next: string): TermFenceWrite {
  const f = t.fence;
  let settled = false;
  return {
    name: t.name,
    holder: t.holder,
    token: t.token,
    expect: [...f.known],
    first: f.first,
    next,
    settle: (outcome) => {
      if (settled) return;
      settled = true;
      if (outcome === 'written') {
        f.known = [next];
        f.first = false;
      } else if (outcome === 'unknown') {
        // The COMMIT's answer was lost: the row may hold `next` or what it held before.
        // Past MAX_UNCONFIRMED the oldest goes: at worst a later write calls this a clone.
        f.known = [...f.known, next].slice(-MAX_UNCONFIRMED);
      }
      release();
    },
  };
}
