/**
 * Migration 20 (issue 34): one contender's claim as one call on scalars, its answer complete.
 *
 * A contender's claim (expect null) was sent as
 * `SELECT c.*, <granted_at_ms> FROM claim(<seven arrays>) WITH ORDINALITY c LEFT JOIN leases l ...`:
 * the join says when a busy lease's holding term began (ClaimResult.grantedAtMs). That statement
 * is planned on every call (the driver's statements are unnamed), and for the woken waiter of a
 * handover, whose claim is on the handover's critical path, the planning and the join cost more
 * than the acceptance itself: measured on a server of its own (one client, nothing else running),
 * an acceptance's round trip took 0.47 ms sent that way, 0.31 ms as a bare
 * `SELECT * FROM claim(...)`, and 0.31 ms as the raw UPDATE.
 *
 * `claim_one(name, holder, next, ttl_ms, handoff)` is that claim for a batch of one contender
 * without a session (../claim.ts sends it then; batches, renewals and sessions are unchanged):
 *
 *  1. With handed nonces, the acceptance of an offered term exactly as migration 19's `claim`
 *     makes it: the row locked only if it holds this contender under one of those nonces, the
 *     clock read after the lock, and the UPDATE that swaps the nonce for `next` and gives the
 *     waiter's TTL, made only while the offer is unexpired by that clock. Answered like
 *     `claim`'s acceptance, granted_at_ms null (it is only said of a busy answer).
 *  2. Anything else: `claim` with the same arguments as one-element arrays, and granted_at_ms
 *     from the join the client used to send (the row as this statement's snapshot saw it, under
 *     the token the claim answered), inside the function, where its plan is kept.
 *
 * A process of this version on a schema before 20 has no `claim_one` and sends the statement of
 * the previous version (../store.ts, as `renew` is fallen back from), so it works before
 * `leasehold migrate`; earlier versions never call it.
 *
 * Frozen once merged: this is the SQL that databases at this version ran;
 * src/backends/postgres/schema.sql shows the result.
 * @param s the quoted schema name
 */
export function migration020(s: string): string {
  return `
CREATE FUNCTION ${s}.claim_one(p_name text, p_holder text, p_next text, p_ttl_ms double precision, p_handoff text)
 RETURNS TABLE(name text, outcome text, reason text, token bigint, holder text, expires_at_ms double precision, now_ms double precision, nonce text, granted_at_ms double precision)
 LANGUAGE plpgsql
AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz;
  v_token bigint;
  v_expires timestamptz;
BEGIN
  IF p_handoff IS NOT NULL THEN
    PERFORM 1 FROM ${s}.leases AS l
      WHERE l.name = p_name AND l.holder = p_holder AND l.nonce = ANY (string_to_array(p_handoff, ','))
      FOR UPDATE;
    IF FOUND THEN
      -- The clock after the lock: now() is the transaction's start, before any wait for the row,
      -- and an offer that lapsed during that wait must not be accepted.
      v_now := clock_timestamp();
      UPDATE ${s}.leases AS l
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
    FROM ${s}.claim(ARRAY[p_name], ARRAY[p_holder], ARRAY[NULL::text], ARRAY[p_next], ARRAY[p_ttl_ms], ARRAY[true], ARRAY[p_handoff]) AS c
    LEFT JOIN ${s}.leases AS l ON l.name = c.name;
END
$fn$;
`;
}
