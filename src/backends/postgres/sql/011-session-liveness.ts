/**
 * Migration 11 (issue 32): liveness 'session'. A term may be tied to its holder's *session*: a
 * connection of the holder's own that holds a session-level advisory lock keyed by the lease
 * (the "session lock"). PostgreSQL releases that lock the moment the backend ends, and the
 * backend ends the moment the holder's process dies (its socket closes). So:
 *  - `leases.session_pid` records the backend that held the session lock when the term was
 *    granted (NULL: a term in 'ttl' mode, or one whose session could not be confirmed);
 *  - `session_alive(name, pid)` says whether that backend still holds the session lock
 *    (pg_locks, which every role may read; pid and lock together, so a reused pid is not
 *    mistaken for the dead holder unless it also holds this lease's lock, which only errs on
 *    the side of waiting for the TTL);
 *  - `leases.session_server` records the server it was on (pg_postmaster_start_time()): after a
 *    restart, a failover or a restore, no lock of the old server's sessions can be seen, and that
 *    says nothing of whether the holder lives (a partition during the restart hides the close
 *    from it), so such a term is left to its expiry, as in 'ttl' mode;
 *  - `claim_session` ends every term among its names whose recorded session is gone, as an
 *    operator's revocation ends one (holder cleared, a 'revoked' history row with its own
 *    detail, the release trigger notifies), then claims as `claim` does, and records the caller's
 *    session with the granted terms whose session lock it holds;
 *  - a trigger clears `session_pid` whenever a term ends or a new one begins (a new token), so
 *    a term in 'ttl' mode never inherits the session of the term before it.
 * Followers wait on the session lock itself (pg_advisory_lock on their own session): it is
 * granted to one of them as the holder's backend exits.
 *
 * Numbered 11: 10 was reserved for another change. Frozen once merged: this is the SQL that
 * databases at this version ran; src/backends/postgres/schema.sql shows the result.
 */
export const SESSION_ENDED_DETAIL = "the holder's session ended (liveness: session): its connection to PostgreSQL closed";

/** @param s the quoted schema name */
export function migration011(s: string): string {
  // The lock's first key names the schema, so two schemas' leases of one name do not share it.
  const k1 = `hashtext('leasehold.session.${s.replace(/"/g, '')}')`;
  return `
ALTER TABLE ${s}.leases ADD COLUMN session_pid integer, ADD COLUMN session_server timestamptz;

CREATE FUNCTION ${s}.session_try_lock(p_name text) RETURNS boolean
LANGUAGE sql VOLATILE AS $fn$ SELECT pg_try_advisory_lock(${k1}, hashtext(p_name)) $fn$;

CREATE FUNCTION ${s}.session_wait_lock(p_name text) RETURNS boolean
LANGUAGE sql VOLATILE AS $fn$ SELECT pg_advisory_lock(${k1}, hashtext(p_name)) IS NOT NULL $fn$;

CREATE FUNCTION ${s}.session_alive(p_name text, p_pid integer) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks
     WHERE locktype = 'advisory' AND granted AND pid = p_pid AND objsubid = 2
       AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
       AND classid = (${k1})::oid AND objid = (hashtext(p_name))::oid)
$fn$;

CREATE FUNCTION ${s}.session_clear() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF NEW.holder IS NULL OR NEW.token IS DISTINCT FROM OLD.token THEN
    NEW.session_pid := NULL;
    NEW.session_server := NULL;
  END IF;
  RETURN NEW;
END
$fn$;
CREATE TRIGGER leases_session_clear BEFORE UPDATE ON ${s}.leases
  FOR EACH ROW WHEN (OLD.session_pid IS NOT NULL OR NEW.session_pid IS NOT NULL OR NEW.session_server IS NOT NULL)
  EXECUTE FUNCTION ${s}.session_clear();

-- claim, with p_session: per request, the backend pid of the caller's session (NULL for none).
-- The extra column says whether the term now recorded is tied to that session.
CREATE FUNCTION ${s}.claim_session(
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
  FOR r IN SELECT c.*, x.pid, x.ord
             FROM ${s}.claim(p_names, p_holders, p_expect, p_next, p_ttl_ms, p_contend, p_handoff) WITH ORDINALITY AS c
             JOIN unnest(p_session) WITH ORDINALITY AS x(pid, ord) ON x.ord = c.ordinality
            ORDER BY c.ordinality LOOP
    v_pid := NULL;
    IF r.outcome IN ('acquired', 'renewed') AND r.pid IS NOT NULL THEN
      UPDATE ${s}.leases AS l SET session_pid = r.pid, session_server = pg_postmaster_start_time()
       WHERE l.name = r.name AND l.token = r.token AND l.holder = r.holder
         AND l.session_pid IS DISTINCT FROM r.pid AND ${s}.session_alive(r.name, r.pid);
      SELECT l.session_pid INTO v_pid FROM ${s}.leases AS l WHERE l.name = r.name AND l.token = r.token;
    END IF;
    name := r.name; outcome := r.outcome; reason := r.reason; token := r.token; holder := r.holder;
    expires_at_ms := r.expires_at_ms; now_ms := r.now_ms; nonce := r.nonce;
    session := v_pid IS NOT DISTINCT FROM r.pid AND r.pid IS NOT NULL;
    RETURN NEXT;
  END LOOP;
END
$fn$;
`;
}
