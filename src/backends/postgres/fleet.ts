import { StoreUnavailableError } from '../../core/errors.js';
import type { CallOptions } from '../../core/port.js';
import { AGENT_LEASE_PREFIX, type AgentRow, type FleetPort, type FleetPruneRequest, type FleetPruneResult, type Labels, type OwnerRow, type PlaceResult, type ReassignResult, type ResourcePage, type ResourcePageRequest } from '../../fleet/port.js';
import type { PostgresStore } from './store.js';

const ms = (col: string): string => `(extract(epoch FROM ${col}) * 1000)::float8`;

function ownerRow(row: Record<string, unknown>): OwnerRow {
  const now = row['now_ms'] as number;
  const renewed = row['renewed_ms'] as number | null;
  const expires = row['expires_ms'] as number | null;
  return {
    resource: row['resource'] as string,
    agent: row['agent'] as string,
    generation: BigInt(row['generation'] as string),
    placedAtMs: row['placed_ms'] as number,
    live: row['live'] as boolean,
    deregistered: row['deregistered'] as boolean,
    deregisteredAtMs: (row['deregistered_ms'] as number | null) ?? null,
    heartbeatAgeMs: renewed === null ? null : now - renewed,
    expiresInMs: expires === null ? null : expires - now,
    storeNowMs: now,
  };
}

/**
 * The fleet registry in PostgreSQL, on the lease store's own pool. Each call is one statement,
 * judged by this database's now(): an agent is live while its lease `agent/<id>` has a holder and
 * an expiry after now(), and it has not deregistered.
 */
/**
 * A placement reads at most this many eligible agents, fewest owned first (by the index of
 * sql/008-placement-index.ts), and picks at random among those tied at the fewest: a bounded
 * cost whatever the fleet's size, and ties spread (a resource placed and removed over and over
 * does not land on one agent every time).
 */
const PLACEMENT_TIES = 16;

/**
 * `walk`: the agents that can take work (not deregistered, not draining) in the order of the
 * placement index (owned, id), one index probe per agent, as far as the statement reads it.
 *
 * A plain `ORDER BY a.owned, a.id LIMIT n` over the agents joined to their leases left the order
 * to the planner, and without fresh statistics (a fleet registered since the last ANALYZE, as in
 * the bench) it estimated one row and chose to read every agent and lease and sort them: 48 ms
 * at 10,000 agents in EXPLAIN (ANALYZE), 0.1 ms once analysed. Here each step is a LIMIT 1 on the
 * index's own order from the last key, which no estimate makes a sort cheaper than, and the
 * liveness lookup (`liveOf`) is a subquery per walked agent, not a join the planner could turn
 * into a scan of every lease. The caller's LIMIT stops the walk: EXPLAIN (ANALYZE) reads 16
 * agents and 16 leases (0.3 ms) at 10,000 agents, analysed or not.
 */
const walk = (s: string): string =>
  `walk AS (
     (SELECT a.owned, a.id, a.labels, a.deregistered_at FROM ${s}.fleet_agents a
       WHERE a.deregistered_at IS NULL AND NOT a.draining ORDER BY a.owned, a.id LIMIT 1)
     UNION ALL
     SELECT n.* FROM walk w, LATERAL (
       SELECT a.owned, a.id, a.labels, a.deregistered_at FROM ${s}.fleet_agents a
        WHERE a.deregistered_at IS NULL AND NOT a.draining AND (a.owned, a.id) > (w.owned, w.id)
        ORDER BY a.owned, a.id LIMIT 1) n)`;

export class PostgresFleet implements FleetPort {
  readonly kind = 'postgres';
  readonly description: string;
  private readonly store: PostgresStore;
  private readonly s: string;

  private constructor(store: PostgresStore) {
    this.store = store;
    this.s = `"${store.schema}"`;
    this.description = store.description;
  }

  /** The fleet beside `store`'s leases (tables from `leasehold migrate`, schema version 4+). */
  static forStore(store: PostgresStore): Promise<PostgresFleet> {
    return Promise.resolve(new PostgresFleet(store));
  }

  private q(text: string, values: unknown[], options?: CallOptions): Promise<{ rows: Record<string, unknown>[] }> {
    return this.store.fleetQuery(text, values, options);
  }

  /**
   * A new generation: the sequence's next value above this timeline's token floor (see
   * sql/005-timeline-tokens.ts). A standby promoted after an asynchronous failover has a copy of the
   * sequence that can be behind the old primary's (it logs 32 values ahead, and the last WAL may
   * be lost), so the sequence alone could issue a generation again; on the new timeline every
   * generation is above every one the old timeline can have issued.
   */
  private get nextGeneration(): string {
    return `(${this.s}.timeline_token_floor() + nextval('${this.s}.fleet_generation'))`;
  }

  /**
   * The liveness test of agent `a` joined with lease `l`, by this statement's now(). An agent whose
   * lease is tied to a session (liveness 'session', recorded on this server instance) is dead as
   * soon as that session is gone, as a contender's claim would find it: its term is over, only
   * not yet ended in the row.
   */
  private get live(): string {
    return (
      `(a.id IS NOT NULL AND a.deregistered_at IS NULL AND l.holder IS NOT NULL AND l.expires_at > now() ` +
      `AND (l.session_pid IS NULL OR l.session_server IS DISTINCT FROM pg_postmaster_start_time() OR ${this.s}.session_alive(l.name, l.session_pid)))`
    );
  }

  /** The same test for agent `a` as one lookup of its lease (`prefix` the parameter holding AGENT_LEASE_PREFIX): false when it has none. */
  private liveOf(prefix: string): string {
    return `coalesce((SELECT ${this.live} FROM ${this.s}.leases l WHERE l.name = ${prefix} || a.id), false)`;
  }

  async registerAgent(id: string, labels: Labels, options?: CallOptions): Promise<void> {
    await this.q(
      `INSERT INTO ${this.s}.fleet_agents AS a (id, labels, started_at) VALUES ($1, $2::jsonb, now())
       ON CONFLICT (id) DO UPDATE SET labels = excluded.labels, started_at = excluded.started_at, deregistered_at = NULL`,
      [id, JSON.stringify(labels)],
      options,
    );
  }

  async deregisterAgent(id: string, options?: CallOptions): Promise<void> {
    await this.q(`UPDATE ${this.s}.fleet_agents SET deregistered_at = now() WHERE id = $1`, [id], options);
  }

  async setDraining(id: string, draining: boolean, options?: CallOptions): Promise<boolean> {
    const r = await this.q(`UPDATE ${this.s}.fleet_agents SET draining = $2 WHERE id = $1 RETURNING id`, [id, draining], options);
    return r.rows.length > 0;
  }

  async agents(options?: CallOptions): Promise<AgentRow[]> {
    const r = await this.q(
      `SELECT a.id, a.labels, ${ms('a.started_at')} AS started_ms, a.draining, a.deregistered_at IS NOT NULL AS deregistered,
              a.owned, ${this.live} AS live, ${ms('l.renewed_at')} AS renewed_ms, ${ms('l.expires_at')} AS expires_ms, ${ms('now()')} AS now_ms
         FROM ${this.s}.fleet_agents a LEFT JOIN ${this.s}.leases l ON l.name = $1 || a.id
        ORDER BY a.id`,
      [AGENT_LEASE_PREFIX],
      options,
    );
    return r.rows.map((row) => {
      const now = row['now_ms'] as number;
      const renewed = row['renewed_ms'] as number | null;
      const expires = row['expires_ms'] as number | null;
      return {
        id: row['id'] as string,
        labels: row['labels'] as Labels,
        startedAtMs: row['started_ms'] as number,
        draining: row['draining'] as boolean,
        deregistered: row['deregistered'] as boolean,
        live: row['live'] as boolean,
        owned: Number(row['owned']),
        heartbeatAgeMs: renewed === null ? null : now - renewed,
        expiresInMs: expires === null ? null : expires - now,
        storeNowMs: now,
      };
    });
  }

  /** The ownership columns joined to the owner's record and liveness lease, by this statement's now(). $1 is the agent lease prefix. */
  private get ownerSelect(): string {
    return `SELECT o.resource, o.agent, o.generation, ${ms('o.placed_at')} AS placed_ms, a.deregistered_at IS NOT NULL AS deregistered,
              ${ms('a.deregistered_at')} AS deregistered_ms, ${this.live} AS live,
              ${ms('l.renewed_at')} AS renewed_ms, ${ms('l.expires_at')} AS expires_ms, ${ms('now()')} AS now_ms
         FROM ${this.s}.fleet_ownership o
         LEFT JOIN ${this.s}.fleet_agents a ON a.id = o.agent
         LEFT JOIN ${this.s}.leases l ON l.name = $1 || o.agent`;
  }

  async owner(resource: string, options?: CallOptions): Promise<OwnerRow | undefined> {
    const r = await this.q(`${this.ownerSelect} WHERE o.resource = $2`, [AGENT_LEASE_PREFIX, resource], options);
    const row = r.rows[0];
    return row === undefined ? undefined : ownerRow(row);
  }

  /**
   * One statement per page, walking the primary key from `after` (so a page costs the same
   * wherever it starts); one row more than asked tells whether another page follows.
   */
  async resources(req: ResourcePageRequest, options?: CallOptions): Promise<ResourcePage> {
    // Two texts rather than `$2 IS NULL OR ...`, which a generic plan cannot answer from the index.
    const r =
      req.after === undefined
        ? await this.q(`${this.ownerSelect} ORDER BY o.resource LIMIT $2`, [AGENT_LEASE_PREFIX, req.limit + 1], options)
        : await this.q(`${this.ownerSelect} WHERE o.resource > $2 ORDER BY o.resource LIMIT $3`, [AGENT_LEASE_PREFIX, req.after, req.limit + 1], options);
    const rows = r.rows.slice(0, req.limit).map(ownerRow);
    return { rows, next: r.rows.length > req.limit ? rows.at(-1)!.resource : null };
  }

  /**
   * One statement: the candidates (live by now(), not draining, labels contained), the pick
   * (fewest owned, random ties among the first PLACEMENT_TIES, read by \`walk\` in the order of
   * sql/008-placement-index.ts), the insert (which does nothing if the resource is owned) and
   * the owner count. When the insert lost a race with a concurrent placement of the same
   * resource, the statement's snapshot shows neither row: ask again, the winner is then visible.
   */
  async place(resource: string, labels: Labels, options?: CallOptions): Promise<PlaceResult> {
    for (let attempt = 0; ; attempt++) {
      const r = await this.q(
        `WITH RECURSIVE ${walk(this.s)},
         cand AS (
           SELECT c.id FROM (
             SELECT a.id, a.owned FROM walk a WHERE a.labels @> $2::jsonb AND ${this.liveOf('$3')} LIMIT ${PLACEMENT_TIES}) c
            ORDER BY c.owned, random() LIMIT 1),
         ins AS (
           INSERT INTO ${this.s}.fleet_ownership (resource, agent, generation, labels, placed_at)
           SELECT $1, cand.id, ${this.nextGeneration}, $2::jsonb, now() FROM cand
           ON CONFLICT (resource) DO NOTHING
           RETURNING agent, generation),
         bump AS (UPDATE ${this.s}.fleet_agents a SET owned = a.owned + 1 FROM ins WHERE a.id = ins.agent)
         SELECT 'placed' AS outcome, agent, generation FROM ins
         UNION ALL
         SELECT 'owned', o.agent, o.generation FROM ${this.s}.fleet_ownership o WHERE o.resource = $1
         UNION ALL
         SELECT 'no-agent', NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM cand)`,
        [resource, JSON.stringify(labels), AGENT_LEASE_PREFIX],
        options,
      );
      const rows = r.rows;
      const pick = rows.find((x) => x['outcome'] === 'placed') ?? rows.find((x) => x['outcome'] === 'owned') ?? rows[0];
      if (pick !== undefined) {
        const outcome = pick['outcome'] as PlaceResult['outcome'];
        if (outcome === 'no-agent') return { outcome };
        return { outcome, agent: pick['agent'] as string, generation: BigInt(pick['generation'] as string) };
      }
      if (attempt >= 3) throw new StoreUnavailableError(`placing "${resource}" raced with concurrent placements of it ${attempt + 1} times; this is retryable`);
    }
  }

  /**
   * One statement. To a named agent: that agent, if live, not draining. To any: the fewest
   * owned that is live, not draining and carries the resource's labels, ties at random among
   * the first PLACEMENT_TIES, walked as place() walks them (`walk`).
   */
  async reassign(resource: string, from: string, to: string | null, options?: CallOptions): Promise<ReassignResult> {
    const cand =
      to === null
        ? // The owner test reads no walked column, so it gates the walk (a one-time filter): an
          // owner changed or gone reads no agent, rather than every agent for labels of NULL.
          `cand AS (
             SELECT c.id FROM (
               SELECT a.id, a.owned FROM walk a
                WHERE $3::text IS NULL AND (SELECT agent FROM cur) = $2 AND a.id <> $2 AND a.labels @> (SELECT labels FROM cur) AND ${this.liveOf('$4')}
                LIMIT ${PLACEMENT_TIES}) c
              ORDER BY c.owned, random() LIMIT 1)`
        : `cand AS (
             SELECT a.id FROM cur, ${this.s}.fleet_agents a JOIN ${this.s}.leases l ON l.name = $4 || a.id
              WHERE cur.agent = $2 AND a.id <> cur.agent AND a.id = $3 AND ${this.live} AND NOT a.draining)`;
    const r = await this.q(
      `WITH RECURSIVE cur AS (
         SELECT resource, agent, labels FROM ${this.s}.fleet_ownership WHERE resource = $1 FOR UPDATE),
       ${to === null ? `${walk(this.s)},` : ''}
       ${cand},
       upd AS (
         UPDATE ${this.s}.fleet_ownership o
            SET agent = cand.id, generation = ${this.nextGeneration}, placed_at = now()
           FROM cand WHERE o.resource = $1
         RETURNING o.agent, o.generation),
       dec AS (UPDATE ${this.s}.fleet_agents SET owned = owned - 1 WHERE id = $2 AND EXISTS (SELECT 1 FROM upd)),
       inc AS (UPDATE ${this.s}.fleet_agents a SET owned = a.owned + 1 FROM upd WHERE a.id = upd.agent)
       SELECT (SELECT agent FROM cur) AS cur_agent, upd.agent, upd.generation FROM (SELECT 1) one LEFT JOIN upd ON true`,
      // Both texts read $3 (the walk's as its gate, `$3::text IS NULL`): an unread parameter has no type.
      [resource, from, to, AGENT_LEASE_PREFIX],
      options,
    );
    const row = r.rows[0]!;
    if (row['agent'] != null) return { outcome: 'moved', agent: row['agent'] as string, generation: BigInt(row['generation'] as string) };
    const cur = (row['cur_agent'] as string | null) ?? null;
    return cur !== from ? { outcome: 'owner-changed', owner: cur } : { outcome: 'no-agent' };
  }

  async remove(resource: string, from: string, options?: CallOptions): Promise<boolean> {
    const r = await this.q(
      `WITH del AS (DELETE FROM ${this.s}.fleet_ownership WHERE resource = $1 AND agent = $2 RETURNING agent),
       dec AS (UPDATE ${this.s}.fleet_agents a SET owned = a.owned - 1 FROM del WHERE a.id = del.agent)
       SELECT count(*)::int AS n FROM del`,
      [resource, from],
      options,
    );
    return (r.rows[0]?.['n'] as number) > 0;
  }

  /**
   * One statement per batch. A row a concurrent call changes (a reassign, a re-registration) is
   * re-checked against the condition after its lock and left alone if it no longer holds.
   */
  async prune(req: FleetPruneRequest, options?: CallOptions): Promise<FleetPruneResult> {
    const gone = `deregistered_at < now() - $1::float8 * interval '1 millisecond'`;
    const own = await this.q(
      `WITH gone AS (SELECT id FROM ${this.s}.fleet_agents WHERE ${gone}),
       v AS (SELECT resource FROM ${this.s}.fleet_ownership WHERE agent IN (SELECT id FROM gone) LIMIT $2),
       del AS (DELETE FROM ${this.s}.fleet_ownership o USING v WHERE o.resource = v.resource AND o.agent IN (SELECT id FROM gone) RETURNING o.agent),
       dec AS (UPDATE ${this.s}.fleet_agents a SET owned = a.owned - c.n FROM (SELECT agent, count(*) AS n FROM del GROUP BY agent) c WHERE a.id = c.agent)
       SELECT count(*)::int AS n FROM del`,
      [req.olderThanMs, req.limit],
      options,
    );
    const ownership = Number(own.rows[0]!['n']);
    if (ownership >= req.limit) return { ownership, agents: 0, more: true };
    const ag = await this.q(
      `WITH d AS (DELETE FROM ${this.s}.fleet_agents a WHERE a.${gone} AND NOT EXISTS (SELECT 1 FROM ${this.s}.fleet_ownership o WHERE o.agent = a.id)
          AND a.id IN (SELECT x.id FROM ${this.s}.fleet_agents x WHERE x.${gone}
                        AND NOT EXISTS (SELECT 1 FROM ${this.s}.fleet_ownership o WHERE o.agent = x.id) LIMIT $2) RETURNING 1)
       SELECT count(*)::int AS n FROM d`,
      [req.olderThanMs, req.limit - ownership],
      options,
    );
    const agents = Number(ag.rows[0]!['n']);
    return { ownership, agents, more: ownership + agents >= req.limit };
  }

  /** The pool is the lease store's: closing the fleet leaves it to the store's owner. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
