/**
 * leasehold/fleet: a registry of agents that heartbeat, placement only on live agents, and
 * ownership that never passes a dead owner off as "no owner".
 *
 * Glossary
 * - agent: a process that holds the lease `agent/<id>` (TTL = stale-after, renewed every
 *   heartbeat) and has a row in the fleet's agents table (labels, start time, draining).
 * - live: its lease is held and unexpired by the STORE's clock, and it has not deregistered.
 *   Stale: not live. A forked or restored agent is caught by the lease's nonce rule and stands down.
 * - draining: alive and still owning, but given no new placements.
 * - ownership: resource -> agent, with a generation.
 * - generation: strictly larger on every change of owner of any resource, for ever (even after
 *   a record is removed, a token floor raise or a PostgreSQL promotion): a fencing token that the
 *   fences in leasehold/fence accept. Each store makes it its own way (a sequence above the
 *   timeline floor, a counter, Redis TIME, an etcd revision).
 * - owner lookup: the live owner, or OwnerDeadError (record, owner not live: who, and stale for
 *   how long), or NoOwnerError (no record). It never places anything.
 * - OwnerCache: positive answers only; absence or expiry asks the store.
 */
export { Fleet, ownerState, RESOURCE_PAGE_MAX, type Owner, type OwnerState, type Placement, type ResourceListing, type ResourceRow } from './fleet.js';
export { Agent, resolveAgentTiming, DEFAULT_HEARTBEAT_MS, DEFAULT_STALE_AFTER_MS, type AgentOptions, type AgentEvents } from './agent.js';
export { OwnerCache, type OwnerCacheOptions, type OwnerCacheStats } from './cache.js';
export { openFleet } from './open.js';
export { pruneFleet, type PruneFleetOptions, type PruneFleetResult } from './retention.js';
export { parseLabels, validateLabels } from './labels.js';
export { AGENT_LEASE_PREFIX, type FleetPort, type AgentRow, type OwnerRow, type Labels, type PlaceResult, type ReassignResult, type FleetPruneRequest, type FleetPruneResult, type ResourcePage, type ResourcePageRequest } from './port.js';
export { PostgresFleet } from '../backends/postgres/fleet.js';
export { SqliteFleet } from '../backends/sqlite/fleet.js';
export { RedisFleet } from '../backends/redis/fleet.js';
export { EtcdFleet } from '../backends/etcd/fleet.js';
export { AlreadyOwnedError, NoLiveAgentError, NoOwnerError, OwnerChangedError, OwnerDeadError } from './errors.js';
export type { CallOptions } from '../core/port.js';
