/**
 * The fleet registry in MySQL / MariaDB, on the lease store's own connections.
 *
 * As for a claim (./claim.ts), every call that changes ownership is one multi-statement batch
 * the server runs back to back: a transaction that reads, picks and writes through user
 * variables, each write conditional on what was read under lock. No lock is held across a round
 * trip to the client, so a frozen process holds nothing up.
 *
 * Placements and reassignments lock the one generation counter row first: they take turns
 * (microseconds each), so two placements of one resource cannot both see it unowned, and the
 * owned counts they keep never race. An agent is live while its lease `agent/<id>` has a holder
 * and an expiry after the server's clock, and it has not deregistered.
 */
import type { CallOptions } from '../../core/port.js';
import { AGENT_LEASE_PREFIX, type AgentRow, type FleetPort, type FleetPruneRequest, type FleetPruneResult, type Labels, type OwnerRow, type PlaceResult, type ReassignResult, type ResourcePage, type ResourcePageRequest } from '../../fleet/port.js';
import { runBatch } from './batch.js';
import { NOW_US, T } from './schema.js';
import type { MysqlStore } from './store.js';

const AGENTS = 'leasehold_fleet_agents';
const OWNERSHIP = 'leasehold_fleet_ownership';
const GENERATION = 'leasehold_fleet_generation';


/** The last result of a batch: its closing SELECT of the user variables. */
function last<R>(results: unknown[]): R {
  return (results[results.length - 1] as R[])[0]!;
}

const ms = (us: string | null | undefined): number | null => (us == null ? null : Number(us) / 1000);

/** MariaDB's JSON is LONGTEXT and comes back as text; MySQL 8's comes back parsed. */
const labelsOf = (v: unknown): Labels => (typeof v === 'string' ? (JSON.parse(v) as Labels) : (v as Labels));

interface Liveness {
  deregistered_at_us: string | null;
  holder: string | null;
  renewed_at_us: string | null;
  expires_at_us: string | null;
  now_us: string;
}

function liveness(r: Liveness): { live: boolean; heartbeatAgeMs: number | null; expiresInMs: number | null; storeNowMs: number } {
  const now = Number(r.now_us) / 1000;
  const renewed = ms(r.renewed_at_us);
  const expires = ms(r.expires_at_us);
  return {
    live: r.deregistered_at_us === null && r.holder !== null && expires !== null && expires > now,
    heartbeatAgeMs: renewed === null ? null : now - renewed,
    expiresInMs: expires === null ? null : expires - now,
    storeNowMs: now,
  };
}

/** An ownership record joined to its owner's record and liveness lease; the first ? is the agent lease prefix. */
const OWNER_SELECT = `SELECT o.resource, o.agent, o.generation, o.placed_at_us, a.id AS agent_id, a.deregistered_at_us, l.holder, l.renewed_at_us, l.expires_at_us, ${NOW_US} AS now_us
     FROM ${OWNERSHIP} o
     LEFT JOIN ${AGENTS} a ON a.id = o.agent
     LEFT JOIN ${T.leases} l ON l.name = CONCAT(?, o.agent)`;

type OwnerSqlRow = Liveness & { resource: string; agent: string; generation: string; placed_at_us: string; agent_id: string | null };

function ownerRow(r: OwnerSqlRow): OwnerRow {
  const l = liveness(r);
  return {
    resource: r.resource,
    agent: r.agent,
    generation: BigInt(r.generation),
    placedAtMs: Number(r.placed_at_us) / 1000,
    ...l,
    live: r.agent_id !== null && l.live,
    deregistered: r.deregistered_at_us !== null,
    deregisteredAtMs: ms(r.deregistered_at_us),
  };
}

/**
 * A placement reads at most this many eligible agents, fewest owned first (the index of
 * sql/004-placement-index.ts), and picks at random among those tied at the fewest: a bounded
 * cost whatever the fleet's size, and ties still spread.
 */
const PLACEMENT_TIES = 16;
const PLACEMENT_INDEX = 'leasehold_fleet_agents_placement';

/** Agent `a` is live by lease `l` at @lf_now. */
const LIVE = `(a.deregistered_at_us IS NULL AND l.holder IS NOT NULL AND l.expires_at_us > @lf_now)`;

/**
 * A new generation, with the counter row locked into @lf_glast: above every one issued, the
 * token floor (migrate --min-token raises the counter), and the server's clock in microseconds,
 * which keeps generations above those of a primary lost in an asynchronous failover as tokens
 * are (./claim.ts, TOKENS). A counter row someone deleted leaves the clock and `floorVar`.
 */
const nextGeneration = (floorVar: string): string => `GREATEST(COALESCE(@lf_glast, 0) + 1, COALESCE(${floorVar}, 0) + 1, @lf_now)`;

export class MysqlFleet implements FleetPort {
  readonly kind = 'mysql';
  readonly description: string;
  private readonly store: MysqlStore;

  private constructor(store: MysqlStore) {
    this.store = store;
    this.description = store.description;
  }

  /** The fleet beside `store`'s leases (tables from `leasehold migrate`, schema version 3+). */
  static forStore(store: MysqlStore): Promise<MysqlFleet> {
    return Promise.resolve(new MysqlFleet(store));
  }

  async registerAgent(id: string, labels: Labels, options?: CallOptions): Promise<void> {
    await this.store.q(
      `INSERT INTO ${AGENTS} (id, labels, started_at_us) VALUES (?, ?, ${NOW_US})
       ON DUPLICATE KEY UPDATE labels = VALUES(labels), started_at_us = VALUES(started_at_us), deregistered_at_us = NULL`,
      [id, JSON.stringify(labels)],
      options,
    );
  }

  async deregisterAgent(id: string, options?: CallOptions): Promise<void> {
    await this.store.q(`UPDATE ${AGENTS} SET deregistered_at_us = ${NOW_US} WHERE id = ?`, [id], options);
  }

  async setDraining(id: string, draining: boolean, options?: CallOptions): Promise<boolean> {
    // Whether a row exists, not whether it changed: draining a draining agent is still a yes.
    const r = (await this.store.q(`UPDATE ${AGENTS} SET draining = ? WHERE id = ?; SELECT COUNT(*) AS n FROM ${AGENTS} WHERE id = ?`, [draining, id, id], options)) as unknown[];
    return Number(last<{ n: number | string }>(r).n) > 0;
  }

  async agents(options?: CallOptions): Promise<AgentRow[]> {
    const rows = (await this.store.q(
      `SELECT a.id, a.labels, a.started_at_us, a.draining, a.deregistered_at_us, a.owned, l.holder, l.renewed_at_us, l.expires_at_us, ${NOW_US} AS now_us
         FROM ${AGENTS} a LEFT JOIN ${T.leases} l ON l.name = CONCAT(?, a.id)
        ORDER BY a.id`,
      [AGENT_LEASE_PREFIX],
      options,
    )) as (Liveness & { id: string; labels: unknown; started_at_us: string; draining: number; owned: string })[];
    return rows.map((r) => ({
      id: r.id,
      labels: labelsOf(r.labels),
      startedAtMs: Number(r.started_at_us) / 1000,
      draining: Number(r.draining) !== 0,
      deregistered: r.deregistered_at_us !== null,
      owned: Number(r.owned),
      ...liveness(r),
    }));
  }

  async owner(resource: string, options?: CallOptions): Promise<OwnerRow | undefined> {
    const rows = (await this.store.q(`${OWNER_SELECT} WHERE o.resource = ?`, [AGENT_LEASE_PREFIX, resource], options)) as OwnerSqlRow[];
    const r = rows[0];
    return r === undefined ? undefined : ownerRow(r);
  }

  /** One statement per page along the primary key (utf8mb4_bin: code point order); one row more than asked says whether another follows. */
  async resources(req: ResourcePageRequest, options?: CallOptions): Promise<ResourcePage> {
    const found = (
      req.after === undefined
        ? await this.store.q(`${OWNER_SELECT} ORDER BY o.resource LIMIT ?`, [AGENT_LEASE_PREFIX, req.limit + 1], options)
        : await this.store.q(`${OWNER_SELECT} WHERE o.resource > ? ORDER BY o.resource LIMIT ?`, [AGENT_LEASE_PREFIX, req.after, req.limit + 1], options)
    ) as OwnerSqlRow[];
    const rows = found.slice(0, req.limit).map(ownerRow);
    return { rows, next: found.length > req.limit ? rows.at(-1)!.resource : null };
  }

  /**
   * One batch: lock the counter, read the owner on record (every placement of it committed
   * before the lock was granted, so it is visible), and only when there is none pick a live,
   * non-draining agent carrying the labels (fewest owned, random ties among the first
   * PLACEMENT_TIES) and record it.
   */
  async place(resource: string, labels: Labels, options?: CallOptions): Promise<PlaceResult> {
    return this.withPlacementIndex(() => this.placeOnce(resource, labels, options));
  }

  /**
   * The optimizer left to itself sorts every agent (a full scan and a filesort); the hint makes
   * it walk the placement index in order and stop early. A database still at schema version 3
   * has no such index (errno 1176): place without the hint, as that version did, rather than
   * fail every placement until `migrate` runs.
   */
  private placementHint = `FORCE INDEX (${PLACEMENT_INDEX})`;

  private async withPlacementIndex<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      const errno = (e: unknown): unknown => (e as { errno?: unknown } | undefined)?.errno;
      if (this.placementHint === '' || (errno(err) !== 1176 && errno((err as { cause?: unknown }).cause) !== 1176)) throw err;
      this.placementHint = '';
      return fn();
    }
  }

  private async placeOnce(resource: string, labels: Labels, options?: CallOptions): Promise<PlaceResult> {
    const want = JSON.stringify(labels);
    const r = await runBatch(
      this.store,
      [
        'SET @lf_glast = NULL, @lf_owner = NULL, @lf_ogen = NULL, @lf_agent = NULL, @lf_gen = NULL',
        'START TRANSACTION',
        `SELECT last INTO @lf_glast FROM ${GENERATION} WHERE id = 1 FOR UPDATE`,
        // The clock is read after the lock: a wait for it must not make a lapsed agent look live.
        `SET @lf_now = ${NOW_US}`,
        `SELECT agent, generation INTO @lf_owner, @lf_ogen FROM ${OWNERSHIP} WHERE resource = ?`,
        `SELECT c.id INTO @lf_agent FROM (
           SELECT a.id, a.owned FROM ${AGENTS} a ${this.placementHint} JOIN ${T.leases} l ON l.name = CONCAT(?, a.id)
            WHERE @lf_owner IS NULL AND ${LIVE} AND NOT a.draining AND JSON_CONTAINS(a.labels, ?)
            ORDER BY a.owned, a.id LIMIT ${PLACEMENT_TIES}) c
          ORDER BY c.owned, RAND() LIMIT 1`,
        `SET @lf_gen = IF(@lf_agent IS NULL, NULL, ${nextGeneration('NULL')})`,
        `UPDATE ${GENERATION} SET last = @lf_gen WHERE id = 1 AND @lf_gen IS NOT NULL`,
        `INSERT INTO ${OWNERSHIP} (resource, agent, generation, labels, placed_at_us) SELECT ?, @lf_agent, @lf_gen, ?, @lf_now FROM DUAL WHERE @lf_agent IS NOT NULL`,
        `UPDATE ${AGENTS} SET owned = owned + 1 WHERE id = @lf_agent`,
        'COMMIT',
        'SELECT @lf_owner AS owner, @lf_ogen AS ogen, @lf_agent AS agent, @lf_gen AS gen',
      ].join(';\n'),
      [resource, AGENT_LEASE_PREFIX, want, resource, want],
      options,
    );
    const row = last<{ owner: string | null; ogen: string | null; agent: string | null; gen: string | null }>(r);
    if (row.owner !== null) return { outcome: 'owned', agent: row.owner, generation: BigInt(row.ogen!) };
    if (row.agent === null) return { outcome: 'no-agent' };
    return { outcome: 'placed', agent: row.agent, generation: BigInt(row.gen!) };
  }

  async reassign(resource: string, from: string, to: string | null, options?: CallOptions): Promise<ReassignResult> {
    const r = await runBatch(
      this.store,
      [
        'SET @lf_glast = NULL, @lf_cur = NULL, @lf_labels = NULL, @lf_cgen = NULL, @lf_agent = NULL, @lf_gen = NULL',
        'START TRANSACTION',
        `SELECT last INTO @lf_glast FROM ${GENERATION} WHERE id = 1 FOR UPDATE`,
        `SET @lf_now = ${NOW_US}`,
        `SELECT agent, labels, generation INTO @lf_cur, @lf_labels, @lf_cgen FROM ${OWNERSHIP} WHERE resource = ? FOR UPDATE`,
        `SELECT a.id INTO @lf_agent FROM ${AGENTS} a JOIN ${T.leases} l ON l.name = CONCAT(?, a.id)
          WHERE @lf_cur = ? AND a.id <> @lf_cur AND ${LIVE} AND NOT a.draining
            AND IF(? IS NULL, JSON_CONTAINS(a.labels, @lf_labels), a.id = ?)
          ORDER BY a.owned, RAND() LIMIT 1`,
        `SET @lf_gen = IF(@lf_agent IS NULL, NULL, ${nextGeneration('@lf_cgen')})`,
        `UPDATE ${GENERATION} SET last = @lf_gen WHERE id = 1 AND @lf_gen IS NOT NULL`,
        `UPDATE ${OWNERSHIP} SET agent = @lf_agent, generation = @lf_gen, placed_at_us = @lf_now WHERE resource = ? AND @lf_agent IS NOT NULL`,
        `UPDATE ${AGENTS} SET owned = owned - 1 WHERE id = @lf_cur AND @lf_agent IS NOT NULL`,
        `UPDATE ${AGENTS} SET owned = owned + 1 WHERE id = @lf_agent`,
        'COMMIT',
        'SELECT @lf_cur AS cur, @lf_agent AS agent, @lf_gen AS gen',
      ].join(';\n'),
      [resource, AGENT_LEASE_PREFIX, from, to, to, resource],
      options,
    );
    const row = last<{ cur: string | null; agent: string | null; gen: string | null }>(r);
    if (row.agent !== null) return { outcome: 'moved', agent: row.agent, generation: BigInt(row.gen!) };
    return row.cur !== from ? { outcome: 'owner-changed', owner: row.cur } : { outcome: 'no-agent' };
  }

  async remove(resource: string, from: string, options?: CallOptions): Promise<boolean> {
    const r = await runBatch(
      this.store,
      [
        'START TRANSACTION',
        `DELETE FROM ${OWNERSHIP} WHERE resource = ? AND agent = ?`,
        'SET @lf_removed = ROW_COUNT()',
        `UPDATE ${AGENTS} SET owned = owned - 1 WHERE id = ? AND @lf_removed > 0`,
        'COMMIT',
        'SELECT @lf_removed AS n',
      ].join(';\n'),
      [resource, from, from],
      options,
    );
    return Number(last<{ n: number | string }>(r).n) > 0;
  }

  /**
   * The candidates read without locks, then each removed by the batch remove() uses, re-checked
   * there: a record a reassign moved, or whose agent registered again, in between stays. Fleet
   * records are few beside slot rows, so one short transaction per record is no burden.
   */
  async prune(req: FleetPruneRequest, options?: CallOptions): Promise<FleetPruneResult> {
    const gone = `deregistered_at_us < ${NOW_US} - ?`;
    const victims = (await this.store.q(
      `SELECT o.resource, o.agent FROM ${OWNERSHIP} o JOIN ${AGENTS} a ON a.id = o.agent WHERE a.${gone} LIMIT ?`,
      [req.olderThanMs * 1000, req.limit],
      options,
    )) as { resource: string; agent: string }[];
    let ownership = 0;
    for (const v of victims) {
      const r = await runBatch(
        this.store,
        [
          'START TRANSACTION',
          `DELETE FROM ${OWNERSHIP} WHERE resource = ? AND agent = ? AND agent IN (SELECT id FROM ${AGENTS} WHERE ${gone})`,
          'SET @lf_removed = ROW_COUNT()',
          `UPDATE ${AGENTS} SET owned = owned - 1 WHERE id = ? AND @lf_removed > 0`,
          'COMMIT',
          'SELECT @lf_removed AS n',
        ].join(';\n'),
        [v.resource, v.agent, req.olderThanMs * 1000, v.agent],
        options,
      );
      ownership += Number(last<{ n: number | string }>(r).n);
    }
    if (victims.length >= req.limit) return { ownership, agents: 0, more: true };
    const d = (await this.store.q(
      `DELETE FROM ${AGENTS} WHERE ${gone} AND NOT EXISTS (SELECT 1 FROM ${OWNERSHIP} o WHERE o.agent = ${AGENTS}.id) LIMIT ?`,
      [req.olderThanMs * 1000, req.limit - victims.length],
      options,
    )) as { affectedRows: number };
    return { ownership, agents: d.affectedRows, more: victims.length + d.affectedRows >= req.limit };
  }

  /** The connections are the lease store's: closing the fleet leaves them to the store's owner. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
