/**
 * Migration 8: placement reads agents in the order it picks them. A placement picks the agent
 * that owns the fewest resources among those live, not draining and carrying the labels. It
 * used to sort every registered agent (with a lease lookup each) to take the first, so its cost
 * grew with the fleet: 0.7 ms at 100 agents, 6 ms at 10,000 in the bench. With this index on
 * (owned, id) over the agents that can take work, the statement walks agents from the fewest
 * owned and stops after the first few that are live and have the labels (../fleet.ts,
 * PLACEMENT_TIES), picking at random among those tied: a bounded cost whatever the fleet's size
 * (more only when the least loaded agents are dead without having deregistered, or lack the
 * labels asked for).
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name */
export function migration008(s: string): string {
  return `
CREATE INDEX fleet_agents_placement ON ${s}.fleet_agents (owned, id) WHERE deregistered_at IS NULL AND NOT draining;
`;
}
