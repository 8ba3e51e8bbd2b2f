import { CONFLICT_DETAIL } from '../../core/claim-rule.js';

/** The smallest batch sent to `renew` rather than the statement (the store's comment says why). */
export const RENEW_FUNCTION_MIN = 1000;

/**
 * A batch of renewals on a schema at version 12 or later: the schema's `renew` function
 * (sql/012-renew.ts), which answers as the statement below does without locking every row in a
 * pass of its own. Every row carries the store's now; a row with a NULL name carries only that.
 * @param s the quoted schema name
 */
export function renewCall(s: string): string {
  return `SELECT * FROM ${s}.renew($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[])`;
}

/**
 * The renewal of batches under RENEW_FUNCTION_MIN, and of schemas before version 12 (a process
 * upgraded before `migrate`): a batch of renewals (every request has `expect`) in one
 * statement, without the claim function's INSERT ... ON CONFLICT of every name (a renewal never creates a row) and without
 * its acquisition branches: the scheduler's steady state, 10,000 leases per round trip.
 *
 * It encodes the renewal half of the claim rule (src/core/claim-rule.ts, decideClaim), as the
 * claim function of migration 1 does, and writes the same rows:
 *  - live, our holder, a nonce we expect -> renewed: new nonce and expiry, token kept;
 *  - live, our holder, another nonce     -> lost/cloned: the term ends for both clones
 *    (holder cleared, ended_by 'conflict', a 'conflict' history row; the trigger notifies);
 *  - anything else                       -> lost, with the reason read off the row, no write.
 * Tokens do not change on renewal, so the timeline floor (sql/005-timeline-tokens.ts) and the
 * `migrate --min-token` floor have nothing to do here.
 *
 * The rows are locked in name order first (`cur`), as the claim function does, so that this
 * statement, the claim function and clones renewing the same names never deadlock, and every
 * decision is made on the row as it is once locked (its latest committed version), not on the
 * statement's snapshot. The answer is read off `cur` alone, never a join of two CTEs: the
 * planner cannot estimate those, and the inflated cost switches PostgreSQL's JIT on, which
 * compiled for 600 ms per 10,000-lease batch. A name without a row (never claimed) is not in the
 * answer; the last row carries only the store's now, and the caller answers those names `lost`
 * (expired), as the claim rule does for a missing row. The renewal UPDATE does not set `holder`,
 * so the release trigger (UPDATE OF holder) is not even evaluated.
 * @param s the quoted schema name
 */
export function renewalStatement(s: string): string {
  return `
WITH cur AS MATERIALIZED (
  SELECT r.name, r.holder AS req_holder, string_to_array(r.expect, ',') AS expect, r.nxt, r.ttl_ms,
         l.holder, l.nonce, l.token, l.expires_at, l.ended_by
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[]) AS r(name, holder, expect, nxt, ttl_ms)
    JOIN ${s}.leases AS l ON l.name = r.name
   ORDER BY l.name
     FOR UPDATE OF l
), upd AS (
  UPDATE ${s}.leases AS l
     SET nonce = c.nxt, expires_at = now() + c.ttl_ms * interval '1 millisecond', renewed_at = now(), ended_by = NULL
    FROM cur c
   WHERE l.name = c.name AND c.holder = c.req_holder AND c.nonce = ANY (c.expect) AND c.expires_at > now()
), conflict AS (
  UPDATE ${s}.leases AS l
     SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'conflict'
    FROM cur c
   WHERE l.name = c.name AND c.holder = c.req_holder AND NOT (c.nonce = ANY (c.expect)) AND c.expires_at > now()
  RETURNING l.name, l.token, c.req_holder
), hist AS (
  INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
  SELECT x.name, 'conflict', NULL, x.req_holder, x.token, now(), '${CONFLICT_DETAIL}' FROM conflict x
), answer AS (
  SELECT c.*, c.holder = c.req_holder AND c.nonce = ANY (c.expect) AND c.expires_at > now() AS ok FROM cur c
)
SELECT a.name, CASE WHEN a.ok THEN 'renewed' ELSE 'lost' END AS outcome,
       CASE WHEN a.ok THEN NULL
            WHEN a.holder = a.req_holder AND a.nonce = ANY (a.expect) THEN 'expired'
            WHEN a.holder = a.req_holder THEN 'cloned'
            WHEN a.holder IS NULL AND a.ended_by = 'revoked' THEN 'revoked'
            WHEN a.holder IS NULL AND a.ended_by = 'released' THEN 'released'
            WHEN a.holder IS NULL AND a.ended_by = 'conflict' THEN 'cloned'
            WHEN a.holder IS NULL THEN 'expired'
            ELSE 'superseded' END AS reason,
       a.token, a.holder,
       (extract(epoch FROM CASE WHEN a.ok THEN now() + a.ttl_ms * interval '1 millisecond' ELSE a.expires_at END) * 1000)::float8 AS expires_at_ms,
       (extract(epoch FROM now()) * 1000)::float8 AS now_ms
  FROM answer a
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, (extract(epoch FROM now()) * 1000)::float8`;
}
