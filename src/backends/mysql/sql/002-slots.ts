/**
 * Migration 2: the slot ledger's table (src/scheduler/ledger.ts, ../slots.ts).
 *
 * One row per (lease name, slot key): a schedule's slot (key = its ISO 8601 UTC time,
 * slot_at_us set) or a `run --once-per` key (slot_at_us NULL), written with the fencing token of
 * the term that last wrote it. Times are microseconds by the server's clock, as in migration 1.
 * The key is at most 512 characters so that the primary key fits InnoDB's 3072-byte limit.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration.
 */
export const migration002: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS leasehold_slots (
    name          VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    slot          VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    slot_at_us    BIGINT NULL,
    status        VARCHAR(16) CHARACTER SET ascii NOT NULL,
    token         BIGINT NOT NULL,
    holder        VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    started_at_us BIGINT NULL,
    ended_at_us   BIGINT NULL,
    exit_code     INT NULL,
    reason        TEXT NULL,
    PRIMARY KEY (name, slot),
    KEY leasehold_slots_name_slot_at (name, slot_at_us),
    CONSTRAINT leasehold_slots_status CHECK (status IN ('claimed', 'succeeded', 'failed', 'interrupted', 'skipped'))
  ) ENGINE = InnoDB`,
];
