/**
 * Migration 7: releases in batches. `release_many(names, holders, expects)` releases (or hands
 * over, or withdraws the waiter registration of) each row exactly as migration 6's `release`
 * does one, in one statement: a process closing with N leases sends N / maxClaimBatch calls
 * instead of N (it sent one statement per lease, 10,000 for 10,000 leases, while it acquired
 * them in batched claims). `expects` holds each row's nonces joined by commas, as the renewal
 * statement takes them (a nonce is hex, never a comma).
 *
 * Rows are locked in name order, the order the claim function locks in (migration 6), so a
 * batch release and a batch claim from another process cannot deadlock.
 *
 * Durability, as in migration 6: a plain release may commit without waiting for the WAL flush,
 * a handover may not (it issues a token). A batch commits once, so it skips the flush only when
 * no row in it was handed over.
 *
 * `release` becomes a call of `release_many` with one row, so the two cannot drift apart. Its
 * signature is unchanged: a process still on the previous version keeps calling it.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name
 * @param channel the NOTIFY channel (../schema.ts channelFor) */
export function migration007(s: string, channel: string): string {
  return `
CREATE FUNCTION ${s}.release_many(p_names text[], p_holders text[], p_expects text[])
RETURNS TABLE (ord bigint, released boolean)
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_now timestamptz := now();
  v_req record;
  v_row record;
  v_expect text[];
  v_token bigint;
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
           coalesce(l.waiter IS NOT NULL AND l.waiter <> v_req.holder AND l.waiter_until > v_now, false) AS hand,
           l.waiter, l.waiter_nonce, l.waiter_ttl_ms
      INTO v_row
      FROM ${s}.leases AS l
     WHERE l.name = v_req.name
       AND ((l.holder = v_req.holder AND l.nonce = ANY (v_expect)) OR (l.waiter = v_req.holder AND l.waiter_nonce = ANY (v_expect)))
       FOR UPDATE;
    IF NOT FOUND THEN
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF NOT v_row.ours THEN
      -- The caller is the registered waiter, stopping: withdraw it.
      UPDATE ${s}.leases AS l SET waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
       WHERE l.name = v_req.name;
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF v_row.hand THEN
      UPDATE ${s}.leases AS l
         SET holder = v_row.waiter, nonce = v_row.waiter_nonce,
             token = GREATEST(l.token + 1, ${s}.timeline_token_floor() + 1),
             expires_at = v_now + v_row.waiter_ttl_ms * interval '1 millisecond',
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

CREATE OR REPLACE FUNCTION ${s}.release(p_name text, p_holder text, p_expect text[]) RETURNS boolean
LANGUAGE sql
AS $fn$
  SELECT coalesce((SELECT m.released FROM ${s}.release_many(ARRAY[p_name], ARRAY[p_holder], ARRAY[array_to_string(p_expect, ',')]) AS m), false);
$fn$;
`;
}
