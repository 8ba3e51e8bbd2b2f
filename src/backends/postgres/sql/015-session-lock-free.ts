/**
 * Migration 15 (issue 33 item 5, issue 32): a claim under liveness 'session' is not granted an
 * untied term because its session missed a lock that is free by the time the claim lands.
 *
 * Migration 14 answered 'busy' a claim whose session does not hold the lease's session lock
 * while another session holds it as a contender about to claim. It granted the claim when *no*
 * session held the lock, and such a term is tied to nothing (the claimant's session does not
 * hold the lock either): its holder's death is noticed at its TTL. On a loaded host that is the
 * usual race of per-slot cron: replica B opens its session while replica A's holds the lock (B
 * misses it), A claims, runs its short job and releases (its lock goes), and only then does B's
 * claim land, on a free lease and a free lock ("could not tie this term"; CI, PostgreSQL, three
 * test files at once on two cores). The lock was B's for the taking all along.
 *
 * Now such a claim is answered 'busy' with reason 'session-lock-free' (no holder; "expires" now):
 * the contender takes the lock on its own session (a lock wait, granted at once while the lock
 * is free) and claims again at once, for a tied term (src/core/liveness.ts). Nothing is granted
 * that was not before, only later by one round trip, so no safety argument changes.
 *
 * The rows are locked before anything is read (they were only when an orphan was to be ended):
 * a claim landing during a holder's release over its session (the lock let go, the COMMIT not
 * yet) read a live term, skipped every check, waited for the row in claim() and was granted it
 * untied. Locked first, it reads the release as committed, and the checks apply.
 *
 * The lock's holder is read from pg_locks once per request (`session_lock_holder`), and every
 * decision is made on that one reading: migration 14 read it twice (is the claimant's session
 * the holder; is another session a fresh holder), and a holder that let go between the two reads
 * made the second say "no rival", which granted an untied term the same way.
 * `session_rival` goes: its one caller is replaced here.
 *
 * Frozen once merged: src/backends/postgres/schema.sql shows the result.
 */
import { SESSION_ENDED_DETAIL } from './011-session-liveness.js';

/** The `reason` of a claim answered 'busy' because the session lock is free (./claim.ts reads it). */
export const SESSION_LOCK_FREE = 'session-lock-free';

/** @param s the quoted schema name */
export function migration015(s: string): string {
  // As migration 11 keys the lock: the schema's hash, then the lease name's.
  const k1 = `hashtext('leasehold.session.${s.replace(/"/g, '')}')`;
  return `
DROP FUNCTION ${s}.session_rival(text, integer, float8);

-- The backend that holds the lease's session lock now, or NULL: one reading of pg_locks. An
-- advisory lock taken in exclusive mode has at most one granted holder.
CREATE FUNCTION ${s}.session_lock_holder(p_name text) RETURNS integer
LANGUAGE sql STABLE AS $fn$
  SELECT k.pid FROM pg_catalog.pg_locks AS k
   WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
     AND k.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
     AND k.classid = (${k1})::oid AND k.objid = (hashtext(p_name))::oid
   LIMIT 1
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
  v_lock integer;
  v_grace float8;
  v_until float8[] := array_fill(NULL::float8, ARRAY[cardinality(p_names)]);
  v_free boolean[] := array_fill(false, ARRAY[cardinality(p_names)]);
  v_now_ms float8 := (extract(epoch FROM now()) * 1000)::float8;
BEGIN
  -- The rows first, in name order (as claim_write locks them, so that two batches never
  -- deadlock): every statement below then reads them as committed after any release in flight.
  -- A holder's release over its session lets the session lock go before its COMMIT (so that a
  -- follower the unlock wakes finds the row released, src/backends/postgres/session.ts); a claim
  -- that read the row before that COMMIT saw a live term, skipped the checks below, then waited
  -- in claim() for the row and was granted it untied, its session having missed the lock.
  PERFORM 1 FROM ${s}.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
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
  -- Per request, only a contender with a session, for a lease no live term holds (a live one
  -- answers 'busy' anyway, and a term a release handed to this contender must still be answered
  -- as its own): who holds the session lock decides.
  FOR j IN 1 .. cardinality(p_names) LOOP
    CONTINUE WHEN p_session[j] IS NULL OR NOT p_contend[j];
    CONTINUE WHEN EXISTS (SELECT 1 FROM ${s}.leases AS l WHERE l.name = p_names[j] AND l.holder IS NOT NULL AND l.expires_at > now());
    v_lock := ${s}.session_lock_holder(p_names[j]);
    IF v_lock IS NULL THEN
      -- Free: the claimant's session takes it and claims again, rather than hold a term tied to nothing.
      v_free[j] := true;
    ELSIF v_lock <> p_session[j]
          AND v_lock IS DISTINCT FROM (SELECT l.session_pid FROM ${s}.leases AS l WHERE l.name = p_names[j]) THEN
      -- Another session's, not the recorded holder's (a frozen holder whose term expired keeps
      -- its lock and must not block the lease): refused while that session looks like a
      -- contender about to claim, having run a statement within the grace (migration 14's rule).
      v_grace := least(2000, p_ttl_ms[j] / 4);
      v_until[j] := (SELECT (extract(epoch FROM a.state_change) * 1000)::float8 + v_grace
                       FROM pg_catalog.pg_stat_activity AS a
                      WHERE a.pid = v_lock AND a.state_change > clock_timestamp() - v_grace * interval '1 millisecond');
    END IF;
  END LOOP;
  FOR r IN
    WITH kept AS (
      SELECT o, row_number() OVER (ORDER BY o) AS k FROM generate_subscripts(p_names, 1) AS o
       WHERE v_until[o] IS NULL AND NOT v_free[o]
    ), c AS (
      SELECT * FROM ${s}.claim(
        array(SELECT p_names[o] FROM kept ORDER BY o), array(SELECT p_holders[o] FROM kept ORDER BY o),
        array(SELECT p_expect[o] FROM kept ORDER BY o), array(SELECT p_next[o] FROM kept ORDER BY o),
        array(SELECT p_ttl_ms[o] FROM kept ORDER BY o), array(SELECT p_contend[o] FROM kept ORDER BY o),
        array(SELECT p_handoff[o] FROM kept ORDER BY o)) WITH ORDINALITY AS c
    )
    SELECT i, v_until[i] AS until, v_free[i] AS free, p_session[i] AS pid, p_names[i] AS req_name,
           c.name AS c_name, c.outcome AS c_outcome, c.reason AS c_reason, c.token AS c_token, c.holder AS c_holder,
           c.expires_at_ms AS c_expires_at_ms, c.now_ms AS c_now_ms, c.nonce AS c_nonce
      FROM generate_subscripts(p_names, 1) AS i
      LEFT JOIN kept ON kept.o = i
      LEFT JOIN c ON c.ordinality = kept.k
     ORDER BY i
  LOOP
    IF r.until IS NOT NULL OR r.free THEN
      name := r.req_name; outcome := 'busy'; holder := NULL; nonce := NULL; session := false;
      reason := CASE WHEN r.free THEN '${SESSION_LOCK_FREE}' END;
      token := (SELECT l.token FROM ${s}.leases AS l WHERE l.name = r.req_name);
      expires_at_ms := CASE WHEN r.free THEN v_now_ms ELSE r.until END; now_ms := v_now_ms;
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
