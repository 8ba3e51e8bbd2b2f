/**
 * Migration 17: a handed term is an offer until its waiter accepts it.
 *
 * Migration 6's release handed the next term to the registered waiter as a full term of the
 * waiter's TTL, and the waiter confirmed it with a read. A waiter registration outlives its
 * process by up to two TTLs (it lapses at `waiter_until`), and per-slot cron keeps one between
 * slot tries on purpose (AcquireOptions.stayRegistered, core/kept-registration.ts). A replica
 * SIGKILLed between slots was still the registered waiter, the next release handed it a full
 * term, nobody ran it, and every other contender was kept out for one TTL (CI of 2026-12-06:
 * 'released 8' and 'acquired 9' at one instant, 'takeover 10' 3.1 s later at TTL 3 s, two
 * one-second slots missed). Now:
 *
 *  1. The release (release_many, release_many_rows; `release` calls them) hands the term as
 *     before (a new token by the acquisition's rule, the waiter's nonce, history 'released' then
 *     'acquired', NOTIFY), but it expires at the end of the acceptance window: a third of the
 *     waiter's TTL, at least 500 ms, at most the TTL, from the clock the release reads once it
 *     holds the row's lock (clock_timestamp(): now() is the transaction's start, before any wait
 *     for the lock, and a window started there could end before the release commits). A third
 *     is the default renew interval: a live waiter that is waiting hears the release at once
 *     (NOTIFY) and answers in one round trip, as a holder renews well within that. The floor is for short TTLs (a 300 ms TTL would
 *     leave 100 ms): the waiter's answer also waits for its event loop, which the engine lets
 *     run up to 250 ms late before it calls the process paused (TermMachine.deadlineVerdict),
 *     and for a round trip on a loaded store; 500 ms covers both. Missing the window costs only
 *     liveness (the offer lapses and the lease is free again), and the floor only what a dead
 *     waiter costs a short-TTL lease (the window, never more than the TTL it cost before).
 *  2. The waiter's claim that presents the nonce (`handoff`) accepts the term: an UPDATE that
 *     gives the term the waiter's own TTL and swaps the registered nonce for the claim's next
 *     one, made only while the row still holds the handed term unexpired. Both are decided under
 *     the row's lock, taken in name order as every claim takes them, and on the clock read after
 *     it (clock_timestamp(): now() is the transaction's start, before any wait for the lock, so
 *     an offer that lapsed during the wait would still have been accepted). The swap makes the
 *     acceptance a compare-and-swap: two clones (one holder id, the same registered nonces) could
 *     both confirm the old handed term; now the first accepts, and the other's claim finds a
 *     nonce it never registered. An offer that ended while the claim waited is decided as any
 *     contender's claim (claim_write, which now also decides on the clock after its lock, and
 *     from the row as locked alone: an offer a release committed while the claim waited for the
 *     row is accepted, not answered 'busy' under the waiter's own holder id).
 *     The answer is the acceptance: the engine begins a term only from it, so the waiter never
 *     acts on a term before its acceptance round trip answered, and its deadline is computed
 *     from its own TTL as for any acquisition.
 *  3. An offer nobody accepts (its process died, or it gave up and its withdrawal is late) lapses
 *     at the end of the window like any expired term: the next contender takes the lease over
 *     with a larger token. A dead registered waiter now costs the lease the window (a third of
 *     that waiter's TTL, from a TTL of 1.5 s up), where it cost a whole TTL.
 *
 * Safety is the lease rule's, unchanged: the offered term is the waiter's until it expires (a
 * waiter that accepted in time holds it to its own deadline; nobody else is granted the lease
 * before the row's expiry), and tokens still only grow. The cost is the one migration 6 saved:
 * the waiter's confirming claim writes (a transaction id, a WAL flush) instead of only reading.
 * The handover still takes one release and one claim round trip, and the release still picks
 * the next holder in one write.
 *
 * Processes of the previous version on this schema: unlike MySQL's (whose client sends the
 * claim as text, ../../mysql/sql/010-handover-acceptance.ts), a PostgreSQL client's claim is a
 * call of `claim` with the same seven arguments in both versions (../claim.ts did not change),
 * and `claim_write` keeps its nine. So an old process's registration, and its confirming claim,
 * run the functions defined here: it is registered, offered and accepts exactly as this
 * version does, and gets its whole TTL from the acceptance; no process ever reads an offer's
 * short expiry as its term. (The engine also renews a term granted for less than its TTL in
 * time now, TermMachine.granted.) A process of this version on a schema before 17 gets the old
 * behaviour (full-TTL handed terms) until `leasehold migrate` runs.
 *
 * Frozen once a database has run it (none had when this text was last changed): this is the SQL
 * that databases at this version run; src/backends/postgres/schema.sql shows the result.
 * @param s the quoted schema name
 * @param channel the NOTIFY channel (../schema.ts channelFor)
 */
export function migration017(s: string, channel: string): string {
  return `
CREATE OR REPLACE FUNCTION ${s}.claim(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms double precision[], p_contend boolean[], p_handoff text[])
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision, nonce text)
 LANGUAGE plpgsql
AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
  v_handed text[];
  v_rest text[];
BEGIN
  -- Terms handed to their contender (offered by a release, migration 17): kept out of the
  -- INSERT below, so a batch made only of acceptances inserts nothing.
  SELECT coalesce(array_agg(l.name), '{}') INTO v_handed
    FROM unnest(p_names, p_holders, p_contend, p_handoff) AS r(name, holder, contend, handoff)
    JOIN ${s}.leases AS l ON l.name = r.name
   WHERE r.contend AND l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ','))
     AND l.expires_at > v_now;
  v_rest := ARRAY(SELECT u FROM unnest(p_names) AS u WHERE u <> ALL (v_handed));
  IF cardinality(v_rest) = 0 THEN
    -- Every request accepts a handed term (a woken follower, alone in its batch). The rows
    -- first, in name order as every claim locks them (two batches never wait on each other),
    -- and then the clock: now() is the transaction's start, before any wait for a row lock, and
    -- an offer that lapsed during that wait must not be accepted.
    PERFORM 1 FROM ${s}.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT EXISTS (
      SELECT 1 FROM unnest(p_names, p_holders, p_handoff) AS r(name, holder, handoff)
        LEFT JOIN ${s}.leases AS l ON l.name = r.name
       WHERE NOT coalesce(l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ',')) AND l.expires_at > v_now, false)
    ) THEN
      -- Still offered, under the lock: the acceptance is this UPDATE, which gives the term the
      -- waiter's own TTL from now and swaps the registered nonce for the claim's next one (a
      -- compare-and-swap: of two clones presenting the same registered nonce, one accepts, and
      -- the other's claim finds a nonce it never registered).
      RETURN QUERY
      WITH acc AS (
        UPDATE ${s}.leases AS l
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
        JOIN ${s}.leases AS l ON l.name = r.name
        LEFT JOIN acc AS a ON a.name = r.name
       ORDER BY r.ord;
      RETURN;
    END IF;
    -- An offer ended while this claim waited for its row (it lapsed, or an operator or a clone
    -- ended it): the whole claim, which decides every row again under its lock.
    SELECT coalesce(array_agg(l.name), '{}') INTO v_handed
      FROM unnest(p_names, p_holders, p_contend, p_handoff) AS r(name, holder, contend, handoff)
      JOIN ${s}.leases AS l ON l.name = r.name
     WHERE r.contend AND l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ','))
       AND l.expires_at > v_now;
    v_rest := ARRAY(SELECT u FROM unnest(p_names) AS u WHERE u <> ALL (v_handed));
  END IF;
  RETURN QUERY
  SELECT * FROM ${s}.claim_write(p_names, p_holders, p_expect, p_next, p_ttl_ms, p_contend, p_handoff, v_handed, v_rest);
END
$fn$;

CREATE OR REPLACE FUNCTION ${s}.claim_write(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms double precision[], p_contend boolean[], p_handoff text[], p_handed text[], p_rest text[])
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision, nonce text)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_custom_plan'
AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz;
  v_floor bigint;
BEGIN
  -- p_handed (the names claim() read as handed, before any lock) only spares those rows the
  -- INSERT (they exist); what each row's outcome is is decided below, from the row as locked.
  v_floor := ${s}.timeline_token_floor();
  IF cardinality(p_rest) > 0 THEN
    INSERT INTO ${s}.leases AS l (name) SELECT DISTINCT u FROM unnest(p_rest) AS u
      ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
  END IF;
  -- Every row of the batch, the handed ones too (their acceptance writes): in name order.
  PERFORM 1 FROM ${s}.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
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
      FROM req r JOIN ${s}.leases l ON l.name = r.name
  ), upd AS (
    UPDATE ${s}.leases AS l
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
    UPDATE ${s}.leases AS l
       SET waiter = c.holder, waiter_nonce = c.nxt, waiter_ttl_ms = c.ttl_ms,
           waiter_until = v_now + 2 * c.ttl_ms * interval '1 millisecond'
      FROM cur c
     WHERE l.name = c.name AND c.outcome = 'busy' AND c.waits AND c.cur_holder <> c.holder
  ), conflict AS (
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
$fn$;

CREATE OR REPLACE FUNCTION ${s}.release_many(p_names text[], p_holders text[], p_expects text[])
 RETURNS TABLE(ord bigint, released boolean)
 LANGUAGE plpgsql
 SET jit TO 'off'
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
    ), locked AS MATERIALIZED (
      -- The clock is read per row once its lock is held (the join emits the row only after the
      -- lateral locked it): now() is the transaction's start, before any wait for a row lock, and
      -- an offer's window started there could end before the release commits.
      SELECT r.ord, r.name, r.holder AS req_holder, c.token, c.ours,
             c.waiter, c.waiter_nonce, c.waiter_ttl_ms, c.waiter_until, clock_timestamp() AS at
        FROM r, LATERAL (
          SELECT l.token, coalesce(l.holder = r.holder AND l.nonce = ANY (r.expect), false) AS ours,
                 l.waiter, l.waiter_nonce, l.waiter_ttl_ms, l.waiter_until
            FROM ${s}.leases AS l
           WHERE l.name = r.name
             AND ((l.holder = r.holder AND l.nonce = ANY (r.expect)) OR (l.waiter = r.holder AND l.waiter_nonce = ANY (r.expect)))
             FOR UPDATE
        ) AS c
    ), cur AS MATERIALIZED (
      SELECT k.*, k.ours AND k.waiter IS NOT NULL AND k.waiter <> k.req_holder AND k.waiter_until > k.at AS hand
        FROM locked AS k
    ), floor AS MATERIALIZED (
      -- Once per batch, and only when some row is handed over (an uncorrelated subquery runs once).
      SELECT ${s}.timeline_token_floor() AS f WHERE EXISTS (SELECT 1 FROM cur WHERE cur.hand)
    ), upd AS (
      UPDATE ${s}.leases AS l
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
      INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
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

CREATE OR REPLACE FUNCTION ${s}.release_many_rows(p_names text[], p_holders text[], p_expects text[])
 RETURNS TABLE(ord bigint, released boolean)
 LANGUAGE plpgsql
AS $fn$
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
      FROM ${s}.leases AS l
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
      UPDATE ${s}.leases AS l SET waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
       WHERE l.name = v_req.name;
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF v_hand THEN
      UPDATE ${s}.leases AS l
         SET holder = v_row.waiter, nonce = v_row.waiter_nonce,
             token = GREATEST(l.token + 1, ${s}.timeline_token_floor() + 1),
             -- An offer until the waiter accepts it (its claim): the acceptance window (migration 17).
             expires_at = v_now + least(v_row.waiter_ttl_ms, greatest(v_row.waiter_ttl_ms / 3, 500)) * interval '1 millisecond',
             term_started_at = v_now, renewed_at = v_now, ended_by = NULL,
             waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
       WHERE l.name = v_req.name
      RETURNING l.token INTO v_token;
      INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
      VALUES (v_req.name, 'released', NULL, v_req.holder, v_row.token, v_now, NULL),
             (v_req.name, 'acquired', v_row.waiter, NULL, v_token, v_now, 'handed over by the release');
      -- The row keeps a holder, so the leases_freed trigger does not fire: notify here.
      PERFORM pg_notify('${channel}', v_req.name);
      v_handed := true;
    ELSE
      UPDATE ${s}.leases AS l
         SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'released',
             waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
       WHERE l.name = v_req.name;
      INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
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
$fn$;
`;
}
