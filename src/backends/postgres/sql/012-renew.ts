import { CONFLICT_DETAIL } from '../../../core/claim-rule.js';

/**
 * Migration 12 (issue 34): renewal without a separate lock pass. The renewal statement of
 * ../renew.ts locked every row of the batch (`SELECT ... ORDER BY name FOR UPDATE`: one WAL
 * record per row, a sort of the whole table for the merge join), looked each row up again by
 * index to update it, and classified every row, renewed or not. Profiled at 10,000 leases
 * (EXPLAIN ANALYZE, BUFFERS, WAL), that was 2.5x one raw `UPDATE ... FROM unnest`.
 *
 * `renew(names, holders, expects, nexts, ttls)` answers the same rows in two steps:
 *  1. one UPDATE of every row we hold with a nonce we expect, live: the renewal condition is
 *     checked by the UPDATE on the row as it is once locked (PostgreSQL re-reads a row changed
 *     since the snapshot), so the decision is made on the latest committed version, as before;
 *  2. only when some row was not renewed (rare: a lost term): the clone conflict, ended on the
 *     row as it is once locked (the same UPDATE rule), and the reason of each lost row, read
 *     in a statement of its own, so after whatever made step 1 pass it over.
 * Step 2 tells a row step 1 renewed by what step 1 wrote: our holder, the request's next nonce
 * and this transaction's now() as renewed_at.
 *
 * Lock order: step 1 locks the rows in name order, the order the claim function and
 * release_many lock in, so a renewal and a batch claim of another process never deadlock. An
 * UPDATE locks rows in the order its join yields them; the sorted input is the outer side of a
 * nested loop over the primary key, which the function's planner settings leave as the only
 * plan (a hash join could put the table on the outer side and lock in heap order). Step 2 locks
 * only rows it ends as a conflict (two clones of one holder), out of name order after step 1's:
 * PostgreSQL's deadlock detector ends one of the two statements if that ever meets a batch claim.
 *
 * Frozen once merged: this is the SQL that databases at this version ran;
 * src/backends/postgres/schema.sql shows the result.
 * @param s the quoted schema name
 */
export function migration012(s: string): string {
  return `
CREATE FUNCTION ${s}.renew(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms float8[])
RETURNS TABLE (name text, outcome text, reason text, token bigint, holder text, expires_at_ms float8, now_ms float8)
LANGUAGE plpgsql
-- The lock order (see above): the sorted input drives a nested loop over the primary key.
SET enable_hashjoin TO off
SET enable_mergejoin TO off
AS $fn$
#variable_conflict use_column
DECLARE
  v_now_ms float8 := (extract(epoch FROM now()) * 1000)::float8;
  v_renewed bigint;
BEGIN
  RETURN QUERY
  WITH r AS MATERIALIZED (
    SELECT r.name, r.holder, string_to_array(r.expect, ',') AS expect, r.nxt, r.ttl_ms
      FROM unnest(p_names, p_holders, p_expect, p_next, p_ttl_ms) AS r(name, holder, expect, nxt, ttl_ms)
     ORDER BY r.name
  ), upd AS (
    UPDATE ${s}.leases AS l
       SET nonce = r.nxt, expires_at = now() + r.ttl_ms * interval '1 millisecond', renewed_at = now(), ended_by = NULL
      FROM r
     WHERE l.name = r.name AND l.holder = r.holder AND l.nonce = ANY (r.expect) AND l.expires_at > now()
    RETURNING l.name, l.token, l.holder, l.expires_at
  )
  SELECT u.name, 'renewed'::text, NULL::text, u.token, u.holder, (extract(epoch FROM u.expires_at) * 1000)::float8, v_now_ms
    FROM upd u;
  GET DIAGNOSTICS v_renewed = ROW_COUNT;
  IF v_renewed = cardinality(p_names) THEN
    RETURN;
  END IF;
  RETURN QUERY
  WITH rest AS MATERIALIZED (
    SELECT r.name, r.holder AS req_holder, string_to_array(r.expect, ',') AS expect,
           l.holder, l.nonce, l.token, l.expires_at, l.ended_by
      FROM unnest(p_names, p_holders, p_expect, p_next) AS r(name, holder, expect, nxt)
      JOIN ${s}.leases AS l ON l.name = r.name
     WHERE NOT coalesce(l.holder = r.holder AND l.nonce = r.nxt AND l.renewed_at = now(), false)
  ), conflict AS (
    UPDATE ${s}.leases AS l
       SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'conflict'
      FROM rest c
     WHERE l.name = c.name AND l.holder = c.req_holder AND NOT (l.nonce = ANY (c.expect)) AND l.expires_at > now()
    RETURNING l.name, l.token, c.req_holder
  ), hist AS (
    INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
    SELECT x.name, 'conflict', NULL, x.req_holder, x.token, now(), '${CONFLICT_DETAIL}' FROM conflict x
  )
  -- Each lost row as this statement's snapshot shows it: a conflict ended above is answered
  -- with the holder and expiry it had (the store's answer turns that into the ended term).
  SELECT a.name, 'lost'::text,
         CASE WHEN a.holder = a.req_holder AND a.nonce = ANY (a.expect) THEN 'expired'
              WHEN a.holder = a.req_holder THEN 'cloned'
              WHEN a.holder IS NULL AND a.ended_by = 'revoked' THEN 'revoked'
              WHEN a.holder IS NULL AND a.ended_by = 'released' THEN 'released'
              WHEN a.holder IS NULL AND a.ended_by = 'conflict' THEN 'cloned'
              WHEN a.holder IS NULL THEN 'expired'
              ELSE 'superseded' END,
         a.token, a.holder, (extract(epoch FROM a.expires_at) * 1000)::float8, v_now_ms
    FROM rest a
  -- The store's now, for names without a row (never claimed), which the caller answers lost.
  UNION ALL
  SELECT NULL, NULL, NULL, NULL, NULL, NULL, v_now_ms;
END
$fn$;
`;
}
