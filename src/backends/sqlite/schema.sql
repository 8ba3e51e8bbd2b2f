-- index leasehold_fleet_agents_placement
CREATE INDEX leasehold_fleet_agents_placement ON leasehold_fleet_agents (owned, id) WHERE deregistered_at IS NULL AND draining = 0;
-- index leasehold_fleet_ownership_agent
CREATE INDEX leasehold_fleet_ownership_agent ON leasehold_fleet_ownership (agent);
-- index leasehold_history_name_id
CREATE INDEX leasehold_history_name_id ON leasehold_history (name, id);
-- index leasehold_slots_name_slot_at
CREATE INDEX leasehold_slots_name_slot_at ON leasehold_slots (name, slot_at);
-- table leasehold_fences
CREATE TABLE leasehold_fences (
  resource   TEXT PRIMARY KEY,
  token      INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
, lease TEXT);
-- table leasehold_fleet_agents
CREATE TABLE leasehold_fleet_agents (
  id              TEXT PRIMARY KEY,
  labels          TEXT NOT NULL DEFAULT '{}',
  started_at      INTEGER NOT NULL,
  draining        INTEGER NOT NULL DEFAULT 0,
  deregistered_at INTEGER,
  owned           INTEGER NOT NULL DEFAULT 0
);
-- table leasehold_fleet_generation
CREATE TABLE leasehold_fleet_generation (
  id   INTEGER PRIMARY KEY CHECK (id = 1),
  last INTEGER NOT NULL
);
-- table leasehold_fleet_ownership
CREATE TABLE leasehold_fleet_ownership (
  resource   TEXT PRIMARY KEY,
  agent      TEXT NOT NULL,
  generation INTEGER NOT NULL,
  labels     TEXT NOT NULL DEFAULT '{}',
  placed_at  INTEGER NOT NULL
);
-- table leasehold_history
CREATE TABLE leasehold_history (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  name            TEXT NOT NULL,
  event           TEXT NOT NULL CHECK (event IN ('acquired', 'takeover', 'released', 'revoked', 'conflict')),
  holder          TEXT,
  previous_holder TEXT,
  token           INTEGER NOT NULL,
  at              INTEGER NOT NULL,
  detail          TEXT
);
-- table leasehold_leases
CREATE TABLE leasehold_leases (
  name            TEXT PRIMARY KEY,
  holder          TEXT,
  nonce           TEXT,
  -- The last token issued for this name; rows are never deleted, so tokens never repeat.
  token           INTEGER NOT NULL DEFAULT 0,
  expires_at      INTEGER,
  term_started_at INTEGER,
  renewed_at      INTEGER,
  ended_by        TEXT CHECK (ended_by IN ('released', 'revoked', 'conflict'))
, fence_token INTEGER, fence_nonce TEXT, session_id TEXT, session_token INTEGER);
-- table leasehold_schedules
CREATE TABLE leasehold_schedules (
  name       TEXT PRIMARY KEY,
  token      INTEGER NOT NULL,
  record     TEXT NOT NULL,
  updated_at INTEGER NOT NULL
);
-- table leasehold_schema_version
CREATE TABLE leasehold_schema_version (version INTEGER NOT NULL);
-- table leasehold_slots
CREATE TABLE leasehold_slots (
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
