/**
 * The fixed intervals of per-slot cron (./cron.ts, perSlot): how long a term holds the lease for
 * a slot about to come due, and when a replica that did not win looks again. Each is sized from
 * the stores' round trips or clocks, as its comment says, not from a schedule's period.
 */
import type { SlotRecord } from './ledger.js';
import { slotsBetween, type Schedule } from './schedule.js';

/**
 * Per-slot: a term keeps the lease for a slot due within this much of its end, and runs it. Its
 * release takes a round trip to land, and the other replicas' one attempt at that slot must not
 * find the lease still held; this is many round trips of every supported store (a round trip
 * over it is a store in trouble, and the slot is then recorded missed by the next winner).
 */
export const HOLD_FOR_NEXT_MS = 250;

/**
 * Per-slot: a first term the ledger told 'early' for the slot it was won for keeps the lease and
 * runs that slot when the store says it is due, if that is at most this far off. The other
 * replicas tried the slot and found this term holding it, so nobody else will; released unused,
 * it would read to a store that refuses a contender after a release (unlessReleasedSince) as the
 * slot handled, and the slot would be lost. The usual cause is etcd's store time, a lower bound
 * from its HTTP Date header that lags by up to a second plus a round trip on a replica's first
 * answers (src/backends/etcd/clock.ts); two seconds covers that with room. A host further ahead
 * than this lets the lease go as before, and the slot goes to a replica on time.
 *
 * The same hold serves a term that began, by the lease store's clock, at or after the next slot
 * (within this much of it): a replica whose estimate lags fired the slot before late, and its
 * claim landed after the next one came due (./cron.ts, beganAfter).
 */
export const EARLY_HOLD_MS = 2_000;

/**
 * Per-slot: a replica that found the lease held looks again this long after that term's expiry
 * (by the store's clock, as its busy answer gave it), so the look finds the term over.
 */
export const RECHECK_AFTER_MS = 250;

/** After a slot's claim got no answer (a store error): when to try the slot again. */
export const ERROR_RETRY_MS = 500;

/**
 * Per-slot: a startup term's on-time slot, one that came due just before the term was granted
 * (by the lease store's clock, within EARLY_HOLD_MS, as a term that began after the next slot
 * holds for it) while the fleet was running. Replicas up before it take a term granted since a
 * slot, and released, as that slot's winner, and are refused the slot (busy, then released
 * since). Let go unrun, it had no row at all for a new name ("before the name's first slot"; CI,
 * etcd: a third replica's startup term 124 ms after the first slot), and was recorded skipped
 * under catch-up none though replicas were waiting for it. "Running": the slot before it has a
 * row, or the name has none yet (a replica alone cannot tell, and a slot due a moment ago is the
 * first it could run). After a gap (no row for the slot before) it is a missed slot like the
 * rest, and catchUp decides.
 */
export function startupOnTime(schedule: Schedule, acquiredAtMs: number, storeNowMs: number, rows: readonly SlotRecord[], newName: boolean): number | undefined {
  const slot = slotsBetween(schedule, acquiredAtMs - EARLY_HOLD_MS, Math.min(acquiredAtMs, storeNowMs)).at(-1);
  if (slot === undefined || newName) return slot;
  let prev: number | undefined;
  for (const r of rows) if (r.slotAtMs !== null && r.slotAtMs < slot && (prev === undefined || r.slotAtMs > prev)) prev = r.slotAtMs;
  return prev !== undefined && schedule.next(prev) === slot ? slot : undefined;
}
