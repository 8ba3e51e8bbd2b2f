/**
 * Per-slot cron's early claim (./cron.ts, slotTerm): an on-time slot's ledger claim sent with the
 * term's ledger reads rather than after them, so that the job starts one round trip after the
 * term is won, not one per read more. The claim rule decides the slot's row whatever the reads
 * find (an ended term's 'claimed' row is rerun or skipped, a final one is 'done').
 *
 * When it may go out:
 *  - Only when no slot the reads can find owed runs a job before this one: catchUp is not 'all'
 *    (an on-time term records the missed slots before it skipped) and onInterrupted is 'skip'
 *    (an ended term's slot is recorded skipped, not rerun). Otherwise an older slot's job ran
 *    while this slot sat 'claimed' under the term: a term that ended during that job left it
 *    claimed and never started, and the next term handled it per onInterrupted instead of
 *    catchUp; and its row's start, and the 'started' event's delay, were the claim's, not the
 *    job's (test/scheduler/per-slot-early-claim.test.ts). What can still come between the claim
 *    and the job is ledger writes for older slots: round trips, like the claim's own.
 *  - Only on a store that refuses a contender once the slot's winner has released
 *    (LeasePort.honoursReleasedSince): elsewhere a term won that late reads the slot done, and its
 *    claim would be one more write for nothing (test/scheduler/per-slot-late.test.ts).
 */
import type { CatchUp } from './cron-handle.js';

export function sendsClaimEarly(store: { readonly honoursReleasedSince?: true }, catchUp: CatchUp, onInterrupted: 'rerun' | 'skip'): boolean {
  return store.honoursReleasedSince === true && catchUp !== 'all' && onInterrupted === 'skip';
}

/**
 * `claim`, marked handled at once: it may reject while the reads are still out, before anything
 * awaits it, and an unhandled rejection ends the process. The error is not lost: whoever awaits
 * the returned promise gets it (slotTerm awaits it last, used or not).
 */
export function earlyClaim<T>(claim: Promise<T>): Promise<T> {
  claim.catch(() => undefined);
  return claim;
}
