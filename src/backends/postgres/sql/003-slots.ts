/**
 * Migration 3: the slot ledger's table (src/scheduler/ledger.ts).
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name */
export function migration003(s: string): string {
  return `
-- One row per (lease name, slot key): a schedule's slot (key = its ISO 8601 UTC time, slot_at
-- set) or a \`run --once-per\` key (slot_at null). Claimed with the fencing token of the term
-- that runs it; see src/backends/postgres/slots.ts.
CREATE TABLE IF NOT EXISTS ${s}.slots (
  name       text NOT NULL,
  slot       text NOT NULL,
  slot_at    timestamptz,
  status     text NOT NULL CHECK (status IN ('claimed', 'succeeded', 'failed', 'interrupted', 'skipped')),
  token      bigint NOT NULL,
  holder     text,
  started_at timestamptz,
  ended_at   timestamptz,
  exit_code  integer,
  reason     text,
  PRIMARY KEY (name, slot)
);
CREATE INDEX IF NOT EXISTS slots_name_slot_at ON ${s}.slots (name, slot_at);
`;
}
