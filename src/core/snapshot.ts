/**
 * A term as a process's memory holds it, and back: what a snapshot restored twice (tests, chaos,
 * through src/testing/) carries. A resumed term believes it leads, with a full local deadline;
 * its next renewal asks the store, and of two processes resumed from one snapshot at most one
 * renewal can succeed.
 */
import type { Timing } from './config.js';
import type { LeaseSnapshot } from './lease-types.js';
import { TermMachine } from './term.js';

export function snapshotOfTerm(name: string, t: TermMachine): LeaseSnapshot {
  return {
    name,
    holder: t.holder,
    token: t.token.toString(),
    confirmed: t.confirmed,
    unconfirmed: [...t.unconfirmed],
    acquiredAtMs: t.acquiredAtMs,
    lastStoreNowMs: t.lastStoreNowMs,
    fenceNonces: [...t.fence.known],
    fenceFirst: t.fence.first,
  };
}

/** `now`: monotonic, when the process resumes. */
export function termFromSnapshot(timing: Timing, snap: LeaseSnapshot, now: number): TermMachine {
  return new TermMachine(timing, {
    name: snap.name,
    token: BigInt(snap.token),
    holder: snap.holder,
    acquiredAtMs: snap.acquiredAtMs,
    confirmed: snap.confirmed,
    unconfirmed: [...snap.unconfirmed],
    deadline: now + timing.ttlMs - timing.marginMs,
    renewDueAt: now + timing.renewMs,
    lastStoreNowMs: snap.lastStoreNowMs,
    lastSentAt: now,
    fence: { known: [...(snap.fenceNonces ?? [])], first: snap.fenceFirst ?? true, tail: undefined },
  });
}
