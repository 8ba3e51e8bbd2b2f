/**
 * PostgreSQL placement reads a bounded number of agents, whatever the fleet's size and whether
 * or not the planner has statistics (issue 34). The statement used to leave the order to the
 * planner, which, for a fleet registered since the last ANALYZE (the bench's, any new one),
 * read every agent and its lease and sorted them: 26-48 ms at 10,000 agents.
 *
 * The count is of rows, not time: each place() statement is captured as sent, and run again
 * under EXPLAIN (ANALYZE) in a transaction rolled back; the rows its scans of fleet_agents and
 * leases produce or filter out are summed. The bound follows from the rule: at most
 * PLACEMENT_TIES (16) agents walked while each one walked is eligible, one lease each, and the
 * owned count's update of the chosen one; with every other agent carrying the labels asked for,
 * twice the agents.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { PostgresFleet } from '../../src/backends/postgres/fleet.js';
import { AGENT_LEASE_PREFIX } from '../../src/fleet/port.js';
import { makeTestStore, selectedStores, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

const TIES = 16;
/** Far over any bound below: a scan of the fleet cannot pass for a walk. */
const AGENTS = 2000;

interface PlanNode {
  'Relation Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

/** Rows each relation's scans produced or filtered out, over the whole plan (CTEs and subplans included). */
function rowsRead(node: PlanNode, into: Map<string, number> = new Map()): Map<string, number> {
  const rel = node['Relation Name'];
  if (rel !== undefined && node['Actual Loops'] !== undefined) {
    const loops = node['Actual Loops'];
    // EXPLAIN gives Actual Rows and Rows Removed by Filter per loop (averaged).
    const n = ((node['Actual Rows'] ?? 0) + (node['Rows Removed by Filter'] ?? 0)) * loops;
    into.set(rel, (into.get(rel) ?? 0) + Math.round(n));
  }
  for (const child of node.Plans ?? []) rowsRead(child, into);
  return into;
}

if (!selectedStores().includes('postgres')) {
  console.log('# pg-placement-walk: skipped, LEASEHOLD_TEST_STORES leaves postgres out');
} else {
  void describe('postgres fleet: placement walks the placement index', () => {
    let ts: TestStore;
    let store: PostgresStore;
    let fleet: PostgresFleet;
    let db: pg.Client;
    let s: string;
    const sent: { text: string; values: unknown[] }[] = [];

    before(async () => {
      ts = await makeTestStore('postgres');
      assert.ok(ts.store instanceof PostgresStore);
      store = ts.store;
      await store.migrate();
      s = `"${store.schema}"`;
      const fleetQuery = store.fleetQuery.bind(store);
      store.fleetQuery = (text, values, options) => {
        sent.push({ text, values });
        return fleetQuery(text, values, options);
      };
      fleet = await PostgresFleet.forStore(store);
      db = new pg.Client({ connectionString: TEST_PG_URL });
      await db.connect();
      // Registered in bulk, with a live lease each, and no ANALYZE: as a fleet that has grown since the last one.
      await db.query(
        `INSERT INTO ${s}.fleet_agents (id, labels, started_at)
         SELECT 'w-' || lpad(g::text, 5, '0'), jsonb_build_object('zone', CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END), now() FROM generate_series(0, $1 - 1) g`,
        [AGENTS],
      );
      await db.query(
        `INSERT INTO ${s}.leases (name, holder, nonce, token, expires_at, renewed_at, term_started_at)
         SELECT $2 || 'w-' || lpad(g::text, 5, '0'), 'h', 'n', 1, now() + interval '1 hour', now(), now() FROM generate_series(0, $1 - 1) g`,
        [AGENTS, AGENT_LEASE_PREFIX],
      );
    });
    after(async () => {
      await db?.end();
      await ts?.cleanup();
    });

    /** The rows the last statement sent read, run again under EXPLAIN (ANALYZE) and rolled back. */
    async function lastStatementRows(values?: unknown[]): Promise<Map<string, number>> {
      const q = { ...sent.at(-1)!, ...(values === undefined ? {} : { values }) };
      await db.query('BEGIN');
      try {
        const r = await db.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${q.text}`, q.values);
        return rowsRead(r.rows[0]!['QUERY PLAN'][0].Plan);
      } finally {
        await db.query('ROLLBACK');
      }
    }

    void it('reads at most the tied agents it picks among, not the fleet', async () => {
      const placed = await fleet.place('walk-r0', {});
      assert.equal(placed.outcome, 'placed');
      const rows = await lastStatementRows();
      const agents = rows.get('fleet_agents') ?? 0;
      const leases = rows.get('leases') ?? 0;
      assert.ok(agents <= TIES + 2, `fleet_agents rows read: ${agents} of ${AGENTS} (walked ${TIES} at most, and the chosen one's count updated)`);
      assert.ok(leases <= TIES, `leases rows read: ${leases} of ${AGENTS}`);
    });

    void it('with labels half the fleet carries, about twice as many', async () => {
      const placed = await fleet.place('walk-r1', { zone: 'b' });
      assert.equal(placed.outcome, 'placed');
      const rows = await lastStatementRows();
      const agents = rows.get('fleet_agents') ?? 0;
      assert.ok(agents <= 2 * TIES + 2, `fleet_agents rows read: ${agents} of ${AGENTS}`);
      assert.ok((rows.get('leases') ?? 0) <= TIES, `leases rows read: ${rows.get('leases')}`);
    });

    void it('a reassign to any agent walks as placement does', async () => {
      const { agent } = await fleet.owner('walk-r0').then((o) => o!);
      const moved = await fleet.reassign('walk-r0', agent, null);
      assert.ok(moved.outcome === 'moved');
      // Again, as a move from the new owner (the statement sent found the owner it names).
      const rows = await lastStatementRows(['walk-r0', moved.agent, null, AGENT_LEASE_PREFIX]);
      const agents = rows.get('fleet_agents') ?? 0;
      // The walk, plus the two owned counts (old and new owner) it updates.
      assert.ok(agents <= TIES + 4, `fleet_agents rows read: ${agents} of ${AGENTS}`);
      assert.ok((rows.get('leases') ?? 0) <= TIES + 1, `leases rows read: ${rows.get('leases')}`);
    });
  });
}
