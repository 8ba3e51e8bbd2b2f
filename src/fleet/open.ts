import { openFleetPort } from '../backends/index.js';
import type { LeaseStore } from '../backends/store.js';
import { Fleet } from './fleet.js';

/**
 * Opens the fleet registry living beside the leases of `store` (PostgreSQL, SQLite, Redis or etcd): the
 * agents' liveness is their leases in that same store, so the two must be one database.
 * @throws {ConfigError} for another kind of store.
 */
export async function openFleet(store: LeaseStore): Promise<Fleet> {
  return new Fleet(await openFleetPort(store));
}
