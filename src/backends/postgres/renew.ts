import { CONFLICT_DETAIL } from '../../core/claim-rule.js';

/**
 * A batch of renewals (every request has `expect`) in one statement, without the claim
 * function's INSERT ... ON CONFLICT of every name (a renewal never creates a row) and without
 * its acquisition branches: the scheduler's steady state, 10,000 leases per round trip.
 *
 * It encodes the renewal half of the claim rule (src/core/claim-rule.ts, decideClaim), as the
 * claim function of migration 1 does, and writes the same rows:
 *  - live, our holder, a nonce we expect -> renewed: new nonce and expiry, token kept;
 *  - live, our holder, another nonce     -> lost/cloned: the term ends for both clones
 *    (holder cleared, ended_by 'conflict', a 'conflict' history row; the trigger notifies);
 *  - anything else                       -> lost, with the reason read off the row, no write.
 * Tokens do not change on renewal, so the timeline floor (./timeline-tokens.ts) and the
 * `migrate --min-token` floor have nothing to do here.
 *
 * The rows are locked in name order first, as the claim function does, so that this statement,
 * the claim function and clones renewing the same names never deadlock, and the decision is
 * made on the row as it is once locked (the latest committed version), not on the statement's
 * snapshot. The UPDATE does not set `holder`, so the release trigger (UPDATE OF holder) is not
 * even evaluated for a renewal.
 * @param s the quoted schema name
 */
export function renewalStatement(s: string): string {
  return `
WITH req AS (
  SELECT r.name, r.holder, string_to_array(r.expect, ',') AS expect, r.nxt, r.ttl_ms, r.ord
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[])
    WITH ORDINALITY AS r(name, holder, expect, nxt, ttl_ms, ord)
), locked AS MATERIALIZED (
  SELECT l.name, l.holder, l.nonce, l.token, l.expires_at, l.ended_by
    FROM ${s}.leases AS l WHERE l.name = ANY ($1::text[]) ORDER BY l.name FOR UPDATE
), cur AS (
  SELECT r.*, k.holder AS cur_holder, k.nonce AS cur_nonce, k.token AS cur_token,
         k.expires_at AS cur_expires, k.ended_by AS cur_ended_by,
         CASE WHEN k.holder = r.holder AND k.nonce = ANY (r.expect) AND k.expires_at > now()
              THEN 'renewed' ELSE 'lost' END AS outcome
    FROM req r LEFT JOIN locked k ON k.name = r.name
), upd AS (
  UPDATE ${s}.leases AS l
     SET nonce = c.nxt, expires_at = now() + c.ttl_ms * interval '1 millisecond', renewed_at = now(), ended_by = NULL
    FROM cur c
   WHERE l.name = c.name AND c.outcome = 'renewed'
  RETURNING l.name, l.expires_at
), conflict AS (
  UPDATE ${s}.leases AS l
     SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'conflict'
    FROM cur c
   WHERE l.name = c.name AND c.outcome = 'lost' AND c.cur_holder = c.holder
     AND NOT (c.cur_nonce = ANY (c.expect)) AND c.cur_expires > now()
  RETURNING l.name, l.token
), hist AS (
  INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
  SELECT x.name, 'conflict', NULL, c.holder, x.token, now(), '${CONFLICT_DETAIL}'
    FROM conflict x JOIN cur c ON c.name = x.name
)
SELECT c.name, c.outcome,
       CASE WHEN c.outcome <> 'lost' THEN NULL
            WHEN c.cur_holder = c.holder AND c.cur_nonce = ANY (c.expect) THEN 'expired'
            WHEN c.cur_holder = c.holder THEN 'cloned'
            WHEN c.cur_holder IS NULL AND c.cur_ended_by = 'revoked' THEN 'revoked'
            WHEN c.cur_holder IS NULL AND c.cur_ended_by = 'released' THEN 'released'
            WHEN c.cur_holder IS NULL AND c.cur_ended_by = 'conflict' THEN 'cloned'
            WHEN c.cur_holder IS NULL THEN 'expired'
            ELSE 'superseded' END AS reason,
       c.cur_token AS token,
       c.cur_holder AS holder,
       (extract(epoch FROM COALESCE(u.expires_at, c.cur_expires)) * 1000)::float8 AS expires_at_ms,
       (extract(epoch FROM now()) * 1000)::float8 AS now_ms
  FROM cur c LEFT JOIN upd u ON u.name = c.name
 ORDER BY c.ord`;
}
