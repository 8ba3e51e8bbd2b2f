/**
 * Migration 10: a handed term is an offer until its waiter accepts it, as PostgreSQL's
 * migration 17 (the reasons and the rule are in src/backends/postgres/sql/017-handover-acceptance.ts).
 * A registered waiter that died (SIGKILLed between per-slot cron tries while its registration
 * was kept) used to be handed a full term of its TTL by the next release, and every other
 * contender was kept out for that TTL.
 *
 * `leasehold_release` is migration 9's procedure with one change: the term it hands to a
 * registered waiter that accepts offers expires at the end of the acceptance window, not a whole
 * TTL later: a third of the waiter's TTL, but at least 500 ms (500000 µs) and at most the TTL,
 * the window PostgreSQL's migration 17 gives and says why. The waiter's claim accepts it
 * (../claim.ts: an UPDATE under the row lock, with the clock read after the lock, that gives the
 * term the waiter's own TTL and swaps its nonce for the claim's next one, only while the row
 * still holds the handed term unexpired under a nonce it registered), and the engine begins a
 * term only from that answer. An offer nobody accepts lapses like any expired term, and the next
 * contender takes the lease over with a larger token.
 *
 * Which waiters accept: the client is SQL sent as text on MySQL, so a process of the previous
 * version on this schema still registers with its own statement and confirms a handed term with
 * a read. Handed an offer, it read an expiry a third of its TTL away, its first renewal was due
 * after its deadline, and the engine took the passed deadline for a suspension: every lease of
 * that process stood down and its identity was replaced, on every handover of the upgrade.
 * So the column `waiter_accepts` names the registration that accepts: this version's
 * registration sets it to the registered nonce (`waiter_nonce`), and the release offers only to
 * a waiter whose `waiter_accepts` equals its `waiter_nonce`. A registration by the previous
 * version's statement leaves the column alone, so it never matches the fresh nonce that
 * registration sets, and that waiter is handed a full term of its TTL as migration 9 did. (A
 * flag would not do: an old registration that replaced a new one would inherit it.)
 *
 * A process of this version on a schema before 10 registers without the column (../store.ts
 * falls back when the server has none) and is handed full terms by migration 9's procedure,
 * which it accepts the same way: nothing changes for it. (Only library users and CLI processes
 * already running meet either mix: the CLI refuses to start on any schema but its own,
 * src/cli/common.ts requireCurrentSchema.)
 *
 * The column is added as migration 6 added the waiter's: MySQL 8 has no ADD COLUMN IF NOT
 * EXISTS, so one ALTER through a prepared statement, only if information_schema does not list it.
 * MySQL has no CREATE OR REPLACE PROCEDURE (MariaDB has): DROP, then CREATE, each safe to run
 * again if the migration was cut short. A release sent between the two fails with error 1305
 * (no such procedure) and, like any release that fails, leaves the term to run out on its own,
 * as migration 9's did.
 *
 * Frozen once a database has run it (none had when this text was last changed): a change to the
 * release is a new, numbered migration that replaces the procedure.
 */
export const migration010: readonly string[] = [
  `SET @leasehold_m10 = IF(
     (SELECT COUNT(*) FROM information_schema.columns
       WHERE table_schema = DATABASE() AND table_name = 'leasehold_leases' AND column_name = 'waiter_accepts') = 0,
     'ALTER TABLE leasehold_leases ADD COLUMN waiter_accepts VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL',
     'DO 0');
   PREPARE leasehold_m10 FROM @leasehold_m10;
   EXECUTE leasehold_m10;
   DEALLOCATE PREPARE leasehold_m10`,
  'DROP PROCEDURE IF EXISTS leasehold_release',
  `CREATE PROCEDURE leasehold_release(
     IN p_name   VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
     IN p_holder VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
     IN p_expect TEXT CHARACTER SET ascii COLLATE ascii_bin)
   MODIFIES SQL DATA
   SQL SECURITY INVOKER
   BEGIN
     SET @lh_prev = NULL, @lh_tok = NULL, @lh_seen = NULL, @lh_w = NULL, @lh_wn = NULL, @lh_wt = NULL, @lh_wu = NULL, @lh_k = NULL, @lh_wa = NULL;
     SELECT token, IF(holder = p_holder AND FIND_IN_SET(nonce, p_expect) > 0, holder, NULL), token, waiter, waiter_nonce, waiter_ttl_us, waiter_until_us,
            waiter_accepts <=> waiter_nonce AND waiter_nonce IS NOT NULL
       INTO @lh_seen, @lh_prev, @lh_tok, @lh_w, @lh_wn, @lh_wt, @lh_wu, @lh_wa
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
         expires_at_us = IF(@lh_prev IS NULL, expires_at_us,
                            IF(@lh_hand, @lh_now + IF(@lh_wa, LEAST(@lh_wt, GREATEST(@lh_wt DIV 3, 500000)), @lh_wt), @lh_now)),
         term_started_at_us = IF(@lh_hand, @lh_now, term_started_at_us),
         renewed_at_us = IF(@lh_hand, @lh_now, renewed_at_us),
         ended_by = IF(@lh_prev IS NULL, ended_by, IF(@lh_hand, NULL, 'released')),
         waiter = NULL, waiter_nonce = NULL, waiter_ttl_us = NULL, waiter_until_us = NULL, waiter_accepts = NULL
       WHERE name = p_name;
     END IF;
     IF @lh_prev IS NOT NULL THEN
       INSERT INTO leasehold_history (name, event, holder, previous_holder, token, at_us, detail)
         SELECT p_name, 'released', NULL, @lh_prev, @lh_tok, @lh_now, NULL FROM DUAL
         UNION ALL SELECT p_name, 'acquired', @lh_w, NULL, @lh_k, @lh_now, 'handed over by the release' FROM DUAL WHERE @lh_hand;
     END IF;
   END`,
];
