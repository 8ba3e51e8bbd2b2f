/**
 * Migration 8 (issue 32): liveness 'session' on MySQL/MariaDB (../session.ts has the design, and
 * docs/liveness.md the safety argument). A term may be tied to its holder's own connection, which
 * holds the lease's *session lock* (a named lock, GET_LOCK) for as long as the connection lives:
 *  - `session_conn`: that connection's id (CONNECTION_ID()) when the term was granted; the server
 *    names the connection holding a named lock (IS_USED_LOCK), and ids only grow while the server
 *    runs, so "the lock is free, or another connection's" means the holder's connection is gone;
 *  - `session_token`: the token of the term the session was recorded for. A session applies
 *    only while the row's token equals it: a release, a revocation, a takeover or a handover
 *    (a new token) leaves it behind without a trigger having to clear it;
 *  - `session_server`: the server's start time (seconds, its clock less its uptime). Connection ids
 *    start again after a restart, and a failover moves to another server whose locks say nothing
 *    of the old one's connections, so a term recorded on another server instance is left to its
 *    expiry.
 *
 * Idempotent as migration 6 is (MySQL 8 has no ADD COLUMN IF NOT EXISTS): one ALTER, only when
 * information_schema does not list `session_conn` yet.
 *
 * Numbered 8: reserved for this change. Frozen once merged: this is the SQL that databases at
 * this version ran.
 */
export const migration008: readonly string[] = [
  `SET @leasehold_m8 = IF(
     (SELECT COUNT(*) FROM information_schema.columns
       WHERE table_schema = DATABASE() AND table_name = 'leasehold_leases' AND column_name = 'session_conn') = 0,
     'ALTER TABLE leasehold_leases
        ADD COLUMN session_conn   BIGINT UNSIGNED NULL,
        ADD COLUMN session_token  BIGINT NULL,
        ADD COLUMN session_server BIGINT NULL',
     'DO 0');
   PREPARE leasehold_m8 FROM @leasehold_m8;
   EXECUTE leasehold_m8;
   DEALLOCATE PREPARE leasehold_m8`,
];
