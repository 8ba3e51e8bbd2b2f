/**
 * The SQLite store's tables and its migrations: version N of a file is the first N entries run in
 * order, each once, in the migrating transaction (./store.ts, migrate).
 */
import { SQLITE_FLEET_MIGRATION, SQLITE_FLEET_PLACEMENT_MIGRATION } from './fleet-schema.js';
import { SQLITE_SCHEDULES_MIGRATION, SQLITE_SLOTS_MIGRATION } from './slots-schema.js';

/** The table names: one place, so the store and its tests cannot disagree. */
export const T = {
  leases: 'leasehold_leases',
  history: 'leasehold_history',
  fences: 'leasehold_fences',
  version: 'leasehold_schema_version',
};

export const MIGRATIONS = [
  `
CREATE TABLE ${T.leases} (
  name            TEXT PRIMARY KEY,
  holder          TEXT,
  nonce           TEXT,
  -- The last token issued for this name; rows are never deleted, so tokens never repeat.
  token           INTEGER NOT NULL DEFAULT 0,
  expires_at      INTEGER,
  term_started_at INTEGER,
  renewed_at      INTEGER,
  ended_by        TEXT CHECK (ended_by IN ('released', 'revoked', 'conflict'))
);
CREATE TABLE ${T.history} (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  name            TEXT NOT NULL,
  event           TEXT NOT NULL CHECK (event IN ('acquired', 'takeover', 'released', 'revoked', 'conflict')),
  holder          TEXT,
  previous_holder TEXT,
  token           INTEGER NOT NULL,
  at              INTEGER NOT NULL,
  detail          TEXT
);
CREATE INDEX ${T.history}_name_id ON ${T.history} (name, id);
CREATE TABLE ${T.fences} (
  resource   TEXT PRIMARY KEY,
  token      INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
`,
  // Same-database fenced writes (src/fence with `term`, see ./term-fence.ts): the token of the
  // term that last committed one and the fence nonce it set, apart from the renewal nonce.
  `
ALTER TABLE ${T.leases} ADD COLUMN fence_token INTEGER;
ALTER TABLE ${T.leases} ADD COLUMN fence_nonce TEXT;
`,
  SQLITE_SLOTS_MIGRATION,
  // The fleet registry (src/fleet): agents, ownership, the generation counter.
  SQLITE_FLEET_MIGRATION,
  // A resource's mark belongs to one lease (issue 26): the lease name of the first fenced write
  // that named one. NULL is unclaimed (every mark written before this, or only by writes that
  // named no lease); the first write that names a lease claims it, and another name is refused.
  `
ALTER TABLE ${T.fences} ADD COLUMN lease TEXT;
`,
  // One row per schedule: what it is and whether it is catching up (issue 31).
  SQLITE_SCHEDULES_MIGRATION,
  // Liveness 'session' (issue 32, ./session.ts): the holder's process recorded with its term,
  // as session_id (pid:start:boot:pidns) for the term whose token is session_token. A new
  // token (a takeover, a handover) leaves an old session behind without anything to clear it.
  `
ALTER TABLE ${T.leases} ADD COLUMN session_id TEXT;
ALTER TABLE ${T.leases} ADD COLUMN session_token INTEGER;
`,
  // Placement by an index of the agents that can take work, not a read of every agent (issue 34).
  SQLITE_FLEET_PLACEMENT_MIGRATION,
];

/** The version a migrated file is at: every entry of MIGRATIONS has run. */
export const SQLITE_SCHEMA_VERSION = MIGRATIONS.length;
