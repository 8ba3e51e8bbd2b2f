-- PostgreSQL 15
-- tables and columns
fences.lease text
fences.resource text NOT NULL
fences.token bigint NOT NULL
fences.updated_at timestamp with time zone NOT NULL DEFAULT now()
fleet_agents.deregistered_at timestamp with time zone
fleet_agents.draining boolean NOT NULL DEFAULT false
fleet_agents.id text NOT NULL
fleet_agents.labels jsonb NOT NULL DEFAULT '{}'::jsonb
fleet_agents.owned bigint NOT NULL DEFAULT 0
fleet_agents.started_at timestamp with time zone NOT NULL
fleet_ownership.agent text NOT NULL
fleet_ownership.generation bigint NOT NULL
fleet_ownership.labels jsonb NOT NULL DEFAULT '{}'::jsonb
fleet_ownership.placed_at timestamp with time zone NOT NULL
fleet_ownership.resource text NOT NULL
history.at timestamp with time zone NOT NULL
history.detail text
history.event text NOT NULL
history.holder text
history.id bigint NOT NULL DEFAULT nextval('SCHEMA.history_id_seq'::regclass)
history.name text NOT NULL
history.previous_holder text
history.token bigint NOT NULL
leases.ended_by text
leases.expires_at timestamp with time zone
leases.fence_nonce text
leases.fence_token bigint
leases.holder text
leases.name text NOT NULL
leases.nonce text
leases.renewed_at timestamp with time zone
leases.session_pid integer
leases.session_server timestamp with time zone
leases.term_started_at timestamp with time zone
leases.token bigint NOT NULL DEFAULT 0
leases.waiter text
leases.waiter_nonce text
leases.waiter_ttl_ms double precision
leases.waiter_until timestamp with time zone
schedules.name text NOT NULL
schedules.record text NOT NULL
schedules.token bigint NOT NULL
schedules.updated_at timestamp with time zone NOT NULL DEFAULT now()
schema_version.version integer NOT NULL
slots.ended_at timestamp with time zone
slots.exit_code integer
slots.holder text
slots.name text NOT NULL
slots.reason text
slots.slot text NOT NULL
slots.slot_at timestamp with time zone
slots.started_at timestamp with time zone
slots.status text NOT NULL
slots.token bigint NOT NULL
-- constraints
fences fences_pkey PRIMARY KEY (resource)
fleet_agents fleet_agents_pkey PRIMARY KEY (id)
fleet_ownership fleet_ownership_pkey PRIMARY KEY (resource)
history history_event_check CHECK ((event = ANY (ARRAY['acquired'::text, 'takeover'::text, 'released'::text, 'revoked'::text, 'conflict'::text])))
history history_pkey PRIMARY KEY (id)
leases leases_ended_by_check CHECK ((ended_by = ANY (ARRAY['released'::text, 'revoked'::text, 'conflict'::text])))
leases leases_pkey PRIMARY KEY (name)
schedules schedules_pkey PRIMARY KEY (name)
slots slots_pkey PRIMARY KEY (name, slot)
slots slots_status_check CHECK ((status = ANY (ARRAY['claimed'::text, 'succeeded'::text, 'failed'::text, 'interrupted'::text, 'skipped'::text])))
-- storage options
leases fillfactor=50
-- indexes
CREATE UNIQUE INDEX fences_pkey ON SCHEMA.fences USING btree (resource)
CREATE UNIQUE INDEX fleet_agents_pkey ON SCHEMA.fleet_agents USING btree (id)
CREATE INDEX fleet_agents_placement ON SCHEMA.fleet_agents USING btree (owned, id) WHERE ((deregistered_at IS NULL) AND (NOT draining))
CREATE INDEX fleet_ownership_agent ON SCHEMA.fleet_ownership USING btree (agent)
CREATE UNIQUE INDEX fleet_ownership_pkey ON SCHEMA.fleet_ownership USING btree (resource)
CREATE INDEX history_name_id ON SCHEMA.history USING btree (name, id)
CREATE UNIQUE INDEX history_pkey ON SCHEMA.history USING btree (id)
CREATE UNIQUE INDEX leases_pkey ON SCHEMA.leases USING btree (name)
CREATE UNIQUE INDEX schedules_pkey ON SCHEMA.schedules USING btree (name)
CREATE INDEX slots_name_slot_at ON SCHEMA.slots USING btree (name, slot_at)
CREATE UNIQUE INDEX slots_pkey ON SCHEMA.slots USING btree (name, slot)
-- triggers
CREATE TRIGGER leases_freed AFTER UPDATE OF holder ON SCHEMA.leases FOR EACH ROW WHEN (((old.holder IS NOT NULL) AND (new.holder IS NULL))) EXECUTE FUNCTION SCHEMA.notify_freed()
CREATE TRIGGER leases_session_clear BEFORE UPDATE ON SCHEMA.leases FOR EACH ROW WHEN (((old.session_pid IS NOT NULL) OR (new.session_pid IS NOT NULL) OR (new.session_server IS NOT NULL))) EXECUTE FUNCTION SCHEMA.session_clear()
-- functions
CREATE OR REPLACE FUNCTION SCHEMA.claim(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms double precision[], p_contend boolean[])
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_custom_plan'
AS $function$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
  v_floor bigint := SCHEMA.timeline_token_floor();
BEGIN
  INSERT INTO SCHEMA.leases AS l (name) SELECT DISTINCT u FROM unnest(p_names) AS u
    ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
  PERFORM 1 FROM SCHEMA.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
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
      FROM req r JOIN SCHEMA.leases l ON l.name = r.name
  ), upd AS (
    UPDATE SCHEMA.leases AS l
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
    UPDATE SCHEMA.leases AS l
       SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'conflict'
      FROM cur c
     WHERE l.name = c.name AND c.outcome = 'lost' AND c.cur_holder = c.holder
       AND NOT (c.cur_nonce = ANY (c.expect)) AND c.cur_expires > v_now
    RETURNING l.name, l.token
  ), hist AS (
    INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
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
$function$

CREATE OR REPLACE FUNCTION SCHEMA.claim(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms double precision[], p_contend boolean[], p_handoff text[])
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision, nonce text)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
  v_handed text[];
  v_rest text[];
  v_token bigint;
  v_expires timestamptz;
BEGIN
  IF cardinality(p_names) = 1 AND p_contend[1] AND p_handoff[1] IS NOT NULL THEN
    -- One contender presenting the nonces it registered under (a woken waiter): the acceptance
    -- of a handed term on scalars (migration 19). Locked only if the row holds this contender
    -- under one of those nonces; then the clock, after the lock, as below.
    PERFORM 1 FROM SCHEMA.leases AS l
      WHERE l.name = p_names[1] AND l.holder = p_holders[1] AND l.nonce = ANY (string_to_array(p_handoff[1], ','))
      FOR UPDATE;
    IF FOUND THEN
      v_now := clock_timestamp();
      UPDATE SCHEMA.leases AS l
         SET nonce = p_next[1], expires_at = v_now + p_ttl_ms[1] * interval '1 millisecond', renewed_at = v_now
       WHERE l.name = p_names[1] AND l.expires_at > v_now
      RETURNING l.token, l.expires_at INTO v_token, v_expires;
      IF FOUND THEN
        RETURN QUERY SELECT p_names[1], 'acquired'::text, NULL::text, v_token, p_holders[1],
          (extract(epoch FROM v_expires) * 1000)::float8, (extract(epoch FROM v_now) * 1000)::float8, NULL::text;
        RETURN;
      END IF;
      v_now := now();
    END IF;
  END IF;
  -- Terms handed to their contender (offered by a release, migration 17): kept out of the
  -- INSERT below, so a batch made only of acceptances inserts nothing.
  SELECT coalesce(array_agg(l.name), '{}') INTO v_handed
    FROM unnest(p_names, p_holders, p_contend, p_handoff) AS r(name, holder, contend, handoff)
    JOIN SCHEMA.leases AS l ON l.name = r.name
   WHERE r.contend AND l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ','))
     AND l.expires_at > v_now;
  v_rest := ARRAY(SELECT u FROM unnest(p_names) AS u WHERE u <> ALL (v_handed));
  IF cardinality(v_rest) = 0 THEN
    -- Every request accepts a handed term (a woken follower, alone in its batch). The rows
    -- first, in name order as every claim locks them (two batches never wait on each other),
    -- and then the clock: now() is the transaction's start, before any wait for a row lock, and
    -- an offer that lapsed during that wait must not be accepted.
    PERFORM 1 FROM SCHEMA.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT EXISTS (
      SELECT 1 FROM unnest(p_names, p_holders, p_handoff) AS r(name, holder, handoff)
        LEFT JOIN SCHEMA.leases AS l ON l.name = r.name
       WHERE NOT coalesce(l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ',')) AND l.expires_at > v_now, false)
    ) THEN
      -- Still offered, under the lock: the acceptance is this UPDATE, which gives the term the
      -- waiter's own TTL from now and swaps the registered nonce for the claim's next one (a
      -- compare-and-swap: of two clones presenting the same registered nonce, one accepts, and
      -- the other's claim finds a nonce it never registered).
      RETURN QUERY
      WITH acc AS (
        UPDATE SCHEMA.leases AS l
           SET nonce = r.nxt, expires_at = v_now + r.ttl_ms * interval '1 millisecond', renewed_at = v_now
          FROM unnest(p_names, p_holders, p_next, p_ttl_ms, p_handoff) AS r(name, holder, nxt, ttl_ms, handoff)
         WHERE l.name = r.name AND l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ','))
           AND l.expires_at > v_now
        RETURNING l.name, l.expires_at
      )
      SELECT l.name, CASE WHEN a.name IS NOT NULL THEN 'acquired' ELSE 'busy' END, NULL::text, l.token, l.holder,
             (extract(epoch FROM coalesce(a.expires_at, l.expires_at)) * 1000)::float8, (extract(epoch FROM v_now) * 1000)::float8,
             NULL::text
        FROM unnest(p_names) WITH ORDINALITY AS r(name, ord)
        JOIN SCHEMA.leases AS l ON l.name = r.name
        LEFT JOIN acc AS a ON a.name = r.name
       ORDER BY r.ord;
      RETURN;
    END IF;
    -- An offer ended while this claim waited for its row (it lapsed, or an operator or a clone
    -- ended it): the whole claim, which decides every row again under its lock.
    SELECT coalesce(array_agg(l.name), '{}') INTO v_handed
      FROM unnest(p_names, p_holders, p_contend, p_handoff) AS r(name, holder, contend, handoff)
      JOIN SCHEMA.leases AS l ON l.name = r.name
     WHERE r.contend AND l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ','))
       AND l.expires_at > v_now;
    v_rest := ARRAY(SELECT u FROM unnest(p_names) AS u WHERE u <> ALL (v_handed));
  END IF;
  RETURN QUERY
  SELECT * FROM SCHEMA.claim_write(p_names, p_holders, p_expect, p_next, p_ttl_ms, p_contend, p_handoff, v_handed, v_rest);
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.claim_one(p_name text, p_holder text, p_next text, p_ttl_ms double precision, p_handoff text)
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision, nonce text, granted_at_ms double precision)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
  v_now timestamptz;
  v_token bigint;
  v_expires timestamptz;
BEGIN
  IF p_handoff IS NOT NULL THEN
    PERFORM 1 FROM SCHEMA.leases AS l
      WHERE l.name = p_name AND l.holder = p_holder AND l.nonce = ANY (string_to_array(p_handoff, ','))
      FOR UPDATE;
    IF FOUND THEN
      -- The clock after the lock: now() is the transaction's start, before any wait for the row,
      -- and an offer that lapsed during that wait must not be accepted.
      v_now := clock_timestamp();
      UPDATE SCHEMA.leases AS l
         SET nonce = p_next, expires_at = v_now + p_ttl_ms * interval '1 millisecond', renewed_at = v_now
       WHERE l.name = p_name AND l.expires_at > v_now
      RETURNING l.token, l.expires_at INTO v_token, v_expires;
      IF FOUND THEN
        RETURN QUERY SELECT p_name, 'acquired'::text, NULL::text, v_token, p_holder,
          (extract(epoch FROM v_expires) * 1000)::float8, (extract(epoch FROM v_now) * 1000)::float8, NULL::text, NULL::float8;
        RETURN;
      END IF;
    END IF;
  END IF;
  RETURN QUERY
  SELECT c.name, c.outcome, c.reason, c.token, c.holder, c.expires_at_ms, c.now_ms, c.nonce,
         CASE WHEN c.outcome = 'busy' AND l.token = c.token THEN (extract(epoch FROM l.term_started_at) * 1000)::float8 END
    FROM SCHEMA.claim(ARRAY[p_name], ARRAY[p_holder], ARRAY[NULL::text], ARRAY[p_next], ARRAY[p_ttl_ms], ARRAY[true], ARRAY[p_handoff]) AS c
    LEFT JOIN SCHEMA.leases AS l ON l.name = c.name;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.claim_session(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms double precision[], p_contend boolean[], p_handoff text[], p_session integer[])
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision, nonce text, session boolean)
 LANGUAGE plpgsql
AS $function$
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
  PERFORM 1 FROM SCHEMA.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
  IF EXISTS (SELECT 1 FROM SCHEMA.leases AS l
              WHERE l.name = ANY (p_names) AND l.holder IS NOT NULL AND l.session_pid IS NOT NULL
                AND l.session_server = pg_postmaster_start_time()
                AND l.expires_at > now() AND NOT SCHEMA.session_alive(l.name, l.session_pid)) THEN
    -- In name order, as claim_write locks, so that two batches never deadlock.
    PERFORM 1 FROM SCHEMA.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
    WITH ended AS (
      UPDATE SCHEMA.leases AS l
         SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'revoked', session_pid = NULL, session_server = NULL
        FROM SCHEMA.leases AS old
       WHERE old.name = l.name AND l.name = ANY (p_names) AND l.holder IS NOT NULL
         AND l.session_pid IS NOT NULL AND l.session_server = pg_postmaster_start_time()
         AND l.expires_at > now() AND NOT SCHEMA.session_alive(l.name, l.session_pid)
      RETURNING l.name, l.token, old.holder AS previous_holder, old.session_pid AS pid)
    INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
    SELECT e.name, 'revoked', NULL, e.previous_holder, e.token, now(),
           'the holder''s session ended (liveness: session): its connection to PostgreSQL closed (backend ' || e.pid || ')'
      FROM ended AS e;
  END IF;
  -- Per request, only a contender with a session, for a lease no live term holds (a live one
  -- answers 'busy' anyway, and a term a release handed to this contender must still be answered
  -- as its own): who holds the session lock decides.
  FOR j IN 1 .. cardinality(p_names) LOOP
    CONTINUE WHEN p_session[j] IS NULL OR NOT p_contend[j];
    CONTINUE WHEN EXISTS (SELECT 1 FROM SCHEMA.leases AS l WHERE l.name = p_names[j] AND l.holder IS NOT NULL AND l.expires_at > now());
    v_lock := SCHEMA.session_lock_holder(p_names[j]);
    IF v_lock IS NULL THEN
      -- Free: the claimant's session takes it and claims again, rather than hold a term tied to nothing.
      v_free[j] := true;
    ELSIF v_lock <> p_session[j]
          AND v_lock IS DISTINCT FROM (SELECT l.session_pid FROM SCHEMA.leases AS l WHERE l.name = p_names[j]) THEN
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
      SELECT * FROM SCHEMA.claim(
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
      reason := CASE WHEN r.free THEN 'session-lock-free' END;
      token := (SELECT l.token FROM SCHEMA.leases AS l WHERE l.name = r.req_name);
      expires_at_ms := CASE WHEN r.free THEN v_now_ms ELSE r.until END; now_ms := v_now_ms;
      RETURN NEXT;
      CONTINUE;
    END IF;
    v_pid := NULL;
    IF r.c_outcome IN ('acquired', 'renewed') AND r.pid IS NOT NULL THEN
      UPDATE SCHEMA.leases AS l SET session_pid = r.pid, session_server = pg_postmaster_start_time()
       WHERE l.name = r.c_name AND l.token = r.c_token AND l.holder = r.c_holder
         AND l.session_pid IS DISTINCT FROM r.pid AND SCHEMA.session_alive(r.c_name, r.pid);
      SELECT l.session_pid INTO v_pid FROM SCHEMA.leases AS l WHERE l.name = r.c_name AND l.token = r.c_token;
    END IF;
    name := r.c_name; outcome := r.c_outcome; reason := r.c_reason; token := r.c_token; holder := r.c_holder;
    expires_at_ms := r.c_expires_at_ms; now_ms := r.c_now_ms; nonce := r.c_nonce;
    session := v_pid IS NOT DISTINCT FROM r.pid AND r.pid IS NOT NULL;
    RETURN NEXT;
  END LOOP;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.claim_write(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms double precision[], p_contend boolean[], p_handoff text[], p_handed text[], p_rest text[])
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision, nonce text)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_custom_plan'
AS $function$
#variable_conflict use_column
DECLARE
  v_now timestamptz;
  v_floor bigint;
BEGIN
  -- p_handed (the names claim() read as handed, before any lock) only spares those rows the
  -- INSERT (they exist); what each row's outcome is is decided below, from the row as locked.
  v_floor := SCHEMA.timeline_token_floor();
  IF cardinality(p_rest) > 0 THEN
    INSERT INTO SCHEMA.leases AS l (name) SELECT DISTINCT u FROM unnest(p_rest) AS u
      ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
  END IF;
  -- Every row of the batch, the handed ones too (their acceptance writes): in name order.
  PERFORM 1 FROM SCHEMA.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
  -- Decided on the clock after the lock (now() is the transaction's start, before the wait):
  -- an offer that lapsed while this claim waited is not accepted, and an expiry that passed
  -- meanwhile counts.
  v_now := clock_timestamp();
  RETURN QUERY
  WITH req AS (
    SELECT r.name, r.holder, string_to_array(r.expect, ',') AS expect, r.nxt, r.ttl_ms, r.contend,
           string_to_array(r.handoff, ',') AS handoff, r.handoff IS NOT NULL AS waits, r.ord
      FROM unnest(p_names, p_holders, p_expect, p_next, p_ttl_ms, p_contend, p_handoff)
      WITH ORDINALITY AS r(name, holder, expect, nxt, ttl_ms, contend, handoff, ord)
  ), cur AS (
    SELECT r.*, l.holder AS cur_holder, l.nonce AS cur_nonce, l.token AS cur_token,
           l.expires_at AS cur_expires, l.ended_by AS cur_ended_by,
           CASE
             -- From the row as locked alone, never from claim()'s read before the lock: a release
             -- that committed while this claim waited for the row has handed it the term (read
             -- before, the row was the old holder's, and the waiter was answered 'busy' under its
             -- own id); an offer an operator or a clone ended meanwhile, or whose window ran out,
             -- is decided as any contender's claim (an offer that lapsed leaves the lease free).
             WHEN r.contend AND l.holder = r.holder AND l.nonce = ANY (r.handoff) AND l.expires_at > v_now
               THEN 'handed'
             WHEN NOT r.contend THEN
               CASE WHEN l.holder = r.holder AND l.nonce = ANY (r.expect) AND l.expires_at > v_now
                    THEN 'renewed' ELSE 'lost' END
             WHEN l.holder IS NULL OR l.expires_at <= v_now THEN 'acquired'
             ELSE 'busy'
           END AS outcome
      FROM req r JOIN SCHEMA.leases l ON l.name = r.name
  ), upd AS (
    UPDATE SCHEMA.leases AS l
       SET holder = c.holder,
           -- An accepted handed term too: the acceptance swaps the registered nonce for this
           -- claim's next one, so that of two clones presenting it only one accepts.
           nonce = c.nxt,
           token = CASE WHEN c.outcome = 'acquired' THEN GREATEST(l.token + 1, v_floor + 1) ELSE l.token END,
           expires_at = v_now + c.ttl_ms * interval '1 millisecond',
           term_started_at = CASE WHEN c.outcome = 'acquired' THEN v_now ELSE l.term_started_at END,
           renewed_at = v_now,
           ended_by = NULL,
           -- A waiter that took the lease itself is waiting no more.
           waiter = CASE WHEN l.waiter = c.holder THEN NULL ELSE l.waiter END,
           waiter_nonce = CASE WHEN l.waiter = c.holder THEN NULL ELSE l.waiter_nonce END,
           waiter_ttl_ms = CASE WHEN l.waiter = c.holder THEN NULL ELSE l.waiter_ttl_ms END,
           waiter_until = CASE WHEN l.waiter = c.holder THEN NULL ELSE l.waiter_until END
      FROM cur c
     WHERE l.name = c.name AND c.outcome IN ('acquired', 'renewed', 'handed')
    RETURNING l.name, l.token, l.expires_at
  ), reg AS (
    -- A contender that will wait registers as the waiter a release hands the term to.
    UPDATE SCHEMA.leases AS l
       SET waiter = c.holder, waiter_nonce = c.nxt, waiter_ttl_ms = c.ttl_ms,
           waiter_until = v_now + 2 * c.ttl_ms * interval '1 millisecond'
      FROM cur c
     WHERE l.name = c.name AND c.outcome = 'busy' AND c.waits AND c.cur_holder <> c.holder
  ), conflict AS (
    UPDATE SCHEMA.leases AS l
       SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'conflict'
      FROM cur c
     WHERE l.name = c.name AND c.outcome = 'lost' AND c.cur_holder = c.holder
       AND NOT (c.cur_nonce = ANY (c.expect)) AND c.cur_expires > v_now
    RETURNING l.name, l.token
  ), hist AS (
    INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
    SELECT c.name, CASE WHEN c.cur_holder IS NULL OR c.cur_ended_by IS NOT NULL THEN 'acquired' ELSE 'takeover' END,
           c.holder, c.cur_holder, u.token, v_now, NULL
      FROM cur c JOIN upd u ON u.name = c.name
     WHERE c.outcome = 'acquired'
    UNION ALL
    SELECT x.name, 'conflict', NULL, c.holder, x.token, v_now, 'two processes renewed one term (a restored snapshot or a clone)'
      FROM conflict x JOIN cur c ON c.name = x.name
  )
  SELECT c.name, CASE WHEN c.outcome = 'handed' THEN 'acquired' ELSE c.outcome END,
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
         (extract(epoch FROM v_now) * 1000)::float8,
         NULL::text
    FROM cur c LEFT JOIN upd u ON u.name = c.name
   ORDER BY c.ord;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.fence_advance(p_resource text, p_token bigint, p_lease text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_token bigint;
  v_lease text;
BEGIN
  SELECT f.token, f.lease INTO v_token, v_lease FROM SCHEMA.fences AS f WHERE f.resource = p_resource FOR UPDATE;
  IF FOUND AND v_token = p_token AND (p_lease IS NULL OR v_lease = p_lease) THEN
    RETURN v_token;
  END IF;
  INSERT INTO SCHEMA.fences AS f (resource, token, updated_at, lease) VALUES (p_resource, p_token, now(), p_lease)
    ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now(), lease = coalesce(f.lease, EXCLUDED.lease)
     WHERE f.token <= EXCLUDED.token AND (f.lease IS NULL OR f.lease = EXCLUDED.lease)
    RETURNING f.token INTO v_token;
  RETURN v_token;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.fence_rotate(p_name text, p_holder text, p_token bigint, p_next text, p_expect text[], p_first boolean)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
  UPDATE SCHEMA.leases AS l SET fence_token = p_token, fence_nonce = p_next
   WHERE l.name = p_name AND l.holder = p_holder AND l.token = p_token AND l.expires_at > now()
     AND CASE WHEN l.fence_token IS NULL OR l.fence_token < p_token THEN p_first
              ELSE coalesce(l.fence_nonce = ANY (p_expect), false) END;
  RETURN FOUND;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.notify_freed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM pg_notify('leasehold_freed_SCHEMA', NEW.name);
  RETURN NEW;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.release(p_name text, p_holder text, p_expect text[])
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_now timestamptz;
  v_row record;
  v_token bigint;
BEGIN
  SELECT l.token,
         coalesce(l.holder = p_holder AND l.nonce = ANY (p_expect), false) AS ours,
         l.waiter, l.waiter_nonce, l.waiter_ttl_ms, l.waiter_until
    INTO v_row
    FROM SCHEMA.leases AS l
   WHERE l.name = p_name
     AND ((l.holder = p_holder AND l.nonce = ANY (p_expect)) OR (l.waiter = p_holder AND l.waiter_nonce = ANY (p_expect)))
     FOR UPDATE;
  IF NOT FOUND THEN
    -- This transaction only (is_local): nothing was handed over (migrations 6 and 7).
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN false;
  END IF;
  -- The clock after the row's lock: now() is the transaction's start, before the wait for it,
  -- and an offer's window started there could end before this release commits.
  v_now := clock_timestamp();
  IF NOT v_row.ours THEN
    -- The caller is the registered waiter, stopping: withdraw it.
    UPDATE SCHEMA.leases AS l SET waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
     WHERE l.name = p_name;
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN false;
  END IF;
  IF v_row.waiter IS NOT NULL AND v_row.waiter <> p_holder AND v_row.waiter_until > v_now THEN
    UPDATE SCHEMA.leases AS l
       SET holder = v_row.waiter, nonce = v_row.waiter_nonce,
           token = GREATEST(l.token + 1, SCHEMA.timeline_token_floor() + 1),
           -- An offer until the waiter accepts it (its claim): the acceptance window (migration 17).
           expires_at = v_now + least(v_row.waiter_ttl_ms, greatest(v_row.waiter_ttl_ms / 3, 500)) * interval '1 millisecond',
           term_started_at = v_now, renewed_at = v_now, ended_by = NULL,
           waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
     WHERE l.name = p_name
    RETURNING l.token INTO v_token;
    INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
    VALUES (p_name, 'released', NULL, p_holder, v_row.token, v_now, NULL),
           (p_name, 'acquired', v_row.waiter, NULL, v_token, v_now, 'handed over by the release');
    -- The row keeps a holder, so the leases_freed trigger does not fire: notify here.
    PERFORM pg_notify('leasehold_freed_SCHEMA', p_name);
    RETURN true;
  END IF;
  UPDATE SCHEMA.leases AS l
     SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'released',
         waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
   WHERE l.name = p_name;
  INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
  VALUES (p_name, 'released', NULL, p_holder, v_row.token, v_now, NULL);
  PERFORM set_config('synchronous_commit', 'off', true);
  RETURN true;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.release_many(p_names text[], p_holders text[], p_expects text[])
 RETURNS TABLE(ord bigint, released boolean)
 LANGUAGE plpgsql
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
  v_row record;
  v_handed boolean := false;
BEGIN
  IF cardinality(p_names) < 10 OR EXISTS (SELECT 1 FROM unnest(p_names) AS n GROUP BY n HAVING count(*) > 1) THEN
    RETURN QUERY SELECT m.ord, m.released FROM SCHEMA.release_many_rows(p_names, p_holders, p_expects) AS m;
    RETURN;
  END IF;
  FOR v_row IN
    WITH r AS MATERIALIZED (
      SELECT r.name, r.holder, string_to_array(r.expect, ',') AS expect, r.ord
        FROM unnest(p_names, p_holders, p_expects) WITH ORDINALITY AS r(name, holder, expect, ord)
       ORDER BY r.name
    ), locked AS MATERIALIZED (
      -- The clock is read per row once its lock is held (the join emits the row only after the
      -- lateral locked it): now() is the transaction's start, before any wait for a row lock, and
      -- an offer's window started there could end before the release commits.
      SELECT r.ord, r.name, r.holder AS req_holder, c.token, c.ours,
             c.waiter, c.waiter_nonce, c.waiter_ttl_ms, c.waiter_until, clock_timestamp() AS at
        FROM r, LATERAL (
          SELECT l.token, coalesce(l.holder = r.holder AND l.nonce = ANY (r.expect), false) AS ours,
                 l.waiter, l.waiter_nonce, l.waiter_ttl_ms, l.waiter_until
            FROM SCHEMA.leases AS l
           WHERE l.name = r.name
             AND ((l.holder = r.holder AND l.nonce = ANY (r.expect)) OR (l.waiter = r.holder AND l.waiter_nonce = ANY (r.expect)))
             FOR UPDATE
        ) AS c
    ), cur AS MATERIALIZED (
      SELECT k.*, k.ours AND k.waiter IS NOT NULL AND k.waiter <> k.req_holder AND k.waiter_until > k.at AS hand
        FROM locked AS k
    ), floor AS MATERIALIZED (
      -- Once per batch, and only when some row is handed over (an uncorrelated subquery runs once).
      SELECT SCHEMA.timeline_token_floor() AS f WHERE EXISTS (SELECT 1 FROM cur WHERE cur.hand)
    ), upd AS (
      UPDATE SCHEMA.leases AS l
         SET holder = CASE WHEN c.hand THEN c.waiter WHEN c.ours THEN NULL ELSE l.holder END,
             nonce = CASE WHEN c.hand THEN c.waiter_nonce WHEN c.ours THEN NULL ELSE l.nonce END,
             token = CASE WHEN c.hand THEN GREATEST(l.token + 1, (SELECT f FROM floor) + 1) ELSE l.token END,
             -- An offer until the waiter accepts it (its claim): the acceptance window (migration 17).
             expires_at = CASE WHEN c.hand THEN c.at + least(c.waiter_ttl_ms, greatest(c.waiter_ttl_ms / 3, 500)) * interval '1 millisecond'
                               WHEN c.ours THEN c.at ELSE l.expires_at END,
             term_started_at = CASE WHEN c.hand THEN c.at ELSE l.term_started_at END,
             renewed_at = CASE WHEN c.hand THEN c.at ELSE l.renewed_at END,
             ended_by = CASE WHEN c.hand THEN NULL WHEN c.ours THEN 'released' ELSE l.ended_by END,
             waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
        FROM cur AS c
       WHERE l.name = c.name
      RETURNING l.name, l.token
    ), hist AS (
      INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
      SELECT h.name, h.event, h.holder, h.previous_holder, h.token, h.at, h.detail
        FROM (
          SELECT c.name, 0 AS step, 'released' AS event, NULL::text AS holder, c.req_holder AS previous_holder, c.token, c.at, NULL::text AS detail
            FROM cur AS c WHERE c.ours
          UNION ALL
          SELECT c.name, 1, 'acquired', c.waiter, NULL, u.token, c.at, 'handed over by the release'
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
      PERFORM pg_notify('leasehold_freed_SCHEMA', v_row.name);
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
$function$

CREATE OR REPLACE FUNCTION SCHEMA.release_many_rows(p_names text[], p_holders text[], p_expects text[])
 RETURNS TABLE(ord bigint, released boolean)
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_now timestamptz;
  v_req record;
  v_row record;
  v_expect text[];
  v_token bigint;
  v_hand boolean;
  v_handed boolean := false;
BEGIN
  FOR v_req IN
    SELECT r.name, r.holder, r.expect, r.ord
      FROM unnest(p_names, p_holders, p_expects) WITH ORDINALITY AS r(name, holder, expect, ord)
     ORDER BY r.name, r.ord
  LOOP
    ord := v_req.ord;
    released := false;
    v_expect := string_to_array(v_req.expect, ',');
    SELECT l.token,
           coalesce(l.holder = v_req.holder AND l.nonce = ANY (v_expect), false) AS ours,
           l.waiter, l.waiter_nonce, l.waiter_ttl_ms, l.waiter_until
      INTO v_row
      FROM SCHEMA.leases AS l
     WHERE l.name = v_req.name
       AND ((l.holder = v_req.holder AND l.nonce = ANY (v_expect)) OR (l.waiter = v_req.holder AND l.waiter_nonce = ANY (v_expect)))
       FOR UPDATE;
    IF NOT FOUND THEN
      RETURN NEXT;
      CONTINUE;
    END IF;
    -- The clock after the row's lock: now() is the transaction's start, before the wait for it,
    -- and an offer's window started there could end before this release commits.
    v_now := clock_timestamp();
    v_hand := coalesce(v_row.waiter IS NOT NULL AND v_row.waiter <> v_req.holder AND v_row.waiter_until > v_now, false);
    IF NOT v_row.ours THEN
      -- The caller is the registered waiter, stopping: withdraw it.
      UPDATE SCHEMA.leases AS l SET waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
       WHERE l.name = v_req.name;
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF v_hand THEN
      UPDATE SCHEMA.leases AS l
         SET holder = v_row.waiter, nonce = v_row.waiter_nonce,
             token = GREATEST(l.token + 1, SCHEMA.timeline_token_floor() + 1),
             -- An offer until the waiter accepts it (its claim): the acceptance window (migration 17).
             expires_at = v_now + least(v_row.waiter_ttl_ms, greatest(v_row.waiter_ttl_ms / 3, 500)) * interval '1 millisecond',
             term_started_at = v_now, renewed_at = v_now, ended_by = NULL,
             waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
       WHERE l.name = v_req.name
      RETURNING l.token INTO v_token;
      INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
      VALUES (v_req.name, 'released', NULL, v_req.holder, v_row.token, v_now, NULL),
             (v_req.name, 'acquired', v_row.waiter, NULL, v_token, v_now, 'handed over by the release');
      -- The row keeps a holder, so the leases_freed trigger does not fire: notify here.
      PERFORM pg_notify('leasehold_freed_SCHEMA', v_req.name);
      v_handed := true;
    ELSE
      UPDATE SCHEMA.leases AS l
         SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'released',
             waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
       WHERE l.name = v_req.name;
      INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
      VALUES (v_req.name, 'released', NULL, v_req.holder, v_row.token, v_now, NULL);
    END IF;
    released := true;
    RETURN NEXT;
  END LOOP;
  IF NOT v_handed THEN
    -- This transaction only (is_local): see above and migration 6.
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.renew(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms double precision[])
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision)
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
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
    UPDATE SCHEMA.leases AS l
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
      JOIN SCHEMA.leases AS l ON l.name = r.name
     WHERE NOT coalesce(l.holder = r.holder AND l.nonce = r.nxt AND l.renewed_at = now(), false)
  ), conflict AS (
    UPDATE SCHEMA.leases AS l
       SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'conflict'
      FROM rest c
     WHERE l.name = c.name AND l.holder = c.req_holder AND NOT (l.nonce = ANY (c.expect)) AND l.expires_at > now()
    RETURNING l.name, l.token, c.req_holder
  ), hist AS (
    INSERT INTO SCHEMA.history (name, event, holder, previous_holder, token, at, detail)
    SELECT x.name, 'conflict', NULL, x.req_holder, x.token, now(), 'two processes renewed one term (a restored snapshot or a clone)' FROM conflict x
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
$function$

CREATE OR REPLACE FUNCTION SCHEMA.session_alive(p_name text, p_pid integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks
     WHERE locktype = 'advisory' AND granted AND pid = p_pid AND objsubid = 2
       AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
       AND classid = (hashtext('leasehold.session.SCHEMA'))::oid AND objid = (hashtext(p_name))::oid)
$function$

CREATE OR REPLACE FUNCTION SCHEMA.session_clear()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF NEW.holder IS NULL OR NEW.token IS DISTINCT FROM OLD.token THEN
    NEW.session_pid := NULL;
    NEW.session_server := NULL;
  END IF;
  RETURN NEW;
END
$function$

CREATE OR REPLACE FUNCTION SCHEMA.session_lock_holder(p_name text)
 RETURNS integer
 LANGUAGE sql
 STABLE
AS $function$
  SELECT k.pid FROM pg_catalog.pg_locks AS k
   WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
     AND k.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
     AND k.classid = (hashtext('leasehold.session.SCHEMA'))::oid AND k.objid = (hashtext(p_name))::oid
   LIMIT 1
$function$

CREATE OR REPLACE FUNCTION SCHEMA.session_try_lock(p_name text)
 RETURNS boolean
 LANGUAGE sql
AS $function$ SELECT pg_try_advisory_lock(hashtext('leasehold.session.SCHEMA'), hashtext(p_name)) $function$

CREATE OR REPLACE FUNCTION SCHEMA.session_wait_lock(p_name text)
 RETURNS boolean
 LANGUAGE sql
AS $function$ SELECT pg_advisory_lock(hashtext('leasehold.session.SCHEMA'), hashtext(p_name)) IS NOT NULL $function$

CREATE OR REPLACE FUNCTION SCHEMA.timeline_token_floor()
 RETURNS bigint
 LANGUAGE sql
AS $function$
  SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40
$function$

