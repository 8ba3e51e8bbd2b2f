/**
 * Migration 6: one-write handover. A clean handover used to be two write transactions in a row:
 * the holder's release, then the waiting follower's acquisition (each a WAL record and, for the
 * acquisition, a flush). Now the release does both, and the follower only reads:
 *
 *  1. A waiting follower's ordinary claim that is answered 'busy' also registers it as the
 *     lease's waiter (`waiter`, `waiter_nonce`: that claim's nextNonce, `waiter_ttl_ms`, and
 *     `waiter_until`, two of its TTLs on this database's clock). That claim already writes (it
 *     locks the row), so registering costs no round trip and no extra commit. The latest 'busy'
 *     follower replaces any earlier one: it is the one most recently seen alive. A follower
 *     re-checks at least once a TTL (core/lease.ts), so a live follower's registration never
 *     lapses; a crashed one's lapses within two TTLs.
 *  2. The holder's release (../release.ts), in its one statement: if a waiter other than the
 *     releasing holder is registered and its registration has not lapsed, the term goes to it:
 *     holder := waiter, nonce := its registered nonce, a new token by the acquisition's rule
 *     (above the last and the timeline floor; the `--min-token` floor is already in the row),
 *     expiry := now() + the waiter's TTL; history 'released' then 'acquired'; NOTIFY as for
 *     any release. Else the term is released as before.
 *  3. The waiter, woken, sends its ordinary claim with `handoff` (the nonces it registered
 *     under): a live row held by it under one of them is answered 'acquired' with that nonce,
 *     the term's token and expiry, and the store's now, from a read alone. The claim function
 *     then inserts, locks and updates nothing, so no transaction id is assigned and the commit
 *     writes and flushes no WAL.
 *
 * The waiter's local deadline is computed as for any acquisition, from when its confirming
 * claim was sent plus the term's remaining time by the store's clock (core/term.ts, granted),
 * never from the release. Costs: a registered waiter that crashed is handed the term and holds
 * it until its expiry, one TTL, as a holder that crashed would; a waiter that stops cleanly
 * withdraws first (a release of its registered nonces). Two clones of one waiting process both
 * read the handed term as theirs; their first renewals meet the nonce compare-and-swap, which
 * ends it for both, as for any cloned holder.
 *
 * The six-argument claim function stays, unchanged, for processes still running the previous
 * version while the schema is migrated under them (they neither register nor hand over; their
 * release leaves a registration in place, and it lapses).
 * The claim is two functions. `claim` (seven arguments) reads which requests confirm a handed
 * term and answers a batch made only of those itself; it has no SET clause, so PL/pgSQL keeps
 * its statements' plans for the session (index lookups by name, good for any batch size). Every
 * other batch goes to `claim_write`, the locking and writing part, which plans each call for its
 * batch (plan_cache_mode, see migration 1). A woken follower's confirming claim, on the handover's
 * critical path, then plans nothing.
 *
 * The release function, created here (it needs the columns above):
 *
 * A holder's release: end the term if the row still holds our holder id and one of our nonces,
 * with a history row, in one round trip: one call of the schema's `release` function (created by
 * this migration). A function, not a statement sent as text: PostgreSQL parses and
 * plans a statement sent unnamed on every call (about a millisecond for the statement this used to
 * be), while a PL/pgSQL function keeps its statements' plans for the session. Named prepared
 * statements would do the same from the client, but a pooler in transaction mode (PgBouncer)
 * moves a session's statements between server connections, and they break there. With a waiter registered (above) whose
 * registration has not lapsed, the same statement hands the term to it instead: a new term with
 * a larger token, the waiter's nonce and TTL, and history 'released' then 'acquired'. Either way
 * followers hear it at once: the `leases_freed` trigger notifies a release, and the statement
 * itself notifies a handover (the row still has a holder, so the trigger does not fire).
 *
 * The same call withdraws the caller's own waiter registration when `expect` holds the
 * nonce it registered under: the engine sends that when a waiting follower stops, so that no
 * release hands a term to a process that has gone.
 *
 * A plain release commits without waiting for the WAL flush (`synchronous_commit` off for this
 * transaction only, set inside the function so the release stays one round trip; the function has
 * no SET clause of its own, since that would undo the setting when the function returns). Why that is
 * safe: the holder has stood down locally before it sends the release, so a release lost in a
 * crash (or in a failover to a standby that had not received it) only leaves the row held by a
 * holder that will never renew it; followers then take the lease when that term expires, as they
 * would had the holder crashed. That costs liveness, never safety: a plain release never issues a
 * token, and a follower's acquisition, which does, commits durably (the claim function runs with
 * the server's own setting), and flushing it flushes the release that preceded it in the WAL. A
 * release that hands the term over issues a token, so it commits with the server's own setting,
 * as an acquisition does: its waiter may act on the token as soon as it can read the row.
 * Revocations stay durable: an operator who was told "revoked" must not see the holder come back.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name
 * @param channel the NOTIFY channel (../schema.ts channelFor) */
export function migration006(s: string, channel: string): string {
  return `
ALTER TABLE ${s}.leases
  ADD COLUMN waiter text,
  ADD COLUMN waiter_nonce text,
  ADD COLUMN waiter_ttl_ms float8,
  ADD COLUMN waiter_until timestamptz;

-- The claim function of migrations 1 and 5, with p_handoff: NULL for a contender that will not
-- wait (and for renewals); else the comma-joined nonces under which a release may have handed
-- this contender the term ('' for none yet). See src/backends/postgres/handover.ts.
CREATE FUNCTION ${s}.claim(
  p_names text[], p_holders text[], p_expect text[], p_next text[],
  p_ttl_ms float8[], p_contend boolean[], p_handoff text[]
) RETURNS TABLE (name text, outcome text, reason text, token bigint, holder text,
                 expires_at_ms float8, now_ms float8, nonce text)
LANGUAGE plpgsql
-- No plan_cache_mode here (see above): the plans of this part are kept for the session.
AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
  v_handed text[];
  v_rest text[];
BEGIN
  -- Terms handed to their contender: confirmed by this read alone, and kept out of the INSERT
  -- and the row locks below, so a confirmation that is the whole batch writes nothing.
  SELECT coalesce(array_agg(l.name), '{}') INTO v_handed
    FROM unnest(p_names, p_holders, p_contend, p_handoff) AS r(name, holder, contend, handoff)
    JOIN ${s}.leases AS l ON l.name = r.name
   WHERE r.contend AND l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ','))
     AND l.expires_at > v_now;
  v_rest := ARRAY(SELECT u FROM unnest(p_names) AS u WHERE u <> ALL (v_handed));
  IF cardinality(v_rest) = 0 THEN
    -- Every request confirms a handed term (a woken follower, alone in its batch): answer from
    -- a plain read, without claim_write. Read again, as claim_write does: 'busy' (no
    -- write) if an operator or a clone ended the term since the read above.
    RETURN QUERY
    SELECT l.name, CASE WHEN x.ok THEN 'acquired' ELSE 'busy' END, NULL::text, l.token, l.holder,
           (extract(epoch FROM l.expires_at) * 1000)::float8, (extract(epoch FROM v_now) * 1000)::float8,
           CASE WHEN x.ok THEN l.nonce END
      FROM unnest(p_names, p_holders, p_handoff) WITH ORDINALITY AS r(name, holder, handoff, ord)
      JOIN ${s}.leases AS l ON l.name = r.name
     CROSS JOIN LATERAL (SELECT coalesce(l.holder = r.holder AND l.nonce = ANY (string_to_array(r.handoff, ','))
                                         AND l.expires_at > v_now, false) AS ok) AS x
     ORDER BY r.ord;
    RETURN;
  END IF;
  RETURN QUERY
  SELECT * FROM ${s}.claim_write(p_names, p_holders, p_expect, p_next, p_ttl_ms, p_contend, p_handoff, v_handed, v_rest);
END
$fn$;

-- The locking and writing part of the claim above, for the requests it did not answer from its
-- read (p_handed: the requests that confirm a handed term; p_rest: the others).
CREATE FUNCTION ${s}.claim_write(
  p_names text[], p_holders text[], p_expect text[], p_next text[],
  p_ttl_ms float8[], p_contend boolean[], p_handoff text[], p_handed text[], p_rest text[]
) RETURNS TABLE (name text, outcome text, reason text, token bigint, holder text,
                 expires_at_ms float8, now_ms float8, nonce text)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
  v_floor bigint;
  v_handed text[] := p_handed;
  v_rest text[] := p_rest;
BEGIN
  IF cardinality(v_rest) > 0 THEN
    v_floor := ${s}.timeline_token_floor();
    INSERT INTO ${s}.leases AS l (name) SELECT DISTINCT u FROM unnest(v_rest) AS u
      ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
    PERFORM 1 FROM ${s}.leases AS l WHERE l.name = ANY (v_rest) ORDER BY l.name FOR UPDATE;
  END IF;
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
             -- Not locked: read again, and answered 'busy' (no write) in the rare case that an
             -- operator or a clone ended the handed term since the read above.
             WHEN r.name = ANY (v_handed) THEN
               CASE WHEN l.holder = r.holder AND l.nonce = ANY (r.handoff) AND l.expires_at > v_now
                    THEN 'handed' ELSE 'busy' END
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
           ended_by = NULL,
           -- A waiter that took the lease itself is waiting no more.
           waiter = CASE WHEN l.waiter = c.holder THEN NULL ELSE l.waiter END,
           waiter_nonce = CASE WHEN l.waiter = c.holder THEN NULL ELSE l.waiter_nonce END,
           waiter_ttl_ms = CASE WHEN l.waiter = c.holder THEN NULL ELSE l.waiter_ttl_ms END,
           waiter_until = CASE WHEN l.waiter = c.holder THEN NULL ELSE l.waiter_until END
      FROM cur c
     WHERE l.name = c.name AND c.outcome IN ('acquired', 'renewed')
    RETURNING l.name, l.token, l.expires_at
  ), reg AS (
    -- A contender that will wait registers as the waiter a release hands the term to.
    UPDATE ${s}.leases AS l
       SET waiter = c.holder, waiter_nonce = c.nxt, waiter_ttl_ms = c.ttl_ms,
           waiter_until = v_now + 2 * c.ttl_ms * interval '1 millisecond'
      FROM cur c
     WHERE l.name = c.name AND c.outcome = 'busy' AND c.waits AND c.name <> ALL (v_handed)
       AND c.cur_holder <> c.holder
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
         CASE WHEN c.outcome = 'handed' THEN c.cur_nonce END
    FROM cur c LEFT JOIN upd u ON u.name = c.name
   ORDER BY c.ord;
END
$fn$;

CREATE FUNCTION ${s}.release(p_name text, p_holder text, p_expect text[]) RETURNS boolean
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_now timestamptz := now();
  v_row record;
  v_token bigint;
BEGIN
  SELECT l.token,
         coalesce(l.holder = p_holder AND l.nonce = ANY (p_expect), false) AS ours,
         coalesce(l.waiter IS NOT NULL AND l.waiter <> p_holder AND l.waiter_until > v_now, false) AS hand,
         l.waiter, l.waiter_nonce, l.waiter_ttl_ms
    INTO v_row
    FROM ${s}.leases AS l
   WHERE l.name = p_name
     AND ((l.holder = p_holder AND l.nonce = ANY (p_expect)) OR (l.waiter = p_holder AND l.waiter_nonce = ANY (p_expect)))
     FOR UPDATE;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF NOT v_row.ours THEN
    -- The caller is the registered waiter, stopping: withdraw it.
    UPDATE ${s}.leases AS l SET waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
     WHERE l.name = p_name;
    RETURN false;
  END IF;
  IF v_row.hand THEN
    UPDATE ${s}.leases AS l
       SET holder = v_row.waiter, nonce = v_row.waiter_nonce,
           token = GREATEST(l.token + 1, ${s}.timeline_token_floor() + 1),
           expires_at = v_now + v_row.waiter_ttl_ms * interval '1 millisecond',
           term_started_at = v_now, renewed_at = v_now, ended_by = NULL,
           waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
     WHERE l.name = p_name
    RETURNING l.token INTO v_token;
    INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
    VALUES (p_name, 'released', NULL, p_holder, v_row.token, v_now, NULL),
           (p_name, 'acquired', v_row.waiter, NULL, v_token, v_now, 'handed over by the release');
    -- The row keeps a holder, so the leases_freed trigger does not fire: notify here.
    PERFORM pg_notify('${channel}', p_name);
  ELSE
    UPDATE ${s}.leases AS l
       SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'released',
           waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
     WHERE l.name = p_name;
    INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
    VALUES (p_name, 'released', NULL, p_holder, v_row.token, v_now, NULL);
    -- This transaction only (is_local): see above.
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  RETURN true;
END
$fn$;
`;
}
