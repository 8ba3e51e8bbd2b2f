/** The public shapes of a Lease: its options, states, events, and the snapshot the testing entry takes. */
import type { Duration, TimingOptions } from './config.js';
import type { LeaseLostError } from './errors.js';
import type { Term } from './term.js';
import type { Liveness } from './liveness.js';
import type { LeaseSession } from './port.js';

export type LeaseState = 'idle' | 'contending' | 'leading' | 'jeopardy' | 'closed';

export interface LeaseOptions extends TimingOptions {
  /**
   * A file leasehold writes while this process leads (name, holder, token) and deletes when it
   * stands down. Deleted on creation of the Lease, before contending: a marker already on disk
   * was inherited from a fork, a snapshot or a crash, and is never believed.
   */
  marker?: string;
  /**
   * Require the work to call `progress()` at least this often. With no progress within it,
   * this process stands down and releases so another replica can lead (a liveness probe can
   * say "healthy" while the work itself is wedged).
   */
  progressTimeout?: Duration;
  /**
   * On a store with one-write handover (PostgreSQL, schema 6): whether a waiting acquire may be
   * registered as the waiter, so that the holder's release hands it the term in the same
   * statement. Default true. false where holding the lease means "this process is alive" (a
   * fleet agent's liveness): a handed term says so before the process has confirmed anything,
   * and a waiter that has gone would read as alive for a TTL. It then takes the lease by its
   * own claim, after the release.
   */
  handover?: boolean;
  /**
   * How the holder is judged alive. `'ttl'` (default): by its renewals alone; a dead holder's term
   * ends at its expiry. `'session'` (PostgreSQL): the term is also tied to a connection of the
   * holder's own, and ends as soon as that connection closes (the process died, or the server
   * ended the session; then this process stands down at once), so a follower takes over within
   * milliseconds while the TTL can stay long. One extra connection per held or contended lease;
   * refused with a LivenessError through a pooler, on stores that cannot see sessions, and when
   * the server's TCP keepalive could declare a live holder dead before the TTL. docs/liveness.md.
   */
  liveness?: Liveness;
}

/**
 * What a process remembers about its term, as a snapshot of its memory would. For simulating
 * a snapshot restored twice (tests, chaos) through src/testing/; production code never needs it.
 */
export interface LeaseSnapshot {
  name: string;
  holder: string;
  token: string;
  confirmed: string;
  unconfirmed: string[];
  acquiredAtMs: number;
  lastStoreNowMs: number;
  /** Same-database fenced writes (see TermFenceState); absent in snapshots taken before any. */
  fenceNonces?: string[];
  fenceFirst?: boolean;
}

export interface AcquireOptions {
  /** true (default): wait for ever; false: one attempt; a duration: give up after it. */
  wait?: boolean | Duration;
  /** Aborts the acquire: a term a claim in flight wins is handed straight back, and it rejects with AbortedError. */
  signal?: AbortSignal;
  /**
   * Ends the wait, not the acquire: once it aborts, the acquire gives up as if its wait had run
   * out (NotAcquiredError, "the wait was stopped"), but a claim already sent is still answered,
   * and a term it wins is returned. Like a wait that runs out while asleep, a stop then makes
   * one last claim (a term a release handed this contender is taken), and it is not kept
   * registered (stayRegistered). Aborted before the acquire, it makes one attempt, as `wait: false`.
   * For a caller whose own state the term must reach: per-slot cron's drain, where a term handed
   * back unused would read to every other replica as "the slot's winner released"
   * and the slot would be recorded by nobody (it records it 'interrupted' instead).
   */
  stopWaiting?: AbortSignal;
  /**
   * A store time (ms since the epoch): do not take a term when one granted at or after it has
   * already been released (its holder did the work this contender came for). Refused with a
   * NotAcquiredError whose `releasedSince` is true; stores that cannot tell grant as usual.
   * A waiting acquire gives up as soon as it is refused so, or finds the lease held by a term
   * granted at or after it (on stores that say when the holding term was granted): it waits
   * only for a term granted before it. Per-slot cron passes the slot's time, and waits so for
   * an earlier slot's term that ran past its slot (src/scheduler/slot-wait.ts).
   */
  unlessReleasedSince?: number;
  /**
   * On stores with one-write handover (PostgreSQL, MySQL): when the wait runs out without a term
   * (the last answer a term granted before `unlessReleasedSince`, or any term without it), stay
   * registered as the waiter a release hands the term to, and let the next `acquire()` of this
   * Lease take the registration over: a term handed to it in between is that acquire's. A claim
   * in flight as the wait ends is waited for, not given up on. `release()` and `close()`
   * withdraw a registration kept so. For a contender that gives up only to contend again at
   * once: per-slot cron's wait for an earlier slot's term ends at the next slot, whose try
   * follows; a withdrawal still in flight when that term's release handed it the term left a
   * term nobody ran, granted after the next slot, and the next slot was lost. A process that
   * dies with a registration kept is handed the next release's term as an offer it never
   * accepts: that costs the lease its acceptance window, a third of this lease's TTL (at least
   * 500 ms, at most the TTL; PostgreSQL schema 17, MySQL 10).
   */
  stayRegistered?: boolean;
  /**
   * Liveness 'session' only: claim with this session (opened with the store's `openSession`, kept
   * by the caller between attempts, for example one waiting on the session lock) instead of
   * opening one. A won term takes it over (released over it, closed when the term ends); after
   * any other outcome it stays the caller's, open.
   */
  session?: LeaseSession;
}

export interface LeaseEvents {
  acquired: [term: Term];
  /** expiresInMs by the store's clock; roundTripMs from the renewal's send to its answer (monotonic). */
  renewed: [term: Term, expiresInMs: number, roundTripMs: number];
  jeopardy: [term: Term, error: unknown];
  recovered: [term: Term];
  lost: [term: Term, error: LeaseLostError];
  released: [term: Term, handedOver: boolean];
  busy: [holder: string | null, expiresInMs: number | null];
  'store-error': [error: unknown, during: 'acquire' | 'renew' | 'release'];
}
