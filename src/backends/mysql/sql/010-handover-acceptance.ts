/**
 * Migration 10: a handed term is an offer until its waiter accepts it, as PostgreSQL's
 * migration 17 (the reasons and the rule are in src/backends/postgres/sql/017-handover-acceptance.ts).
 * A registered waiter that died (SIGKILLed between per-slot cron tries while its registration
 * was kept) used to be handed a full term of its TTL by the next release, and every other
 * contender was kept out for that TTL.
 *
 * `leasehold_release` is migration 9's procedure with one change: the term it hands to the
 * registered waiter expires a third of the waiter's TTL after the release (the acceptance
 * window), not a whole TTL. The waiter's claim accepts it (../claim.ts: an UPDATE that gives the
 * term the waiter's own TTL from the server's now, only while the row still holds the handed
 * term unexpired), and the engine begins a term only from that answer. An offer nobody accepts
 * lapses like any expired term, and the next contender takes the lease over with a larger token.
 *
 * Processes of the previous version still run on this schema, at a cost: their confirming read
 * answers the offer's short expiry, which their term then treats as its deadline (safe: it
 * stands down before the row expires), so a handed term is lost to them after the window and
 * they contend again. A process of this version on a schema before 10 accepts full-TTL terms,
 * which changes nothing for them.
 *
 * MySQL has no CREATE OR REPLACE PROCEDURE (MariaDB has): DROP, then CREATE, each safe to run
 * again if the migration was cut short.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the release is a new,
 * numbered migration that replaces the procedure.
 */
export const migration010: readonly string[] = [
  'DROP PROCEDURE IF EXISTS leasehold_release',
  `CREATE PROCEDURE leasehold_release(
     IN p_name   VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
     IN p_holder VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
     IN p_expect TEXT CHARACTER SET ascii COLLATE ascii_bin)
   MODIFIES SQL DATA
   SQL SECURITY INVOKER
   BEGIN
     SET @lh_prev = NULL, @lh_tok = NULL, @lh_seen = NULL, @lh_w = NULL, @lh_wn = NULL, @lh_wt = NULL, @lh_wu = NULL, @lh_k = NULL;
     SELECT token, IF(holder = p_holder AND FIND_IN_SET(nonce, p_expect) > 0, holder, NULL), token, waiter, waiter_nonce, waiter_ttl_us, waiter_until_us
       INTO @lh_seen, @lh_prev, @lh_tok, @lh_w, @lh_wn, @lh_wt, @lh_wu
       FROM leasehold_leases WHERE name = p_name FOR UPDATE;
     SET @lh_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
     SET @lh_hand = COALESCE(@lh_prev IS NOT NULL AND @lh_w <> @lh_prev AND @lh_wu > @lh_now, 0),
         @lh_wd = COALESCE(@lh_prev IS NULL AND @lh_w = p_holder AND FIND_IN_SET(@lh_wn, p_expect) > 0, 0);
     IF @lh_hand THEN
       SELECT GREATEST(last, floor, @lh_tok) + 1 INTO @lh_k FROM leasehold_tokens WHERE id = 1 FOR UPDATE;
       SET @lh_k = GREATEST(COALESCE(@lh_k, @lh_tok + 1), @lh_now);
       INSERT INTO leasehold_tokens (id, last) VALUES (1, @lh_k) ON DUPLICATE KEY UPDATE last = GREATEST(last, @lh_k);
     END IF;
     IF @lh_prev IS NOT NULL OR @lh_wd THEN
       UPDATE leasehold_leases SET
         holder = IF(@lh_prev IS NULL, holder, IF(@lh_hand, @lh_w, NULL)),
         nonce = IF(@lh_prev IS NULL, nonce, IF(@lh_hand, @lh_wn, NULL)),
         token = IF(@lh_hand, @lh_k, token),
         expires_at_us = IF(@lh_prev IS NULL, expires_at_us, IF(@lh_hand, @lh_now + @lh_wt DIV 3, @lh_now)),
         term_started_at_us = IF(@lh_hand, @lh_now, term_started_at_us),
         renewed_at_us = IF(@lh_hand, @lh_now, renewed_at_us),
         ended_by = IF(@lh_prev IS NULL, ended_by, IF(@lh_hand, NULL, 'released')),
         waiter = NULL, waiter_nonce = NULL, waiter_ttl_us = NULL, waiter_until_us = NULL
       WHERE name = p_name;
     END IF;
     IF @lh_prev IS NOT NULL THEN
       INSERT INTO leasehold_history (name, event, holder, previous_holder, token, at_us, detail)
         SELECT p_name, 'released', NULL, @lh_prev, @lh_tok, @lh_now, NULL FROM DUAL
         UNION ALL SELECT p_name, 'acquired', @lh_w, NULL, @lh_k, @lh_now, 'handed over by the release' FROM DUAL WHERE @lh_hand;
     END IF;
   END`,
];
