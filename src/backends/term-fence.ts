/**
 * What the PostgreSQL and SQLite same-database fences share (./postgres/term-fence.ts and
 * ./sqlite/term-fence.ts): the request, and the rule that names why a fenced write's last
 * statement changed nothing. Each backend runs its own SQL; the verdict is the same.
 */
import type { LostReason } from './store.js';

export interface TermFenceRequest {
  name: string;
  holder: string;
  token: bigint;
  /** The fence nonces this process may have set for this term. */
  expect: readonly string[];
  /** No fenced write of this term may have committed yet. */
  first: boolean;
}

/** What the row says after a fenced write's UPDATE changed nothing. */
export type TermFenceFailure = { kind: 'lost'; reason: LostReason } | { kind: 'missing' } | { kind: 'ours' };

/** Shared by the PostgreSQL and SQLite fences: the same rule as a renewal's 'lost' reasons. */
export function judge(
  row: { holder: string | null; token: bigint; endedBy: string | null; live: boolean; ours: boolean; conflict: boolean },
  req: { holder: string; token: bigint },
): TermFenceFailure {
  if (row.conflict) return { kind: 'lost', reason: 'cloned' };
  if (row.holder === req.holder && row.token === req.token) {
    // Ours and live: the row moved under a write of this process, which the one-at-a-time rule
    // prevents; refuse this one write (retryable) rather than call anyone a clone.
    return row.live && row.ours ? { kind: 'ours' } : { kind: 'lost', reason: 'expired' };
  }
  if (row.holder === null && row.token === req.token) {
    if (row.endedBy === 'conflict') return { kind: 'lost', reason: 'cloned' };
    if (row.endedBy === 'revoked') return { kind: 'lost', reason: 'revoked' };
    if (row.endedBy === 'released') return { kind: 'lost', reason: 'released' };
    return { kind: 'lost', reason: 'expired' };
  }
  return { kind: 'lost', reason: 'superseded' };
}
