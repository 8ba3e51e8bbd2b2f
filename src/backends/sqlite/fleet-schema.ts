/**
 * The fleet registry's tables (src/fleet) in the SQLite file: agents, ownership and the one
 * generation counter. Liveness is the lease `agent/<id>` in leasehold_leases. IF NOT EXISTS so
 * the migration can be renumbered.
 */
export const SQLITE_FLEET_MIGRATION = `
CREATE TABLE IF NOT EXISTS leasehold_fleet_agents (
  id              TEXT PRIMARY KEY,
  labels          TEXT NOT NULL DEFAULT '{}',
  started_at      INTEGER NOT NULL,
  draining        INTEGER NOT NULL DEFAULT 0,
  deregistered_at INTEGER,
  owned           INTEGER NOT NULL DEFAULT 0
);
-- One row: the last generation issued, for every resource, never reused.
CREATE TABLE IF NOT EXISTS leasehold_fleet_generation (
  id   INTEGER PRIMARY KEY CHECK (id = 1),
  last INTEGER NOT NULL
);
INSERT OR IGNORE INTO leasehold_fleet_generation (id, last) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS leasehold_fleet_ownership (
  resource   TEXT PRIMARY KEY,
  agent      TEXT NOT NULL,
  generation INTEGER NOT NULL,
  labels     TEXT NOT NULL DEFAULT '{}',
  placed_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS leasehold_fleet_ownership_agent ON leasehold_fleet_ownership (agent);
`;

/**
 * Placement walks the agents that can take work fewest-owned first and stops after the first few
 * that are live and carry the labels (./fleet.ts, PLACEMENT_TIES), instead of reading every
 * agent with its lease: in the bench, 1,000 agents cost a placement ten times what 100 did.
 */
export const SQLITE_FLEET_PLACEMENT_MIGRATION = `
CREATE INDEX IF NOT EXISTS leasehold_fleet_agents_placement ON leasehold_fleet_agents (owned, id) WHERE deregistered_at IS NULL AND draining = 0;
`;
