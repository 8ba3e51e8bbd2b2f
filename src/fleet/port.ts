/**
 * The fleet's port: the few calls the fleet model makes on a store. Like the engine's LeasePort,
 * it is structural and small; `backends/{postgres,sqlite,redis,etcd}/fleet.ts` implement it,
 * each call atomic in the store (one statement, transaction, script, or compare-and-swap Txn),
 * judged by the store's clock. `leasehold/conformance`'s runFleetConformance checks them.
 *
 * Liveness is not stored here: an agent is alive while it holds the lease named
 * `agent/<id>` in the same store (see ./agent.ts), so staleness, clones and restores follow
 * the lease rules. Every call below joins ownership to that lease row.
 */
import type { CallOptions } from '../core/port.js';

export { AGENT_LEASE_OPTIONS, AGENT_LEASE_PREFIX } from '../core/reserved.js';

export type Labels = Readonly<Record<string, string>>;

/** One agent as the store sees it, now. Times are the store's, in epoch milliseconds. */
export interface AgentRow {
  id: string;
  labels: Labels;
  startedAtMs: number;
  draining: boolean;
  /** Shut down gracefully; not alive until it registers again. */
  deregistered: boolean;
  /** Holds its liveness lease, unexpired by the store's clock, and is not deregistered. */
  live: boolean;
  /** Resources it owns. */
  owned: number;
  /** Store now minus its last heartbeat (the lease's last renewal); null without a lease row. */
  heartbeatAgeMs: number | null;
  /** Its liveness lease's expiry minus store now (negative: stale that long); null without one. */
  expiresInMs: number | null;
  storeNowMs: number;
}

/** The ownership record of one resource, with its owner's liveness by the store's clock. */
export interface OwnerRow {
  resource: string;
  agent: string;
  generation: bigint;
  placedAtMs: number;
  live: boolean;
  deregistered: boolean;
  heartbeatAgeMs: number | null;
  expiresInMs: number | null;
  /** When it deregistered (store clock), if it did. */
  deregisteredAtMs: number | null;
  storeNowMs: number;
}

export type PlaceResult =
  | { outcome: 'placed'; agent: string; generation: bigint }
  | { outcome: 'owned'; agent: string; generation: bigint }
  | { outcome: 'no-agent' };

export type ReassignResult =
  | { outcome: 'moved'; agent: string; generation: bigint }
  /** The owner on record is not `from` (null: no record). */
  | { outcome: 'owner-changed'; owner: string | null }
  /** No live, non-draining agent other than `from` (or `to` is not one). */
  | { outcome: 'no-agent' };

export interface FleetPruneRequest {
  olderThanMs: number;
  limit: number;
}

export interface FleetPruneResult {
  ownership: number;
  agents: number;
  /** The call stopped at `limit`: there may be more. */
  more: boolean;
}

/** A page of the resources listing: names after `after` (none: from the first), at most `limit`. */
export interface ResourcePageRequest {
  after?: string;
  limit: number;
}

export interface ResourcePage {
  /** Ownership records in the store's order of resource names, each with its owner's liveness by the store's clock. */
  rows: OwnerRow[];
  /** Pass as `after` for the next page; null when this page is the last. */
  next: string | null;
}

export interface FleetPort {
  readonly kind: string;
  readonly description: string;
  /** Upserts the agent's row (labels, started now, not deregistered). Keeps `draining`: a restart does not undo an operator's drain. */
  registerAgent(id: string, labels: Labels, options?: CallOptions): Promise<void>;
  /** Marks it deregistered (its lease is released separately, after). */
  deregisterAgent(id: string, options?: CallOptions): Promise<void>;
  /** False when no such agent is registered. */
  setDraining(id: string, draining: boolean, options?: CallOptions): Promise<boolean>;
  agents(options?: CallOptions): Promise<AgentRow[]>;
  owner(resource: string, options?: CallOptions): Promise<OwnerRow | undefined>;
  /** Atomically: pick a live, non-draining agent matching `labels` (fewest owned, random ties) and record ownership. */
  place(resource: string, labels: Labels, options?: CallOptions): Promise<PlaceResult>;
  /** Atomically: if owned by `from`, move to `to` (or a pick as in place, with the placement's labels), with a new generation. */
  reassign(resource: string, from: string, to: string | null, options?: CallOptions): Promise<ReassignResult>;
  /** Deletes the record if owned by `from`. The next placement still gets a larger generation. */
  remove(resource: string, from: string, options?: CallOptions): Promise<boolean>;
  /**
   * Retention (optional, so a port of the caller's still fits; every built-in one has it): deletes
   * up to `limit` ownership records whose owner deregistered more than `olderThanMs` before the
   * store's now (the resource then has no owner; its next placement gets a larger generation,
   * from the one counter every placement draws on, which is never pruned), then, once none is
   * left, up to `limit` agent records deregistered that long ago that own nothing. Never a record
   * of a registered agent, live or stale.
   */
  prune?(req: FleetPruneRequest, options?: CallOptions): Promise<FleetPruneResult>;
  /**
   * One page of the ownership records (optional, like prune; every built-in port has it): the
   * resources whose names sort after `req.after`, at most `req.limit` of them, in the store's order
   * of names (byte order of the name; etcd: of its URI-encoded form; PostgreSQL: the column's
   * collation), each with its owner's liveness as `owner()` gives it. One bounded read per page,
   * so a fleet of any size is listed in answers of a known size; pages are not one snapshot.
   */
  resources?(req: ResourcePageRequest, options?: CallOptions): Promise<ResourcePage>;
  close(): Promise<void>;
}
