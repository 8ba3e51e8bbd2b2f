/**
 * Migration 5: tokens that never repeat across an asynchronous failover.
 *
 * A standby promoted after the primary died has not seen the primary's last commits, so its
 * `leases.token` counters are behind: counting on from them reissued tokens the old primary had
 * already handed out (to other holders, and fenced resources had accepted them). What a promoted
 * standby does know is that it is on a new timeline: PostgreSQL increments the timeline id at
 * every promotion, and every WAL segment name carries it. So a term's token is at least
 * `(timeline - 1) * 2^40 + 1`: on the timeline a cluster starts on (1) nothing changes; after a
 * promotion every new token is above every token the previous timelines can have issued, as long
 * as they stayed under 2^40 (a token floor set with `migrate --min-token` at or above 2^40 gives up
 * this margin: after a promotion, raise the floor again above the old primary's last token). 2^40 per timeline and up to 2^23
 * timelines stay inside a bigint.
 *
 * The timeline is read from the current WAL insert position's segment name, which is the
 * timeline in effect right after a promotion (pg_control_checkpoint() lags it until the next
 * checkpoint) and needs no privilege. Only the claim function writes tokens, and it runs on a
 * primary, where pg_current_wal_lsn() answers.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name */
export function migration005(s: string): string {
  return `
-- The lowest token this timeline may issue, less one: (timeline - 1) * 2^40.
CREATE OR REPLACE FUNCTION ${s}.timeline_token_floor() RETURNS bigint LANGUAGE sql VOLATILE AS $fn$
  SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40
$fn$;
CREATE OR REPLACE FUNCTION ${s}.claim(
  p_names text[], p_holders text[], p_expect text[], p_next text[],
  p_ttl_ms float8[], p_contend boolean[]
) RETURNS TABLE (name text, outcome text, reason text, token bigint, holder text,
                 expires_at_ms float8, now_ms float8)
LANGUAGE plpgsql
-- Plan each call for its own batch size: a generic plan cached after a few one-lease calls
-- joins the CTEs with nested loops, which turns a 10,000-lease batch into seconds.
SET plan_cache_mode = force_custom_plan
AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
  v_floor bigint := ${s}.timeline_token_floor();
BEGIN
  INSERT INTO ${s}.leases AS l (name) SELECT DISTINCT u FROM unnest(p_names) AS u
    ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
  PERFORM 1 FROM ${s}.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
  RETURN QUERY
  WITH req AS (
    SELECT r.name, r.holder, string_to_array(r.expect, ',') AS expect, r.nxt, r.ttl_ms, r.contend, r.ord
      FROM unnest(p_names, p_holders, p_expect, p_next, p_ttl_ms, p_contend)
      WITH ORDINALITY AS r(name, holder, expect, nxt, ttl_ms, contend, ord)
  ), cur AS (
    SELECT r.*, l.holder AS cur_holder, l.nonce AS cur_nonce, l.token AS cur_token,
           l.expires_at AS cur_expires, l.ended_by AS cur_ended_by,
           CASE
             WHEN NOT r.contend THEN
               CASE WHEN l.holder = r.holder AND l.nonce = ANY (r.expect) AND l.expires_at > v_now
                    THEN 'renewed' ELSE 'lost' END
             WHEN l.holder IS NULL OR l.expires_at <= v_now THEN 'acquired'
             ELSE 'busy'
           END AS outcome
      FROM req r JOIN ${s}.leases l ON l.name = r.name
  ), upd AS (
    UPDATE ${s}.leases AS l
       SET holder = c.holder,
           nonce = c.nxt,
           token = CASE WHEN c.outcome = 'acquired' THEN GREATEST(l.token + 1, v_floor + 1) ELSE l.token END,
           expires_at = v_now + c.ttl_ms * interval '1 millisecond',
           term_started_at = CASE WHEN c.outcome = 'acquired' THEN v_now ELSE l.term_started_at END,
           renewed_at = v_now,
           ended_by = NULL
      FROM cur c
     WHERE l.name = c.name AND c.outcome IN ('acquired', 'renewed')
    RETURNING l.name, l.token, l.expires_at
  ), conflict AS (
    -- Our holder id with a nonce we do not hold, on a live term: two processes are renewing
    -- one term (a snapshot restored twice). Neither can be told apart from the other, so the
    -- term ends for both; the next acquisition gets a larger token and fences them both.
    UPDATE ${s}.leases AS l
       SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'conflict'
      FROM cur c
     WHERE l.name = c.name AND c.outcome = 'lost' AND c.cur_holder = c.holder
       AND NOT (c.cur_nonce = ANY (c.expect)) AND c.cur_expires > v_now
    RETURNING l.name, l.token
  ), hist AS (
    INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
    SELECT c.name, CASE WHEN c.cur_holder IS NULL OR c.cur_ended_by IS NOT NULL THEN 'acquired' ELSE 'takeover' END,
           c.holder, c.cur_holder, u.token, v_now, NULL
      FROM cur c JOIN upd u ON u.name = c.name
     WHERE c.outcome = 'acquired'
    UNION ALL
    SELECT x.name, 'conflict', NULL, c.holder, x.token, v_now, 'two processes renewed one term (a restored snapshot or a clone)'
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
              ELSE 'superseded' END,
         COALESCE(u.token, c.cur_token),
         CASE WHEN u.name IS NOT NULL THEN c.holder ELSE c.cur_holder END,
         (extract(epoch FROM COALESCE(u.expires_at, c.cur_expires)) * 1000)::float8,
         (extract(epoch FROM v_now) * 1000)::float8
    FROM cur c LEFT JOIN upd u ON u.name = c.name
   ORDER BY c.ord;
END
$fn$;
`;
}
