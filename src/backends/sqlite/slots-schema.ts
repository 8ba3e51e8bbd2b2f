/** The slot ledger's table (src/scheduler/ledger.ts), one migration entry in ./store.ts. Times in ms, by the store's clock. */
export const SQLITE_SLOTS_MIGRATION = `
CREATE TABLE IF NOT EXISTS leasehold_slots (
  name       TEXT NOT NULL,
  slot       TEXT NOT NULL,
  slot_at    INTEGER,
  status     TEXT NOT NULL CHECK (status IN ('claimed', 'succeeded', 'failed', 'interrupted', 'skipped')),
  token      INTEGER NOT NULL,
  holder     TEXT,
  started_at INTEGER,
  ended_at   INTEGER,
  exit_code  INTEGER,
  reason     TEXT,
  PRIMARY KEY (name, slot)
);
CREATE INDEX IF NOT EXISTS leasehold_slots_name_slot_at ON leasehold_slots (name, slot_at);
`;

/**
 * Migration entry 6: one row per schedule (src/scheduler/schedule-record.ts), as the replica that
 * leads it wrote it; `token` apart from the JSON so a record is replaced only by an equal or later
 * term's. Times in ms.
 */
export const SQLITE_SCHEDULES_MIGRATION = `
CREATE TABLE IF NOT EXISTS leasehold_schedules (
  name       TEXT PRIMARY KEY,
  token      INTEGER NOT NULL,
  record     TEXT NOT NULL,
  updated_at INTEGER NOT NULL
);
`;
