/**
 * Migration 7: one row per schedule (src/scheduler/schedule-record.ts): its expression and zone,
 * mode, catch-up policy and catch-up progress, as the replica that leads it wrote it, so
 * `cron ls` and the dashboard show what the schedule is rather than guess it from its slots.
 * `record` is the JSON the scheduler encodes; `token` is the writing term's, kept apart so the
 * upsert replaces a record only with one of an equal or later term. Time in microseconds by the
 * server's clock, as in migration 1.
 *
 * Numbered 7: 6 is another change's. MIGRATIONS runs by position, so this one follows 6 there.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration.
 */
export const migration007: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS leasehold_schedules (
    name          VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    token         BIGINT NOT NULL,
    record        TEXT NOT NULL,
    updated_at_us BIGINT NOT NULL,
    PRIMARY KEY (name)
  ) ENGINE = InnoDB`,
];
