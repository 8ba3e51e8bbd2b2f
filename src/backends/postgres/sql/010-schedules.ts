/**
 * Migration 10: one row per schedule (src/scheduler/schedule-record.ts): its expression and
 * zone, mode, catch-up policy and catch-up progress, as the replica that leads it wrote it, so
 * `cron ls` and the dashboard show what the schedule is rather than guess it from its slots.
 * `record` is the JSON the scheduler encodes; `token` is the writing term's, kept apart so the
 * upsert replaces a record only with one of an equal or later term.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name */
export function migration010(s: string): string {
  return `
CREATE TABLE ${s}.schedules (
  name       text PRIMARY KEY,
  token      bigint NOT NULL,
  record     text NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
`;
}
