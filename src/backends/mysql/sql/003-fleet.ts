/**
 * Migration 3: the fleet registry's tables (src/fleet, ../fleet.ts): agents, ownership, and the
 * generation counter. An agent's liveness is not here: it is the lease `agent/<id>` in
 * leasehold_leases, judged by the server's clock like any lease.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration.
 */
export const migration003: readonly string[] = [
  // Ids are at most 194 characters: the liveness lease `agent/<id>` is a lease name (200).
  `CREATE TABLE IF NOT EXISTS leasehold_fleet_agents (
    id                 VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    labels             JSON NOT NULL,
    started_at_us      BIGINT NOT NULL,
    draining           BOOLEAN NOT NULL DEFAULT FALSE,
    deregistered_at_us BIGINT NULL,
    -- Resources owned, kept in step by every statement that changes ownership: placement orders
    -- by it, and counting the ownership rows on every placement would not scale.
    owned              BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (id)
  ) ENGINE = InnoDB`,
  // One row: the last generation issued for any resource. Generations are fencing tokens, so
  // one is never reused, even after a record is removed and the resource placed again; every
  // placement and reassignment locks this row, which also makes two placements of one resource
  // take turns.
  `CREATE TABLE IF NOT EXISTS leasehold_fleet_generation (
    id   TINYINT NOT NULL,
    last BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (id)
  ) ENGINE = InnoDB`,
  `INSERT IGNORE INTO leasehold_fleet_generation (id) VALUES (1)`,
  `CREATE TABLE IF NOT EXISTS leasehold_fleet_ownership (
    resource     VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    agent        VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    generation   BIGINT NOT NULL,
    -- What the placement asked for; reassign picks a new owner with the same labels.
    labels       JSON NOT NULL,
    placed_at_us BIGINT NOT NULL,
    PRIMARY KEY (resource),
    KEY leasehold_fleet_ownership_agent (agent)
  ) ENGINE = InnoDB`,
];
