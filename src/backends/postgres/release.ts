/**
 * A holder's release: end the term if the row still holds our holder id and one of our nonces,
 * with a history row, in one statement. With a waiter registered (./handover.ts) whose
 * registration has not lapsed, the same statement hands the term to it instead: a new term with
 * a larger token, the waiter's nonce and TTL, and history 'released' then 'acquired'. Either way
 * followers hear it at once: the `leases_freed` trigger notifies a release, and the statement
 * itself notifies a handover (the row still has a holder, so the trigger does not fire).
 *
 * The same statement withdraws the caller's own waiter registration when `expect` holds the
 * nonce it registered under: the engine sends that when a waiting follower stops, so that no
 * release hands a term to a process that has gone.
 *
 * A plain release commits without waiting for the WAL flush (`synchronous_commit` off for this
 * transaction only, set inside the statement so the release stays one round trip). Why that is
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
export function releaseStatement(s: string, channel: string): string {
  return `WITH cur AS MATERIALIZED (
    SELECT l.name, l.token, l.holder = $2 AND l.nonce = ANY ($3::text[]) AS ours,
           l.waiter IS NOT NULL AND l.waiter <> $2 AND l.waiter_until > now() AS hand,
           l.waiter, l.waiter_nonce, l.waiter_ttl_ms
      FROM ${s}.leases AS l
     WHERE l.name = $1
       AND ((l.holder = $2 AND l.nonce = ANY ($3::text[])) OR (l.waiter = $2 AND l.waiter_nonce = ANY ($3::text[])))
       FOR UPDATE
  ), ended AS (
    UPDATE ${s}.leases AS l
       SET holder = CASE WHEN c.hand THEN c.waiter END,
           nonce = CASE WHEN c.hand THEN c.waiter_nonce END,
           token = CASE WHEN c.hand THEN GREATEST(l.token + 1, ${s}.timeline_token_floor() + 1) ELSE l.token END,
           expires_at = CASE WHEN c.hand THEN now() + c.waiter_ttl_ms * interval '1 millisecond' ELSE now() END,
           term_started_at = CASE WHEN c.hand THEN now() ELSE l.term_started_at END,
           renewed_at = CASE WHEN c.hand THEN now() ELSE l.renewed_at END,
           ended_by = CASE WHEN c.hand THEN NULL ELSE 'released' END,
           waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
      FROM cur c
     WHERE l.name = c.name AND c.ours
    RETURNING l.name, l.token, l.holder, c.token AS old_token, c.hand
  ), withdrawn AS (
    UPDATE ${s}.leases AS l SET waiter = NULL, waiter_nonce = NULL, waiter_ttl_ms = NULL, waiter_until = NULL
      FROM cur c
     WHERE l.name = c.name AND NOT c.ours
  ), hist AS (
    INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
    SELECT e.name, x.event, x.holder, x.previous_holder, x.token, now(), x.detail
      FROM ended e
     CROSS JOIN LATERAL (VALUES (1, 'released', NULL::text, $2::text, e.old_token, NULL::text),
                                (2, 'acquired', e.holder, NULL::text, e.token, 'handed over by the release')) AS x(ord, event, holder, previous_holder, token, detail)
     WHERE x.ord = 1 OR e.hand
     ORDER BY x.ord
  )
  SELECT e.token, e.hand AS handed,
         CASE WHEN e.hand THEN pg_notify('${channel}', e.name) IS NOT NULL
              ELSE set_config('synchronous_commit', 'off', true) IS NOT NULL END AS side
    FROM ended e`;
}
