import type { ClaimRequest, ClaimResult, LostReason } from '../../core/port.js';
import { SESSION_LOCK_FREE } from './sql/015-session-lock-free.js';

/**
 * One contender without a session (a woken waiter accepting a handed term, above all): the
 * schema's `claim_one`, which answers with grantedAtMs itself (sql/020-claim-one.ts). Undefined
 * for any other batch. A schema before 20 has no `claim_one`: the store then sends
 * claimBatchStatement's.
 * @param s the quoted schema name
 */
export function claimOneStatement(s: string, requests: readonly ClaimRequest[]): { text: string; values: unknown[] } | undefined {
  const q = requests.length === 1 ? requests[0]! : undefined;
  if (q === undefined || q.expect !== null || q.session !== undefined) return undefined;
  return {
    text: `SELECT * FROM ${s}.claim_one($1, $2, $3, $4::float8, $5)`,
    values: [q.name, q.holder, q.nextNonce, q.ttlMs, q.handoff === undefined ? null : q.handoff.join(',')],
  };
}

/**
 * The claim of a batch that is not all renewals (those go to ./renew.ts), and of one contender
 * on a schema before 20: the schema's claim function, or, when a request carries a session
 * (liveness 'session', sql/011-session-liveness.ts), claim_session, which first ends the terms
 * among the batch's names whose session is gone.
 * @param s the quoted schema name
 */
export function claimBatchStatement(s: string, requests: readonly ClaimRequest[]): { text: string; values: unknown[] } {
  const values: unknown[] = [
    requests.map((q) => q.name),
    requests.map((q) => q.holder),
    // Nonces are base64url, so a comma-joined list is unambiguous and keeps the arrays flat.
    requests.map((q) => (q.expect === null ? null : q.expect.join(','))),
    requests.map((q) => q.nextNonce),
    requests.map((q) => q.ttlMs),
    requests.map((q) => q.expect === null),
    // A waiting contender: it may be registered as the waiter and handed the term (sql/006-handover.ts).
    requests.map((q) => (q.expect === null && q.handoff !== undefined ? q.handoff.join(',') : null)),
  ];
  const args = '$1::text[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::boolean[], $7::text[]';
  let call = `${s}.claim(${args})`;
  if (requests.some((q) => q.session !== undefined)) {
    values.push(requests.map((q) => (q.session === undefined ? null : Number(q.session))));
    call = `${s}.claim_session(${args}, $8::int[])`;
  }
  if (!requests.some((q) => q.expect === null)) return { text: `SELECT * FROM ${call}`, values };
  // A busy answer says when the holding term began (ClaimResult.grantedAtMs), from the row as this
  // statement's snapshot saw it; a term granted by another transaction after that snapshot shows
  // another token, and then nothing is said (never a wrong time).
  const granted = `CASE WHEN c.outcome = 'busy' AND l.token = c.token THEN extract(epoch FROM l.term_started_at) * 1000 END AS granted_at_ms`;
  return { text: `SELECT c.*, ${granted} FROM ${call} WITH ORDINALITY c LEFT JOIN ${s}.leases l ON l.name = c.name ORDER BY c.ordinality`, values };
}

/**
 * One row of the claim function's answer. The SQL reports a clone conflict (our holder id, a nonce
 * we do not hold, a live term: the function has just ended it) with the row's holder and expiry as
 * they were before; the claim rule answers with the term as it is now: no holder, ended at the
 * store's now (the conformance table compares the two).
 */
export function toClaimResult(row: Record<string, unknown>): ClaimResult {
  const name = row['name'] as string;
  const outcome = row['outcome'] as string;
  const token = row['token'] == null ? null : BigInt(row['token'] as string);
  const holder = (row['holder'] as string | null) ?? null;
  const expiresAtMs = (row['expires_at_ms'] as number | null) ?? null;
  const storeNowMs = row['now_ms'] as number;
  if (outcome === 'acquired' || outcome === 'renewed') {
    // A term a release handed to this contender and confirmed by a read (sql/006-handover.ts, schemas
    // before 17) carries the nonce it was handed under; an accepted offer holds the one this claim sent.
    const nonce = (row['nonce'] as string | null | undefined) ?? undefined;
    const session = row['session'] == null ? {} : { session: row['session'] === true };
    return { name, outcome, token: token!, holder: holder!, expiresAtMs: expiresAtMs!, storeNowMs, ...(nonce === undefined ? {} : { nonce }), ...session };
  }
  if (outcome === 'lost') {
    const reason = row['reason'] as LostReason;
    if (reason === 'cloned' && holder !== null && expiresAtMs !== null && expiresAtMs > storeNowMs) {
      return { name, outcome, reason, holder: null, token, expiresAtMs: storeNowMs, storeNowMs };
    }
    return { name, outcome, reason, holder, token, expiresAtMs, storeNowMs };
  }
  // Liveness 'session' (sql/015-session-lock-free.ts): take the free lock and claim again.
  const lockFree = row['reason'] === SESSION_LOCK_FREE ? { sessionLockFree: true as const } : {};
  const granted = row['granted_at_ms'] == null ? {} : { grantedAtMs: Number(row['granted_at_ms']) };
  return { name, outcome: 'busy', holder, token, expiresAtMs, storeNowMs, ...lockFree, ...granted };
}
