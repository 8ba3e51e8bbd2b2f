/**
 * Migration 9: a holder's release as a stored procedure, `leasehold_release(name, holder,
 * expect)`, so that a release is one `CALL` where it was ten statements sent as text.
 *
 * Why: a clean handover waits for the release (sql/006-handover.ts: the release hands the term
 * to the waiting follower in its own transaction). Sent as text, each of the ten statements is
 * parsed on every call and answers with a packet of its own; on a loaded server every one of
 * those steps is a chance to lose the CPU. A procedure is parsed once per session (kept in the
 * session's routine cache), answers once, and skips the token statements when nothing is handed
 * over. Measured in bench/handover.ts (see ../README.md, "Handover").
 *
 * What it does is what ../release.ts did for a holder's release, statement for statement:
 * lock the row, read who holds it (ours only with our holder id and one of our nonces) and who
 * waits; read the server's clock after the lock; hand the term to a live registered waiter
 * other than us (a token by the acquisition's rule: above the counter row, the floor, the
 * name's last token, and the clock; the counter raised), or end it; clear the registration
 * either way, or withdraw ours when we are the registered waiter and hold nothing; history
 * 'released' (and 'acquired' for a handover). It leaves the same session variables for its
 * caller: `@lh_prev` (the holder whose term ended, NULL when nothing ended) and `@lh_seen` (the
 * row's token, NULL when there is no such row). The caller owns the transaction: the procedure
 * neither starts nor commits one, so a batch (releaseMany) calls it once per lease inside one.
 *
 * Portability (MariaDB 10.6+ and MySQL 8.0+ both run CREATE PROCEDURE with this body; tested on
 * MariaDB 10.11 only): the parameters declare the columns' character sets and `_bin`
 * collations, or comparing a parameter with a column would be a mix of collations (both are
 * "implicit"); `SQL SECURITY INVOKER`, so that the procedure runs with the calling user's
 * privileges and keeps working if the user who migrated is dropped; no `VALUES()` in `ON
 * DUPLICATE KEY UPDATE` (deprecated in MySQL 8.0.20). Inside a procedure, `UTC_TIMESTAMP(6)` is
 * each statement's own start, as for statements sent one by one (MariaDB; MySQL documents the
 * same for procedures, unlike functions and triggers), so the clock is still read after the
 * row lock. A `SELECT ... INTO` that finds no row leaves its variables as they were (a 'no
 * data' warning, not an error), which is why they are set to NULL first.
 *
 * MySQL has no CREATE OR REPLACE PROCEDURE (MariaDB has): DROP, then CREATE, each safe to run
 * again if the migration was cut short. Creating it needs CREATE ROUTINE, calling it EXECUTE
 * (both in `GRANT ALL ON db.*`); a missing procedure is error 1305, which the store reports as
 * "run leasehold migrate" (../errors.ts).
 *
 * Numbered 9: 8 is another change's. MIGRATIONS runs by position, so this one follows 8 there.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the release is a new,
 * numbered migration that replaces the procedure.
 */
export const migration009: readonly string[] = [
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
         expires_at_us = IF(@lh_prev IS NULL, expires_at_us, IF(@lh_hand, @lh_now + @lh_wt, @lh_now)),
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
