/**
 * The claim rule, written once: row state x request x the store's now -> outcome. Pure (no
 * clock, no I/O), so a store that runs TypeScript calls it inside its own transaction (SQLite,
 * the in-memory reference store), and the conformance table uses it as the oracle that
 * PostgreSQL's SQL function, Redis's Lua script and etcd's transactions are checked against.
 *
 * The cases, for a renewal (`expect` set):
 *  - live, our holder id, a nonce we expect       -> renewed (token kept)
 *  - live, our holder id, a nonce we do not hold  -> lost/cloned, and the term ends here for both
 *    clones (store.ts expectation 4b): `endTerm`
 *  - anything else                                -> lost, with the reason read off the row
 * and for a contender (`expect` null):
 *  - live (anyone's, ours included)               -> busy
 *  - no row, free, or expired                     -> acquired, token = max(last, floor) + 1
 *
 * Stores whose tokens come from elsewhere (Redis: the server's TIME; etcd: the create revision)
 * meet the same ordering (larger than any earlier token of the name, and than the floor) with
 * other values: the oracle compares outcomes, reasons, holders and token order, not values.
 */
import type { ClaimRequest, LostReason } from './port.js';

/** How a term ended when it ended without expiring. */
export type EndedBy = 'released' | 'revoked' | 'conflict';

/** One lease's row, as every store keeps it (in its own shape). */
export interface LeaseRowState {
  /** Null when free (released, revoked, ended by a clone conflict). */
  holder: string | null;
  nonce: string | null;
  /** The last token issued for this name: rows keep it after the term ends. */
  token: bigint;
  /** By the store's clock; null before the first term. */
  expiresAtMs: number | null;
  endedBy: EndedBy | null;
}

export type ClaimInput = Pick<ClaimRequest, 'holder' | 'expect' | 'ttlMs'>;

export type ClaimDecision =
  | {
      outcome: 'acquired';
      token: bigint;
      expiresAtMs: number;
      /** 'takeover' when the row still names a holder (its term expired without a release). */
      event: 'acquired' | 'takeover';
      previousHolder: string | null;
    }
  | { outcome: 'renewed'; token: bigint; expiresAtMs: number }
  | { outcome: 'busy'; holder: string; token: bigint; expiresAtMs: number }
  | {
      outcome: 'lost';
      reason: LostReason;
      holder: string | null;
      token: bigint | null;
      expiresAtMs: number | null;
      /** Two clones renew one live term: end it now (holder cleared, history 'conflict'). */
      endTerm: boolean;
    };

/** The history detail of a term ended because two processes renewed it. */
export const CONFLICT_DETAIL = 'two processes renewed one term (a restored snapshot or a clone)';

/** A term is live while it has a holder and the store's clock has not reached its expiry. */
export function isLive(row: LeaseRowState | undefined, nowMs: number): row is LeaseRowState & { holder: string; expiresAtMs: number } {
  return row !== undefined && row.holder !== null && row.expiresAtMs !== null && row.expiresAtMs > nowMs;
}

/** The state `list` reports for a row. */
export function leaseState(holder: string | null, expiresAtMs: number | null, nowMs: number): 'held' | 'expired' | 'free' {
  if (holder === null) return 'free';
  return expiresAtMs !== null && expiresAtMs > nowMs ? 'held' : 'expired';
}

/** The next acquisition's token: above the name's last token and above the operator's floor. */
export function nextToken(lastToken: bigint | undefined, floor: bigint): bigint {
  const last = lastToken ?? 0n;
  return (last > floor ? last : floor) + 1n;
}

/**
 * @param row the lease's row, undefined when the name was never claimed
 * @param nowMs the store's clock, read inside the same atomic step that will write the outcome
 * @param floor the token floor (`migrate({ minToken })`), 0n when none
 */
export function decideClaim(row: LeaseRowState | undefined, req: ClaimInput, nowMs: number, floor = 0n): ClaimDecision {
  const expiresAtMs = nowMs + Math.round(req.ttlMs);
  const live = isLive(row, nowMs);
  if (req.expect !== null) {
    const ours = row !== undefined && row.holder === req.holder;
    const nonceOk = row?.nonce != null && req.expect.includes(row.nonce);
    if (live && ours && nonceOk) return { outcome: 'renewed', token: row.token, expiresAtMs };
    if (live && ours) {
      // Two processes are renewing one term (a snapshot restored twice). Neither can be told
      // from the other, so neither keeps it: the next acquisition's larger token fences both.
      return { outcome: 'lost', reason: 'cloned', holder: null, token: row.token, expiresAtMs: nowMs, endTerm: true };
    }
    return {
      outcome: 'lost',
      reason: lostReason(row, req.holder, nonceOk),
      holder: row?.holder ?? null,
      token: row?.token ?? null,
      expiresAtMs: row?.expiresAtMs ?? null,
      endTerm: false,
    };
  }
  if (live) return { outcome: 'busy', holder: row.holder, token: row.token, expiresAtMs: row.expiresAtMs };
  const previousHolder = row?.holder ?? null;
  return { outcome: 'acquired', token: nextToken(row?.token, floor), expiresAtMs, event: previousHolder === null ? 'acquired' : 'takeover', previousHolder };
}

function lostReason(row: LeaseRowState | undefined, holder: string, nonceOk: boolean): LostReason {
  if (row === undefined) return 'expired';
  if (row.holder === holder) return nonceOk ? 'expired' : 'cloned';
  if (row.holder !== null) return 'superseded';
  switch (row.endedBy) {
    case 'revoked':
      return 'revoked';
    case 'released':
      return 'released';
    case 'conflict':
      return 'cloned';
    default:
      return 'expired';
  }
}

/** The row after a claim's decision is written; undefined when nothing is written. */
export function rowAfterClaim(
  row: LeaseRowState | undefined,
  req: Pick<ClaimRequest, 'holder' | 'nextNonce'>,
  d: ClaimDecision,
  nowMs: number,
): LeaseRowState | undefined {
  switch (d.outcome) {
    case 'acquired':
      return { holder: req.holder, nonce: req.nextNonce, token: d.token, expiresAtMs: d.expiresAtMs, endedBy: null };
    case 'renewed':
      return { ...row!, nonce: req.nextNonce, expiresAtMs: d.expiresAtMs };
    case 'lost':
      return d.endTerm ? endedRow(row!, 'conflict', nowMs) : undefined;
    case 'busy':
      return undefined;
  }
}

/** A row whose term ended without expiring: the token stays, so the next one is larger. */
export function endedRow(row: LeaseRowState, how: EndedBy, nowMs: number): LeaseRowState {
  return { ...row, holder: null, nonce: null, expiresAtMs: nowMs, endedBy: how };
}

/**
 * Whether a term can be ended. A release needs the holder and one of its expected nonces
 * (expiry is not checked: a late release of an expired, untaken term is still the holder's to
 * end); an operator's revocation (`by` null) ends whoever holds the row.
 */
export function canEndTerm(row: LeaseRowState | undefined, by: { holder: string; expect: readonly string[] } | null): row is LeaseRowState & { holder: string } {
  if (row === undefined || row.holder === null) return false;
  if (by === null) return true;
  return row.holder === by.holder && row.nonce !== null && by.expect.includes(row.nonce);
}
