/**
 * Migration 4: the fleet registry's tables (src/fleet): agents and ownership. Agents' liveness is not here:
 * it is the lease `agent/<id>` in the leases table, so staleness is judged by this database's
 * clock, by the lease rules. Written with IF NOT EXISTS so the migration can be renumbered.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name */
export function migration004(s: string): string {
  return `
CREATE TABLE IF NOT EXISTS ${s}.fleet_agents (
  id              text PRIMARY KEY,
  labels          jsonb NOT NULL DEFAULT '{}',
  started_at      timestamptz NOT NULL,
  draining        boolean NOT NULL DEFAULT false,
  deregistered_at timestamptz,
  -- Resources owned, kept in step by every statement that changes ownership: placement orders
  -- by it, and counting 100,000 ownership rows per placement would not do.
  owned           bigint NOT NULL DEFAULT 0
);
-- One counter for every resource: a generation is never reused, even after a record is removed
-- and the resource placed again, so it works as a fencing token for ever.
CREATE SEQUENCE IF NOT EXISTS ${s}.fleet_generation;
CREATE TABLE IF NOT EXISTS ${s}.fleet_ownership (
  resource   text PRIMARY KEY,
  agent      text NOT NULL,
  generation bigint NOT NULL,
  -- What the placement asked for; reassign picks a new owner with the same labels.
  labels     jsonb NOT NULL DEFAULT '{}',
  placed_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS fleet_ownership_agent ON ${s}.fleet_ownership (agent);
`;
}
