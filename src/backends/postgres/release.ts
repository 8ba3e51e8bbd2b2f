/**
 * A holder's release: end the term if the row still holds our holder id and one of our nonces,
 * with a history row, in one round trip: one call of the schema's `release` function (created by
 * migration 6, ./handover.ts). A function, not a statement sent as text: PostgreSQL parses and
 * plans a statement sent unnamed on every call (about a millisecond for the statement this used to
 * be), while a PL/pgSQL function keeps its statements' plans for the session. Named prepared
 * statements would do the same from the client, but a pooler in transaction mode (PgBouncer)
 * moves a session's statements between server connections, and they break there. With a waiter registered (./handover.ts) whose
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
 * @param s the quoted schema name
 * @param channel the NOTIFY channel (schema.ts channelFor)
 */
export function releaseFunction(s: string, channel: string): string {
  return `
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

/** The release as the store sends it: one call of the function above, answered true when it ended our term. */
export function releaseStatement(s: string): string {
  return `SELECT ${s}.release($1, $2, $3::text[]) AS released`;
}
