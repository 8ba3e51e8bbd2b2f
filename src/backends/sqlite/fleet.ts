import type { CallOptions } from '../../core/port.js';
import { AGENT_LEASE_PREFIX, type AgentRow, type FleetPort, type FleetPruneRequest, type FleetPruneResult, type Labels, type OwnerRow, type PlaceResult, type ReassignResult, type ResourcePage, type ResourcePageRequest } from '../../fleet/port.js';
import type { SqliteDatabaseLike, SqliteStore } from './store.js';

interface LivenessRow {
  id: string;
  labels: string;
  draining: bigint;
  deregistered_at: bigint | null;
  owned: bigint;
  holder: string | null;
  expires_at: bigint | null;
  renewed_at: bigint | null;
}

const AGENTS_WITH_LEASES = `
  SELECT a.id, a.labels, a.started_at, a.draining, a.deregistered_at, a.owned, l.holder, l.expires_at, l.renewed_at
    FROM leasehold_fleet_agents a LEFT JOIN leasehold_leases l ON l.name = ? || a.id`;

const isLive = (r: { holder: string | null; expires_at: bigint | null; deregistered_at: bigint | null }, now: number): boolean =>
  r.deregistered_at === null && r.holder !== null && r.expires_at !== null && Number(r.expires_at) > now;

/** An ownership record joined to its owner's record and liveness lease; the first ? is the agent lease prefix. */
const OWNER_SELECT = `
  SELECT o.resource, o.agent, o.generation, o.placed_at, a.id AS agent_id, a.deregistered_at, l.holder, l.expires_at, l.renewed_at
    FROM leasehold_fleet_ownership o
    LEFT JOIN leasehold_fleet_agents a ON a.id = o.agent
    LEFT JOIN leasehold_leases l ON l.name = ? || o.agent`;

interface OwnerSqlRow {
  resource: string;
  agent: string;
  generation: bigint;
  placed_at: bigint;
  agent_id: string | null;
  deregistered_at: bigint | null;
  holder: string | null;
  expires_at: bigint | null;
  renewed_at: bigint | null;
}

function ownerRow(r: OwnerSqlRow, now: number): OwnerRow {
  return {
    resource: r.resource,
    agent: r.agent,
    generation: r.generation,
    placedAtMs: Number(r.placed_at),
    live: r.agent_id !== null && isLive(r, now),
    deregistered: r.deregistered_at !== null,
    deregisteredAtMs: r.deregistered_at === null ? null : Number(r.deregistered_at),
    heartbeatAgeMs: r.renewed_at === null ? null : now - Number(r.renewed_at),
    expiresInMs: r.expires_at === null ? null : Number(r.expires_at) - now,
    storeNowMs: now,
  };
}

/** A placement reads at most this many eligible agents (see pick). */
const PLACEMENT_TIES = 16;

/**
 * The fleet registry in the lease store's SQLite file. Each call is one BEGIN IMMEDIATE
 * transaction (through the store's lock handling), and the store's clock is this host's wall
 * clock read inside it, as for the leases themselves.
 */
export class SqliteFleet implements FleetPort {
  readonly kind = 'sqlite';
  readonly description: string;
  private readonly store: SqliteStore;

  constructor(store: SqliteStore) {
    this.store = store;
    this.description = store.description;
  }

  private run<R>(fn: (db: SqliteDatabaseLike, now: number) => R, options?: CallOptions): Promise<R> {
    return this.store.fleetRun((db) => fn(db, Date.now()), options);
  }

  registerAgent(id: string, labels: Labels, options?: CallOptions): Promise<void> {
    return this.run((db, now) => {
      db.prepare(
        `INSERT INTO leasehold_fleet_agents (id, labels, started_at) VALUES (?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET labels = excluded.labels, started_at = excluded.started_at, deregistered_at = NULL`,
      ).run(id, JSON.stringify(labels), now);
    }, options);
  }

  deregisterAgent(id: string, options?: CallOptions): Promise<void> {
    return this.run((db, now) => {
      db.prepare(`UPDATE leasehold_fleet_agents SET deregistered_at = ? WHERE id = ?`).run(now, id);
    }, options);
  }

  setDraining(id: string, draining: boolean, options?: CallOptions): Promise<boolean> {
    return this.run((db) => db.prepare(`UPDATE leasehold_fleet_agents SET draining = ? WHERE id = ?`).run(draining ? 1 : 0, id).changes > 0, options);
  }

  agents(options?: CallOptions): Promise<AgentRow[]> {
    return this.run((db, now) => {
      const rows = db.prepare(`${AGENTS_WITH_LEASES} ORDER BY a.id`).safeIntegers(true).all(AGENT_LEASE_PREFIX) as (LivenessRow & { started_at: bigint })[];
      return rows.map((r) => ({
        id: r.id,
        labels: JSON.parse(r.labels) as Labels,
        startedAtMs: Number(r.started_at),
        draining: r.draining !== 0n,
        deregistered: r.deregistered_at !== null,
        live: isLive(r, now),
        owned: Number(r.owned),
        heartbeatAgeMs: r.renewed_at === null ? null : now - Number(r.renewed_at),
        expiresInMs: r.expires_at === null ? null : Number(r.expires_at) - now,
        storeNowMs: now,
      }));
    }, options);
  }

  owner(resource: string, options?: CallOptions): Promise<OwnerRow | undefined> {
    return this.run((db, now) => {
      const r = db.prepare(`${OWNER_SELECT} WHERE o.resource = ?`).safeIntegers(true).get(AGENT_LEASE_PREFIX, resource) as OwnerSqlRow | undefined;
      return r === undefined ? undefined : ownerRow(r, now);
    }, options);
  }

  /** One read per page along the primary key (BINARY: byte order); one row more than asked says whether another follows. */
  resources(req: ResourcePageRequest, options?: CallOptions): Promise<ResourcePage> {
    return this.run((db, now) => {
      const found = (
        req.after === undefined
          ? db.prepare(`${OWNER_SELECT} ORDER BY o.resource LIMIT ?`).safeIntegers(true).all(AGENT_LEASE_PREFIX, req.limit + 1)
          : db.prepare(`${OWNER_SELECT} WHERE o.resource > ? ORDER BY o.resource LIMIT ?`).safeIntegers(true).all(AGENT_LEASE_PREFIX, req.after, req.limit + 1)
      ) as OwnerSqlRow[];
      const rows = found.slice(0, req.limit).map((r) => ownerRow(r, now));
      return { rows, next: found.length > req.limit ? rows.at(-1)!.resource : null };
    }, options);
  }

  /**
   * Live, non-draining agents carrying `labels` (or exactly `only`), never `except`: the fewest
   * owned, one at random among the first PLACEMENT_TIES tied. The statement walks the placement
   * index (fewest owned first) and stops there, so its cost does not grow with the fleet (more
   * only when the least loaded agents are dead without having deregistered, or lack the labels).
   */
  private pick(db: SqliteDatabaseLike, now: number, labels: Labels, only: string | null, except: string | null): string | undefined {
    const rows = db
      .prepare(
        `SELECT a.id, a.owned FROM leasehold_fleet_agents a JOIN leasehold_leases l ON l.name = ? || a.id
          WHERE a.deregistered_at IS NULL AND a.draining = 0 AND l.holder IS NOT NULL AND l.expires_at > ?
            AND a.id IS NOT ? AND (? IS NULL OR a.id = ?)
            AND NOT EXISTS (SELECT 1 FROM json_each(?) w
                             WHERE NOT EXISTS (SELECT 1 FROM json_each(a.labels) h WHERE h.key = w.key AND h.value = w.value))
          ORDER BY a.owned, a.id LIMIT ${PLACEMENT_TIES}`,
      )
      .safeIntegers(true)
      .all(AGENT_LEASE_PREFIX, now, except, only, only, only === null ? JSON.stringify(labels) : '{}') as { id: string; owned: bigint }[];
    if (rows.length === 0) return undefined;
    const tied = rows.filter((r) => r.owned === rows[0]!.owned);
    return tied[Math.floor(Math.random() * tied.length)]!.id;
  }

  private nextGeneration(db: SqliteDatabaseLike): bigint {
    db.prepare(`UPDATE leasehold_fleet_generation SET last = last + 1 WHERE id = 1`).run();
    return (db.prepare(`SELECT last FROM leasehold_fleet_generation WHERE id = 1`).safeIntegers(true).get() as { last: bigint }).last;
  }

  place(resource: string, labels: Labels, options?: CallOptions): Promise<PlaceResult> {
    return this.run((db, now): PlaceResult => {
      const cur = db.prepare(`SELECT agent, generation FROM leasehold_fleet_ownership WHERE resource = ?`).safeIntegers(true).get(resource) as
        | { agent: string; generation: bigint }
        | undefined;
      if (cur !== undefined) return { outcome: 'owned', agent: cur.agent, generation: cur.generation };
      const agent = this.pick(db, now, labels, null, null);
      if (agent === undefined) return { outcome: 'no-agent' };
      const generation = this.nextGeneration(db);
      db.prepare(`INSERT INTO leasehold_fleet_ownership (resource, agent, generation, labels, placed_at) VALUES (?, ?, ?, ?, ?)`).run(
        resource,
        agent,
        generation,
        JSON.stringify(labels),
        now,
      );
      db.prepare(`UPDATE leasehold_fleet_agents SET owned = owned + 1 WHERE id = ?`).run(agent);
      return { outcome: 'placed', agent, generation };
    }, options);
  }

  reassign(resource: string, from: string, to: string | null, options?: CallOptions): Promise<ReassignResult> {
    return this.run((db, now): ReassignResult => {
      const cur = db.prepare(`SELECT agent, labels FROM leasehold_fleet_ownership WHERE resource = ?`).get(resource) as { agent: string; labels: string } | undefined;
      if (cur === undefined || cur.agent !== from) return { outcome: 'owner-changed', owner: cur?.agent ?? null };
      const agent = this.pick(db, now, JSON.parse(cur.labels) as Labels, to, from);
      if (agent === undefined) return { outcome: 'no-agent' };
      const generation = this.nextGeneration(db);
      db.prepare(`UPDATE leasehold_fleet_ownership SET agent = ?, generation = ?, placed_at = ? WHERE resource = ?`).run(agent, generation, now, resource);
      db.prepare(`UPDATE leasehold_fleet_agents SET owned = owned - 1 WHERE id = ?`).run(from);
      db.prepare(`UPDATE leasehold_fleet_agents SET owned = owned + 1 WHERE id = ?`).run(agent);
      return { outcome: 'moved', agent, generation };
    }, options);
  }

  remove(resource: string, from: string, options?: CallOptions): Promise<boolean> {
    return this.run((db) => {
      if (db.prepare(`DELETE FROM leasehold_fleet_ownership WHERE resource = ? AND agent = ?`).run(resource, from).changes === 0) return false;
      db.prepare(`UPDATE leasehold_fleet_agents SET owned = owned - 1 WHERE id = ?`).run(from);
      return true;
    }, options);
  }

  /** One transaction per batch (see FleetPort.prune). */
  prune(req: FleetPruneRequest, options?: CallOptions): Promise<FleetPruneResult> {
    return this.run((db, now) => {
      const horizon = now - req.olderThanMs;
      const victims = db
        .prepare(
          `SELECT o.resource, o.agent FROM leasehold_fleet_ownership o JOIN leasehold_fleet_agents a ON a.id = o.agent
            WHERE a.deregistered_at < ? LIMIT ?`,
        )
        .all(horizon, req.limit) as { resource: string; agent: string }[];
      const del = db.prepare(`DELETE FROM leasehold_fleet_ownership WHERE resource = ? AND agent = ?`);
      const dec = db.prepare(`UPDATE leasehold_fleet_agents SET owned = owned - 1 WHERE id = ?`);
      for (const v of victims) if (del.run(v.resource, v.agent).changes > 0) dec.run(v.agent);
      const ownership = victims.length;
      if (ownership >= req.limit) return { ownership, agents: 0, more: true };
      const agents = db
        .prepare(
          `DELETE FROM leasehold_fleet_agents WHERE id IN (SELECT a.id FROM leasehold_fleet_agents a WHERE a.deregistered_at < ?
             AND NOT EXISTS (SELECT 1 FROM leasehold_fleet_ownership o WHERE o.agent = a.id) LIMIT ?)`,
        )
        .run(horizon, req.limit - ownership).changes;
      return { ownership, agents, more: ownership + agents >= req.limit };
    }, options);
  }

  /** The database is the lease store's: closing the fleet leaves it to the store's owner. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
