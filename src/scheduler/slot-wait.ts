/**
 * Per-slot cron: a slot's contender's try at the schedule's lease (./cron.ts, perSlot), and what
 * it does when an EARLIER slot's term still holds the lease at this slot's time.
 *
 * Every replica tries the lease once when a slot comes due. Answered 'busy', it looks at when
 * the holding term was granted (ClaimResult.grantedAtMs, on stores that say):
 *  - at or after the slot's time: this slot's own winner. Nothing to do; the winner claims the
 *    slot (the one-attempt cost of contention, as before).
 *  - before the slot's time: an earlier slot's term whose claim, job, completion or release ran
 *    past this slot's time (a store slowed by load, a job that ended just before the slot). No
 *    other replica will take this slot's term while it holds, and before this wait nobody
 *    looked again: the slot was found with no row by the next slot's winner and recorded
 *    'missed'. The contender instead waits for that term to end, woken by the store's freed
 *    channel where there is one (as any waiting acquire is), else at its expiry, and then
 *    claims this slot's term, late. The wait ends as soon as any term granted since the slot's
 *    time holds or has released the lease (unlessReleasedSince: another waiter got there
 *    first), and at the next slot's time, when the next slot's try takes over.
 * Overlap stays impossible: the slot's job starts only under a term of its own, after the
 * earlier term ended. A job that was still running at the slot's time has its own term record
 * the slot 'skipped: overlap' before it releases (runAll in ./cron.ts); the waiter's term then
 * reads that row and runs nothing. Only a slot whose earlier term had finished its job before
 * the slot came due, and was still completing or releasing, is run late.
 */
import { NotAcquiredError } from '../core/errors.js';
import type { Lease, Term } from '../core/lease.js';
import type { LeaseSession } from '../core/port.js';
import { FINAL_SLOT_STATUSES, type SlotLedgerPort } from './ledger.js';

interface SlotTryOptions {
  signal: AbortSignal;
  /**
   * Ends the wait for an earlier slot's term (a drain), never a claim already sent: a term it
   * wins is returned, so the caller records the slot (interrupted, not run) instead of handing
   * back a term every other replica reads as this slot's winner having released.
   */
  stopWaiting?: AbortSignal;
  /**
   * The ledger has this slot interrupted (a winner drained or stopped before or while its job
   * ran, then released): claimed without unlessReleasedSince, which that release would refuse,
   * and with one attempt. The ledger's claim decides whether it is rerun (onInterrupted).
   */
  owed?: boolean;
  /** Liveness 'session': the caller's session for the claim; it waits on the session lock instead (./session-watch.ts). */
  session?: LeaseSession | undefined;
  /** How long, from now, an earlier slot's term may be waited for: until the next slot is due. */
  waitMs: () => number;
}

/**
 * The lease for the slot at `slotAtMs` (or, for a startup or late catch-up, undefined: one
 * attempt), waiting for an earlier slot's term as above.
 * @throws {NotAcquiredError} this slot's winner holds or has released the lease, or the wait ran out.
 * @throws whatever the acquire throws (a store error, an abort).
 */
export async function trySlotTerm(lease: Lease, slotAtMs: number | undefined, options: SlotTryOptions): Promise<Term> {
  const { signal, session } = options;
  // An on-time slot's contender takes no term if this slot's winner has already run and
  // released it (a claim queued behind SQLite's write lock that long would only read it done).
  // Staying registered as the waiter between tries (AcquireOptions.stayRegistered): the next
  // try of this slot, or the next slot's, takes the registration over, so a term a release
  // hands it in between is run, not withdrawn unseen after that slot came due.
  if (options.owed === true) return await lease.acquire({ wait: false, signal, ...(session === undefined ? {} : { session }) });
  const since = slotAtMs === undefined ? {} : { unlessReleasedSince: slotAtMs, stayRegistered: session === undefined };
  try {
    return await lease.acquire({ wait: false, signal, ...(session === undefined ? {} : { session }), ...since });
  } catch (e) {
    if (slotAtMs === undefined || session !== undefined || !heldByEarlierTerm(e, slotAtMs)) throw e;
    // Whole milliseconds: store times (PostgreSQL's) carry fractions, and a wait is a Duration.
    const waitMs = Math.floor(options.waitMs());
    if (waitMs <= 0 || options.stopWaiting?.aborted === true) throw e;
    return await lease.acquire({ wait: waitMs, signal, unlessReleasedSince: slotAtMs, stayRegistered: true, ...(options.stopWaiting === undefined ? {} : { stopWaiting: options.stopWaiting }) });
  }
}

/** A busy answer from a live term granted before the slot's time: an earlier slot's, still running. */
function heldByEarlierTerm(e: unknown, slotAtMs: number): e is NotAcquiredError {
  return e instanceof NotAcquiredError && !e.releasedSince && e.holder !== null && e.grantedAtMs !== null && e.grantedAtMs < slotAtMs;
}

/**
 * What the ledger says of one slot, for a replica looking again after another's term ended:
 * 'finished' (succeeded, failed or skipped: nothing to do), 'interrupted' (owed: see
 * SlotTryOptions.owed), or 'unknown' (no row, a claimed row, or the read failed: unknown is not
 * "finished", so the lease is tried and its term reads the ledger again).
 */
export async function slotStatus(ledger: SlotLedgerPort, name: string, slotAtMs: number): Promise<'finished' | 'interrupted' | 'unknown'> {
  try {
    const rows = await ledger.records(name, { sinceMs: slotAtMs - 1, untilMs: slotAtMs, limit: 1 });
    const status = rows.find((r) => r.slotAtMs === slotAtMs)?.status;
    return status === undefined ? 'unknown' : FINAL_SLOT_STATUSES.has(status) ? 'finished' : status === 'interrupted' ? 'interrupted' : 'unknown';
  } catch {
    return 'unknown';
  }
}
