/**
 * A holder's release: end the term if the row still holds our holder id and one of our nonces,
 * with a history row, in one statement (the `leases_freed` trigger sends the NOTIFY that wakes
 * followers).
 *
 * It commits without waiting for the WAL flush (`synchronous_commit` off for this transaction
 * only, set inside the statement so the release stays one round trip). Why that is safe: the
 * holder has stood down locally before it sends the release, so a release lost in a crash (or
 * in a failover to a standby that had not received it) only leaves the row held by a holder that
 * will never renew it; followers then take the lease when that term expires, as they would had
 * the holder crashed. That costs liveness, never safety: a release never issues a token, and a
 * follower's acquisition, which does, commits durably (the claim function runs with the server's
 * own setting), and flushing it flushes the release that preceded it in the WAL. Revocations stay
 * durable: an operator who was told "revoked" must not see the holder come back.
 * @param s the quoted schema name
 */
export function releaseStatement(s: string): string {
  return `WITH upd AS (
    UPDATE ${s}.leases SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'released'
     WHERE name = $1 AND holder = $2 AND nonce = ANY ($3::text[])
       AND set_config('synchronous_commit', 'off', true) IS NOT NULL
    RETURNING name, token)
  INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at)
  SELECT name, 'released', NULL, $2, token, now() FROM upd RETURNING token`;
}
