/**
 * Migration 14 (issue 33 item 5, issue 32): a term granted under liveness 'session' goes to the
 * contender whose session holds the lease's session lock, not to whichever claim lands first.
 *
 * Every contender opens its session and takes the session lock if it is free, then claims over
 * the pool: two steps on two connections. When several contend at once (per-slot cron: every
 * replica at every slot) the lock and the term could go to two of them, and the winner's term
 * was an ordinary 'ttl' term: its death was noticed at its TTL, not at once. Now a claim whose
 * session does not hold the lock, for a lease no live term holds, is answered 'busy' (no
 * holder, "expires" when the refusal lapses) while another session holds the lock and looks
 * like a contender about to claim: it is not the row's recorded session (a frozen holder whose
 * term expired keeps its lock, and must not block the lease), and its backend ran a statement
 * within the grace (least of 2 s and a quarter of the TTL). The lock holder's own claim follows
 * within milliseconds and wins a tied term.
 *
 * The grace bounds what a contender frozen (or lost) between taking the lock and claiming can
 * cost: after it, claims are granted as before, as 'ttl' terms. Freshness is read from
 * pg_stat_activity.state_change, which PostgreSQL shows only for backends of the same role (or
 * to pg_read_all_stats): a lock held by another role's backend never refuses, as before.
 * Refusing never grants anything, so no safety argument changes; only who wins a free lease.
 *
 * Numbered 16 (reserved for this change); the fourteenth in schema.ts's list until 14 and 15
 * land. Frozen once merged: src/backends/postgres/schema.sql shows the result.
 */
import { SESSION_ENDED_DETAIL } from './011-session-liveness.js';

/** @param s the quoted schema name */
export function migration014(s: string): string {
  // As migration 11 keys the lock: the schema's hash, then the lease name's.
  const k1 = `hashtext('leasehold.session.${s.replace(/"/g, '')}')`;
  return `
-- The time (ms since the epoch) until which a claim by p_pid's session is refused because
-- another session holds the lease's session lock and ran a statement within p_grace_ms;
-- NULL when no such session (the lock free, p_pid's own, or the current term's recorded one).
CREATE FUNCTION ${s}.session_rival(p_name text, p_pid integer, p_grace_ms float8) RETURNS float8
LANGUAGE sql STABLE AS $fn$
  SELECT (extract(epoch FROM max(a.state_change)) * 1000)::float8 + p_grace_ms
    FROM pg_catalog.pg_locks AS k JOIN pg_catalog.pg_stat_activity AS a ON a.pid = k.pid
   WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
     AND k.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
     AND k.classid = (${k1})::oid AND k.objid = (hashtext(p_name))::oid
     AND k.pid <> p_pid
     AND k.pid IS DISTINCT FROM (SELECT l.session_pid FROM ${s}.leases AS l WHERE l.name = p_name)
     AND a.state_change > clock_timestamp() - p_grace_ms * interval '1 millisecond'
  HAVING count(*) > 0
$fn$;

CREATE OR REPLACE FUNCTION ${s}.claim_session(
  p_names text[], p_holders text[], p_expect text[], p_next text[],
  p_ttl_ms float8[], p_contend boolean[], p_handoff text[], p_session integer[]
) RETURNS TABLE (name text, outcome text, reason text, token bigint, holder text,
                 expires_at_ms float8, now_ms float8, nonce text, session boolean)
LANGUAGE plpgsql
AS $fn$
#variable_conflict use_column
DECLARE
  r record;
  v_pid integer;
  v_until float8[];
  v_now_ms float8 := (extract(epoch FROM now()) * 1000)::float8;
BEGIN
  IF EXISTS (SELECT 1 FROM ${s}.leases AS l
              WHERE l.name = ANY (p_names) AND l.holder IS NOT NULL AND l.session_pid IS NOT NULL
                AND l.session_server = pg_postmaster_start_time()
                AND l.expires_at > now() AND NOT ${s}.session_alive(l.name, l.session_pid)) THEN
    -- In name order, as claim_write locks, so that two batches never deadlock.
    PERFORM 1 FROM ${s}.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
    WITH ended AS (
      UPDATE ${s}.leases AS l
         SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'revoked', session_pid = NULL, session_server = NULL
        FROM ${s}.leases AS old
       WHERE old.name = l.name AND l.name = ANY (p_names) AND l.holder IS NOT NULL
         AND l.session_pid IS NOT NULL AND l.session_server = pg_postmaster_start_time()
         AND l.expires_at > now() AND NOT ${s}.session_alive(l.name, l.session_pid)
      RETURNING l.name, l.token, old.holder AS previous_holder, old.session_pid AS pid)
    INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
    SELECT e.name, 'revoked', NULL, e.previous_holder, e.token, now(),
           '${SESSION_ENDED_DETAIL.replace(/'/g, "''")} (backend ' || e.pid || ')'
      FROM ended AS e;
  END IF;
  -- Per request: refused until this time, or NULL. Only a contender with a session that does
  -- not hold the lock, for a lease no live term holds (a live one answers 'busy' anyway, and a
  -- term a release handed to this contender must still be answered as its own).
  SELECT array_agg(CASE WHEN x.pid IS NOT NULL AND x.contend AND (l.holder IS NULL OR l.expires_at <= now())
                             AND NOT ${s}.session_alive(x.name, x.pid)
                        THEN ${s}.session_rival(x.name, x.pid, least(2000, x.ttl / 4)) END ORDER BY x.ord)
    INTO v_until
    FROM unnest(p_names, p_session, p_ttl_ms, p_contend) WITH ORDINALITY AS x(name, pid, ttl, contend, ord)
    LEFT JOIN ${s}.leases AS l ON l.name = x.name;
  FOR r IN
    WITH kept AS (
      SELECT o, row_number() OVER (ORDER BY o) AS k FROM generate_subscripts(p_names, 1) AS o WHERE v_until[o] IS NULL
    ), c AS (
      SELECT * FROM ${s}.claim(
        array(SELECT p_names[o] FROM kept ORDER BY o), array(SELECT p_holders[o] FROM kept ORDER BY o),
        array(SELECT p_expect[o] FROM kept ORDER BY o), array(SELECT p_next[o] FROM kept ORDER BY o),
        array(SELECT p_ttl_ms[o] FROM kept ORDER BY o), array(SELECT p_contend[o] FROM kept ORDER BY o),
        array(SELECT p_handoff[o] FROM kept ORDER BY o)) WITH ORDINALITY AS c
    )
    SELECT i, v_until[i] AS until, p_session[i] AS pid, p_names[i] AS req_name,
           c.name AS c_name, c.outcome AS c_outcome, c.reason AS c_reason, c.token AS c_token, c.holder AS c_holder,
           c.expires_at_ms AS c_expires_at_ms, c.now_ms AS c_now_ms, c.nonce AS c_nonce
      FROM generate_subscripts(p_names, 1) AS i
      LEFT JOIN kept ON kept.o = i
      LEFT JOIN c ON c.ordinality = kept.k
     ORDER BY i
  LOOP
    IF r.until IS NOT NULL THEN
      name := r.req_name; outcome := 'busy'; reason := NULL; holder := NULL; nonce := NULL; session := false;
      token := (SELECT l.token FROM ${s}.leases AS l WHERE l.name = r.req_name);
      expires_at_ms := r.until; now_ms := v_now_ms;
      RETURN NEXT;
      CONTINUE;
    END IF;
    v_pid := NULL;
    IF r.c_outcome IN ('acquired', 'renewed') AND r.pid IS NOT NULL THEN
      UPDATE ${s}.leases AS l SET session_pid = r.pid, session_server = pg_postmaster_start_time()
       WHERE l.name = r.c_name AND l.token = r.c_token AND l.holder = r.c_holder
         AND l.session_pid IS DISTINCT FROM r.pid AND ${s}.session_alive(r.c_name, r.pid);
      SELECT l.session_pid INTO v_pid FROM ${s}.leases AS l WHERE l.name = r.c_name AND l.token = r.c_token;
    END IF;
    name := r.c_name; outcome := r.c_outcome; reason := r.c_reason; token := r.c_token; holder := r.c_holder;
    expires_at_ms := r.c_expires_at_ms; now_ms := r.c_now_ms; nonce := r.c_nonce;
    session := v_pid IS NOT DISTINCT FROM r.pid AND r.pid IS NOT NULL;
    RETURN NEXT;
  END LOOP;
END
$fn$;
`;
}
