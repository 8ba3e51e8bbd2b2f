/**
 * Migration 19 (issue 34): a clean handover of one lease without the batch plumbing.
 *
 * A handover is two statements on the critical path: the holder's `release` (which hands the
 * term to the registered waiter and notifies it) and the woken waiter's claim that accepts the
 * offer (migration 17). Both were built for batches, and one lease paid for it. Measured on a
 * server of its own (pg_stat_statements, track = all, 300 handovers): `release` was a SQL
 * function calling release_many (plpgsql, with a SET clause) calling release_many_rows, three
 * calls and two tuplestores deep: 0.63 ms of server time per release, of which the statements
 * that read and write the row were about 0.2 ms. The acceptance ran claim(), which collected the
 * handed names with array_agg over unnest, filtered the rest with another unnest, locked by
 * `= ANY`, checked again with NOT EXISTS over unnest and accepted with an UPDATE joined to
 * unnest: about 0.6 ms, of which the acceptance itself was 0.1 ms.
 *
 *  1. `release(name, holder, expect[])` is now the one-row body of release_many_rows, written
 *     for one row: the same lock (the row, only when it holds our holder and one of our nonces,
 *     or has us as its registered waiter), the same clock after the lock, the same three
 *     outcomes (withdraw a waiter, hand the term to a live waiter, end the term) with the same
 *     writes, history rows, NOTIFY and synchronous_commit rule. Its signature is unchanged, so a
 *     process of any earlier version sending `SELECT release($1, $2, $3)` gets it as well.
 *     release_many and release_many_rows (batches) are unchanged.
 *  2. `claim` (seven arguments) first tries, for a batch of one contender that presents handed
 *     nonces, the acceptance on its scalar arguments: the row locked only if it holds that
 *     contender with one of those nonces, the clock read after the lock, and the UPDATE that
 *     swaps the nonce and gives the waiter's TTL made only while the offer is unexpired by that
 *     clock. That is the condition under which migration 17's acceptance succeeds, decided the
 *     same way; the answer is the same row. Anything else (no offer, an offer that lapsed or was
 *     ended meanwhile) falls through, holding at most the row's lock, to migration 17's body,
 *     unchanged, which decides it as before.
 *
 * Safety is unchanged: the hand-over still bumps the token by the acquisition's rule under the
 * row's lock, the release still matches holder and nonce, the acceptance is still a
 * compare-and-swap of the nonce on the row as locked, and expiry is still judged by the
 * server's clock after the lock. Clients of every version call the same two signatures.
 *
 * Frozen once merged: this is the SQL that databases at this version ran;
 * src/backends/postgres/schema.sql shows the result.
 * @param s the quoted schema name
 * @param channel the NOTIFY channel (../schema.ts channelFor)
 */
export function migration019(s: string, channel: string): string {
  return `
CREATE OR REPLACE FUNCTION ${s}.release(p_name text, p_holder text, p_expect text[])
 RETURNS boolean
 LANGUAGE plpgsql
AS $fn$
DECLARE
  v_now timestamptz;
  v_row record;
  v_token bigint;
BEGIN
  SELECT l.token,
         coalesce(l.holder = p_holder AND l.nonce = ANY (p_expect), false) AS ours,
         l.waiter, l.waiter_nonce, l.waiter_ttl_ms, l.waiter_until
    INTO v_row
    FROM ${s}.leases AS l
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
    UPDATE ${s}.leases AS l SET waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
     WHERE l.name = p_name;
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN false;
  END IF;
  IF v_row.waiter IS NOT NULL AND v_row.waiter <> p_holder AND v_row.waiter_until > v_now THEN
    UPDATE ${s}.leases AS l
       SET holder = v_row.waiter, nonce = v_row.waiter_nonce,
           token = GREATEST(l.token + 1, ${s}.timeline_token_floor() + 1),
           -- An offer until the waiter accepts it (its claim): the acceptance window (migration 17).
           expires_at = v_now + least(v_row.waiter_ttl_ms, greatest(v_row.waiter_ttl_ms / 3, 500)) * interval '1 millisecond',
           term_started_at = v_now, renewed_at = v_now, ended_by = NULL,
           waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
     WHERE l.name = p_name
    RETURNING l.token INTO v_token;
    INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
    VALUES (p_name, 'released', NULL, p_holder, v_row.token, v_now, NULL),
           (p_name, 'acquired', v_row.waiter, NULL, v_token, v_now, 'handed over by the release');
    -- The row keeps a holder, so the leases_freed trigger does not fire: notify here.
    PERFORM pg_notify('${channel}', p_name);
    RETURN true;
  END IF;
  UPDATE ${s}.leases AS l
     SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'released',
         waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
   WHERE l.name = p_name;
  INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
  VALUES (p_name, 'released', NULL, p_holder, v_row.token, v_now, NULL);
  PERFORM set_config('synchronous_commit', 'off', true);
  RETURN true;
END
$fn$;

CREATE OR REPLACE FUNCTION ${s}.claim(p_names text[], p_holders text[], p_expect text[], p_next text[], p_ttl_ms double precision[], p_contend boolean[], p_handoff text[])
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision, nonce text)
 LANGUAGE plpgsql
AS $fn$
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
    PERFORM 1 FROM ${s}.leases AS l
      WHERE l.name = p_names[1] AND l.holder = p_holders[1] AND l.nonce = ANY (string_to_array(p_handoff[1], ','))
      FOR UPDATE;
    IF FOUND THEN
      v_now := clock_timestamp();
      UPDATE ${s}.leases AS l
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
`;
}
