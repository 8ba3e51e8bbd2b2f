/**
 * Migration 6: one-write handover, as PostgreSQL's migration 6 does it (the design and its
 * reasons are in src/backends/postgres/sql/006-handover.ts). A clean handover used to be the
 * holder's release, then the waiting follower waking on the release's named lock (../freed.ts)
 * and running a whole acquisition of its own: two write transactions of a dozen statements each,
 * one after the other, 16.6 ms against 0.76 ms for a bare GET_LOCK waiter in one run. Now:
 *
 *  1. A waiting follower's claim answered 'busy' also registers it in the lease row (`waiter`,
 *     `waiter_nonce`: that claim's nextNonce, `waiter_ttl_us`, and `waiter_until_us`, two of its
 *     TTLs on the server's clock). The claim has the row locked already: no round trip more.
 *  2. The holder's release, in its one transaction, hands the term to a registered waiter whose
 *     registration has not lapsed: a new term with a token by the acquisition's rule (../claim.ts,
 *     TOKENS), the waiter's nonce and TTL; history 'released' then 'acquired'. The release lets
 *     the named lock go after the commit, as before, which wakes the waiter.
 *  3. The woken waiter confirms the term with a read (the row holds its holder id and a nonce it
 *     registered under, live), not a write.
 *
 * A registered waiter that crashed is handed the term and holds it for one TTL, as a holder that
 * crashed would; one that stops cleanly withdraws first (a release of its registered nonces).
 *
 * MySQL 8 has no ADD COLUMN IF NOT EXISTS (MariaDB has), and a migration here must be safe to
 * rerun after it was cut short (../schema.ts): one ALTER adds the four columns (a single DDL
 * statement, so either all are there or none), only if information_schema does not list
 * `waiter` yet, through a prepared statement, which both servers run.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration.
 */
export const migration006: readonly string[] = [
  `SET @leasehold_m6 = IF(
     (SELECT COUNT(*) FROM information_schema.columns
       WHERE table_schema = DATABASE() AND table_name = 'leasehold_leases' AND column_name = 'waiter') = 0,
     'ALTER TABLE leasehold_leases
        ADD COLUMN waiter          VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        ADD COLUMN waiter_nonce    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
        ADD COLUMN waiter_ttl_us   BIGINT NULL,
        ADD COLUMN waiter_until_us BIGINT NULL',
     'DO 0');
   PREPARE leasehold_m6 FROM @leasehold_m6;
   EXECUTE leasehold_m6;
   DEALLOCATE PREPARE leasehold_m6`,
];
