/**
 * Liveness 'session' (LeaseOptions.liveness, issue 32): a term tied to a session of its holder's
 * own, so that a holder that dies (its connection closes) is replaced within milliseconds
 * instead of at its TTL. docs/liveness.md has the safety argument. This file holds what the
 * Lease needs around its port: the refusal of stores that cannot do it, and the session a
 * contender keeps open while it waits (and hands to its term when it wins).
 */
import { sleepOn, type Clock } from './clock.js';
import { LivenessError } from './errors.js';
import type { LoggerLike } from './logger.js';
import type { CallOptions, ClaimResult, LeasePort, LeaseSession } from './port.js';

/** How a lease's holder is judged alive: its renewals alone (`ttl`), or also its session. */
export type Liveness = 'ttl' | 'session';

/**
 * Why a store without {@link LeasePort.openSession} cannot do it. Stores are named by kind here
 * (rather than in their folders) so that one table says, for every store, what the mode needs.
 */
const REFUSALS: Record<string, string> = {
  redis:
    "Redis scripts cannot see connections: a Lua script cannot ask whether the holder's client is still connected, " +
    "so the store cannot end a term when its holder's connection closes; a dead holder's term ends at its TTL",
  etcd:
    "etcd leases are TTL-only: an etcd lease ends when its keepalives stop for its TTL, never when a connection closes, " +
    'so there is no earlier sign of the holder\'s death to act on; use a shorter TTL on etcd instead',
  memory: 'the in-memory store has no sessions',
};

/**
 * Validates the option and that the store can honour it.
 * @throws {LivenessError} (`unsupported`) a store that cannot tie a term to a session.
 */
export function checkLiveness(liveness: Liveness | undefined, store: LeasePort, name: string): Liveness {
  const mode = liveness ?? 'ttl';
  if (mode !== 'ttl' && mode !== 'session') throw new LivenessError('unsupported', `liveness must be 'ttl' or 'session', not ${JSON.stringify(liveness)}`);
  if (mode === 'session' && store.openSession === undefined) {
    const why = REFUSALS[store.kind] ?? `the ${store.kind} store does not implement sessions (LeasePort.openSession)`;
    throw new LivenessError(
      'unsupported',
      `lease "${name}": liveness 'session' is not available on ${store.kind}: ${why}. Use liveness 'ttl' (the default) there, or a PostgreSQL store`,
    );
  }
  return mode;
}

/**
 * How many claims in a row a contender sends again at once after a 'busy' that only says the
 * session lock is free (ClaimResult `sessionLockFree`). Each such answer means another session
 * took the lock and let it go between this contender's two looks; past a few, that churn is
 * contention like any other, and the ordinary busy path (a short sleep, woken by the lock) follows.
 */
const FREE_LOCK_RETRIES = 3;

/**
 * A contender's session: opened before its first claim (a refusal surfaces there, before any
 * term), opened again if it ends while waiting, and handed to the term on a win. A session the
 * caller gave (AcquireOptions.session) is used instead, and stays the caller's unless a term
 * takes it.
 */
export class ContenderSession {
  private session: LeaseSession | undefined;
  /** Whether the session held the lease's session lock when the last claim went out. */
  private heldAtClaim = false;
  /** Claims sent again in a row after a 'busy' that said the session lock is free. */
  private freeLockRetries = 0;

  constructor(
    private readonly store: LeasePort,
    private readonly name: string,
    private readonly ttlMs: number,
    private readonly given?: LeaseSession,
  ) {
    this.session = given;
  }

  /** The session's id for the next claim, opening one first when there is none. */
  async id(options?: CallOptions): Promise<string> {
    if (this.session === undefined || this.session.ended) {
      if (this.session !== this.given) void this.session?.close();
      this.session = await this.store.openSession!(this.name, this.ttlMs, options);
    }
    this.heldAtClaim = this.session.holdsLock;
    return this.session.id;
  }

  /**
   * After a claim's answer: true when the claim should go again now, because the store did not
   * grant it only for the session lock being free (its holder let go after this session missed
   * it, as it opened or since). The session takes the lock first: a lock wait, granted at once
   * while the lock is free, given at most the store's grace for a rival (least of 2 s and a
   * quarter of the TTL; sql/015-session-lock-free.ts): a session that took the lock meanwhile
   * claims within that, and the store's next answer decides either way. Without this a slow
   * contender, whose claim landed after the lock's holder had come and gone, held a term tied to
   * nothing (its holder's death noticed at its TTL), or a one-attempt acquire failed for a lease
   * that was free.
   */
  async claimAgain(result: ClaimResult | undefined, clock: Clock, signal: AbortSignal): Promise<boolean> {
    if (result?.outcome !== 'busy' || result.sessionLockFree !== true || this.freeLockRetries >= FREE_LOCK_RETRIES) {
      this.freeLockRetries = 0;
      return false;
    }
    this.freeLockRetries++;
    const s = this.session;
    // Ended: the next claim opens a session, which takes the lock as it opens.
    if (s === undefined || s.ended || s.holdsLock) return true;
    const graceMs = Math.min(2000, this.ttlMs / 4);
    const stop = new AbortController();
    await Promise.race([s.waitForLock(graceMs), sleepOn(clock, graceMs, AbortSignal.any([signal, stop.signal]))]);
    stop.abort();
    return !signal.aborted;
  }

  /** A follower's wake-up: the freed channel, or the session lock becoming ours (its holder's session ended). */
  wake(freed: { promise: Promise<void>; cancel(): void }, ms: number): { promise: Promise<void>; cancel(): void } {
    const s = this.session;
    if (s === undefined || s.ended) return freed;
    if (s.holdsLock) {
      // Granted after the claim went out: the holder's session ended meanwhile, and the claim
      // that ends its term is the next one, now. Held when it went out: the holder's term is
      // tied to no session, and only its release or expiry can end it.
      return this.heldAtClaim ? freed : { promise: Promise.resolve(), cancel: () => freed.cancel() };
    }
    return { promise: Promise.race([freed.promise, s.waitForLock(ms)]), cancel: () => freed.cancel() };
  }

  /** The session, for the term that was just granted; the contender forgets it. */
  take(): LeaseSession | undefined {
    const s = this.session;
    this.session = undefined;
    return s;
  }

  /** Closes a session this contender opened; one the caller gave stays open. */
  async close(): Promise<void> {
    const s = this.take();
    if (s !== this.given) await s?.close();
  }
}

/**
 * A won term takes the contender's session: when the session ends under the term (the server
 * ended it), `onEnd` stands the holder down at once. A term the store did not tie to the session
 * (another session still held the lease's session lock: a frozen holder whose term expired) is a
 * 'ttl' term, and the log says so.
 */
export function tieSession(session: LeaseSession | undefined, result: ClaimResult, logger: LoggerLike, name: string, onEnd: (detail: string) => void): LeaseSession | undefined {
  if (session === undefined) return undefined;
  session.onEnd((detail) => onEnd(`${detail}; the store ends this term as its session ended (liveness: session)`));
  if (result.outcome !== 'busy' && result.outcome !== 'lost' && result.session !== true) {
    logger.warn({ lease: name }, "leasehold: the store could not tie this term to this process's session (another session still holds the lease's session lock): it ends at its TTL, as in liveness 'ttl'");
  }
  return session;
}
