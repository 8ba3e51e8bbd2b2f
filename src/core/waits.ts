/**
 * Waiting inside contention, bounded: a claim that may not outlast the caller's `wait`, a sleep
 * that a "freed" notification ends early, a promise raced against a caller's signal. Each takes
 * the injected clock and leaves no timer or listener behind.
 */
import type { Clock, ClockTimer } from './clock.js';
import { AbortedError, StoreUnavailableError } from './errors.js';

/** The errors of claims given up on because the wait ended while they were in flight (outcome unknown). */
const waitRanOut = new WeakSet<object>();

/** True for the error claimWithinWait rejects with when the wait ran out first. */
export function ranOutOfWait(err: unknown): boolean {
  return typeof err === 'object' && err !== null && waitRanOut.has(err);
}

/**
 * The claim, or a StoreUnavailableError (`message`) once `waitUntil` (monotonic) passes: an
 * attempt, its connect included, never outlasts the wait, whatever the store's own timeouts
 * are. A claim given up on still settles later: `lateAnswer` gets its answer then (an
 * 'acquired' one must be handed straight back). No bound for `waitUntil` 0 or Infinity.
 */
export async function claimWithinWait<T>(clock: Clock, claim: Promise<T>, waitUntil: number, message: string, lateAnswer: (r: T) => void): Promise<T> {
  if (waitUntil === Infinity || waitUntil === 0) return await claim;
  let timer: ClockTimer | undefined;
  let abandoned = false;
  const late = new Promise<never>((_, reject) => {
    timer = clock.setTimeout(
      () => {
        abandoned = true;
        const err = new StoreUnavailableError(message);
        waitRanOut.add(err);
        reject(err);
      },
      Math.max(0, waitUntil - clock.monoNow()),
    );
  });
  void claim.then(
    (r) => {
      if (abandoned) lateAnswer(r);
    },
    () => {},
  );
  try {
    return await Promise.race([claim, late]);
  } finally {
    clock.clearTimeout(timer);
  }
}

/** Sleeps for `ms`, or until a "freed" notification (or the signal) since the claim was sent. */
export async function sleepOrFreed(clock: Clock, ms: number, freed: { promise: Promise<void>; cancel(): void }): Promise<void> {
  let timer: ClockTimer | undefined;
  try {
    await Promise.race([
      freed.promise,
      new Promise<void>((resolve) => {
        timer = clock.setTimeout(resolve, ms);
      }),
    ]);
  } finally {
    clock.clearTimeout(timer);
    freed.cancel();
  }
}

/**
 * After an acquisition answered too late to use (its local deadline had passed: a slow store, a
 * paused process). The store holds that term under the claim's nonce (an accepted offer holds
 * the one the accepting claim sent, which no later claim presents), and answers every claim
 * 'busy' until it ends: a whole TTL from the grant. So `handBack` releases it under that nonce:
 * the release is fenced by the holder id and the nonce, so it ends this term only, never one
 * granted since (a takeover after its expiry holds another nonce), and the lease is free, or
 * offered to the next waiter, at once. Resolves when a claim is worth sending again: at once
 * once the store said it ended the term; otherwise (no `handBack`, refused, or the store
 * unreachable) after `leftMs`, the term's time left, or a freed wake-up.
 */
export async function afterLateGrant(clock: Clock, leftMs: number, handBack: (() => Promise<boolean>) | undefined, freed: () => { promise: Promise<void>; cancel(): void }): Promise<void> {
  if (handBack !== undefined && (await handBack().catch(() => false))) return;
  await sleepOrFreed(clock, leftMs, freed());
}

/** A freed wake-up that also fires when `signal` aborts (undefined: the wake-up as it is). */
export function wakeOnAbort(freed: { promise: Promise<void>; cancel(): void }, signal: AbortSignal | undefined): { promise: Promise<void>; cancel(): void } {
  if (signal === undefined) return freed;
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<void>((resolve) => {
    onAbort = resolve;
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  return {
    promise: Promise.race([freed.promise, aborted]),
    cancel() {
      freed.cancel();
      if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
    },
  };
}

/** Races a promise against a caller's signal without leaving listeners behind. */
export async function withSignal<T>(p: Promise<T>, signal: AbortSignal | undefined, abortError: (signal: AbortSignal) => unknown = (s) => new AbortedError('aborted by the caller', { cause: s.reason })): Promise<T> {
  if (signal === undefined) return p;
  signal.throwIfAborted();
  let onAbort: (() => void) | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        onAbort = () => reject(abortError(signal));
        signal.addEventListener('abort', onAbort, { once: true });
      }),
    ]);
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
}

/** One call at a time: a call made while another is on its way joins it (`current`) instead of starting its own. */
export class InFlight<T> {
  current: Promise<T> | undefined;

  run(f: () => Promise<T>): Promise<T> {
    const p = f();
    this.current = p;
    const clear = (): void => {
      if (this.current === p) this.current = undefined;
    };
    p.then(clear, clear);
    return p;
  }
}
