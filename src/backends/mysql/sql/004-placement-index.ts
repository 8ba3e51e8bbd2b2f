/**
 * Migration 4: placement reads agents in the order it picks them. A placement picks the agent
 * owning the fewest resources among those live, not draining and carrying the labels; it used
 * to sort every agent (a lease lookup each) to take the first, so it cost more the larger the
 * fleet (1.2 ms at 100 agents, 5.2 ms at 1,000 in bench/fleet.ts). With this index the statement
 * walks agents from the fewest owned and stops after the first few eligible ones (../fleet.ts,
 * PLACEMENT_TIES), picking at random among those tied.
 *
 * MySQL 8 has no CREATE INDEX IF NOT EXISTS: a rerun of this migration after it was cut short
 * meets "duplicate key name" (1061), which the migration runner (../store.ts) takes as done.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration.
 */
export const migration004: readonly string[] = [`CREATE INDEX leasehold_fleet_agents_placement ON leasehold_fleet_agents (owned, id)`];
