/**
 * Migration 13 (issue 34): `release_many` set-based. Migration 7's function released a batch
 * row by row in plpgsql (a SELECT ... FOR UPDATE, an UPDATE and a history INSERT per lease):
 * closing 10,000 leases was one statement but 1.4-1.7 s of server time.
 *
 * The new `release_many` answers the same rows with one statement over the whole batch:
 *  - `cur` locks each row the caller may act on, in name order: a LATERAL subquery with FOR
 *    UPDATE per request, driven by the sorted requests (a subquery with FOR UPDATE is never
 *    flattened, so the plan is that nested loop whatever the planner thinks of the sizes). The
 *    order is the claim function's and migration 7's, so a batch release and a batch claim of
 *    another process cannot deadlock. The lock re-reads a row changed since the snapshot and
 *    rechecks the match, so each decision (release, hand over to a live waiter, withdraw our
 *    waiter registration) is made on the latest committed version, as migration 7 made it;
 *  - `upd` writes each locked row as migration 7 did for its case, from the values read under
 *    the lock, and `hist` writes the same history rows, in the same order;
 *  - the loop over the answer only notifies the handed-over rows (pg_notify is per row, the
 *    freed rows are announced by the leases_freed trigger as before) and returns the answers.
 *
 * Migration 7's function stays, as `release_many_rows`, for two kinds of batch:
 *  - under 10 rows, among them every single `release` and so every handover: there the one
 *    statement costs more than the loop (measured on one connection, 1 row: 1.1-2.4 ms against
 *    0.55; 10 rows: even; 100 rows: 5-7 ms against 6; 1,000: 47-51 against 65-81);
 *  - a batch naming one lease twice: there the second request sees what the first did (a
 *    withdrawn waiter, then a release; a handover, then a release by the new holder), which one
 *    statement over one snapshot does not give. A process does not send that in practice.
 *
 * Durability is migration 7's: the commit skips the WAL flush only when nothing was handed over.
 *
 * Frozen once merged: this is the SQL that databases at this version ran;
 * src/backends/postgres/schema.sql shows the result.
 * @param s the quoted schema name
 * @param channel the NOTIFY channel (../schema.ts channelFor)
 */
export function migration013(s: string, channel: string): string {
  return `
ALTER FUNCTION ${s}.release_many(text[], text[], text[]) RENAME TO release_many_rows;

CREATE FUNCTION ${s}.release_many(p_names text[], p_holders text[], p_expects text[])
RETURNS TABLE (ord bigint, released boolean)
LANGUAGE plpgsql
-- The planner guesses the CTEs' sizes far too high and compiled the statement with JIT: 45 ms of
-- a 10,000-lease batch that runs in about 300 without it.
SET jit TO off
AS $fn$
#variable_conflict use_column
DECLARE
  v_row record;
  v_handed boolean := false;
BEGIN
  IF cardinality(p_names) < 10 OR EXISTS (SELECT 1 FROM unnest(p_names) AS n GROUP BY n HAVING count(*) > 1) THEN
    RETURN QUERY SELECT m.ord, m.released FROM ${s}.release_many_rows(p_names, p_holders, p_expects) AS m;
    RETURN;
  END IF;
  FOR v_row IN
    WITH r AS MATERIALIZED (
      SELECT r.name, r.holder, string_to_array(r.expect, ',') AS expect, r.ord
        FROM unnest(p_names, p_holders, p_expects) WITH ORDINALITY AS r(name, holder, expect, ord)
       ORDER BY r.name
    ), cur AS MATERIALIZED (
      SELECT r.ord, r.name, r.holder AS req_holder, c.token, c.ours,
             c.ours AND c.waiter IS NOT NULL AND c.waiter <> r.holder AND c.waiter_until > now() AS hand,
             c.waiter, c.waiter_nonce, c.waiter_ttl_ms
        FROM r, LATERAL (
          SELECT l.token, coalesce(l.holder = r.holder AND l.nonce = ANY (r.expect), false) AS ours,
                 l.waiter, l.waiter_nonce, l.waiter_ttl_ms, l.waiter_until
            FROM ${s}.leases AS l
           WHERE l.name = r.name
             AND ((l.holder = r.holder AND l.nonce = ANY (r.expect)) OR (l.waiter = r.holder AND l.waiter_nonce = ANY (r.expect)))
             FOR UPDATE
        ) AS c
    ), floor AS MATERIALIZED (
      -- Once per batch, and only when some row is handed over (an uncorrelated subquery runs once).
      SELECT ${s}.timeline_token_floor() AS f WHERE EXISTS (SELECT 1 FROM cur WHERE cur.hand)
    ), upd AS (
      UPDATE ${s}.leases AS l
         SET holder = CASE WHEN c.hand THEN c.waiter WHEN c.ours THEN NULL ELSE l.holder END,
             nonce = CASE WHEN c.hand THEN c.waiter_nonce WHEN c.ours THEN NULL ELSE l.nonce END,
             token = CASE WHEN c.hand THEN GREATEST(l.token + 1, (SELECT f FROM floor) + 1) ELSE l.token END,
             expires_at = CASE WHEN c.hand THEN now() + c.waiter_ttl_ms * interval '1 millisecond'
                               WHEN c.ours THEN now() ELSE l.expires_at END,
             term_started_at = CASE WHEN c.hand THEN now() ELSE l.term_started_at END,
             renewed_at = CASE WHEN c.hand THEN now() ELSE l.renewed_at END,
             ended_by = CASE WHEN c.hand THEN NULL WHEN c.ours THEN 'released' ELSE l.ended_by END,
             waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
        FROM cur AS c
       WHERE l.name = c.name
      RETURNING l.name, l.token
    ), hist AS (
      INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
      SELECT h.name, h.event, h.holder, h.previous_holder, h.token, now(), h.detail
        FROM (
          SELECT c.name, 0 AS step, 'released' AS event, NULL::text AS holder, c.req_holder AS previous_holder, c.token, NULL::text AS detail
            FROM cur AS c WHERE c.ours
          UNION ALL
          SELECT c.name, 1, 'acquired', c.waiter, NULL, u.token, 'handed over by the release'
            FROM cur AS c JOIN upd AS u ON u.name = c.name WHERE c.hand
        ) AS h
       ORDER BY h.name, h.step
    )
    SELECT r.ord, r.name, coalesce(c.ours, false) AS ours, coalesce(c.hand, false) AS hand
      FROM r LEFT JOIN cur AS c ON c.ord = r.ord
     ORDER BY r.name
  LOOP
    IF v_row.hand THEN
      -- The row keeps a holder, so the leases_freed trigger does not fire: notify here.
      PERFORM pg_notify('${channel}', v_row.name);
      v_handed := true;
    END IF;
    ord := v_row.ord;
    released := v_row.ours;
    RETURN NEXT;
  END LOOP;
  IF NOT v_handed THEN
    -- This transaction only (is_local): see migrations 6 and 7.
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
END
$fn$;
`;
}
