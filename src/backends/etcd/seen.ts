/**
 * What one store instance last saw of a lease's state key (claim.ts compares a create against it,
 * release.ts records its own releases in it), and what a contender may be answered from it alone.
 */
import type { ClaimRequest } from '../store.js';

/** What this store instance last saw of a lease's state key; contending compares against it. */
export interface SeenState {
  rev: string;
  holder: string | null;
  ended: boolean;
  /** The last read found the term key present, and the watch has not reported it deleted since. */
  termHeld?: boolean;
  /** The state key read says its term was released by its holder: when that term began. */
  releasedStartedAtMs?: number;
}

/**
 * ClaimRequest.unlessReleasedSince, judged on the state key as last read: its term released by
 * its holder and begun at or after the contender's time (the granting claimant's clock, as
 * grantedAtMs is). Such a contender is sent the reads alone, and refused from them: the create's
 * compare (state key unchanged since `seen`) is what makes a grant safe, so a seen state that
 * would refuse never goes out with a create.
 *
 * The start is a host's wall clock and the contender's time is the ledger's (etcd's, from its
 * Date header): a host running ahead would have its term for an earlier slot read as begun since,
 * and refuse for as long as it is ahead (a replica 30 s ahead: test/scheduler/clock-ahead.test.ts).
 * So it grants as usual, as before, on a start later than this claimant's own clock (`nowMs`: the
 * granter was ahead of it) and on a term of the contender's own holder id (the same host's clock
 * on both sides: a replica alone and ahead would refuse itself every slot). A refusal only ever
 * saves a term.
 */
export function refusedSince(req: ClaimRequest, seen: SeenState, nowMs: number): boolean {
  const started = seen.releasedStartedAtMs;
  return req.expect === null && req.unlessReleasedSince !== undefined && started !== undefined && started >= req.unlessReleasedSince && started <= nowMs && seen.holder !== req.holder;
}

/** A lease this instance has never read. */
export const NEVER_SEEN: SeenState = { rev: '0', holder: null, ended: false };
