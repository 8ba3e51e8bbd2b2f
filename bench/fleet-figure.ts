/**
 * The fleet registry's figure in `npm run bench` (`--only fleet`): placement at each fleet size,
 * against one durable write to the same store (an agent's upsert), interleaved, so the ratio at 100 and at 1,000 agents
 * says whether placement's cost grows with the fleet (it should not: each store walks its agents
 * fewest-owned first and stops, rather than reading every agent's lease). And on PostgreSQL,
 * `fleet.owner()` against the floor it cannot go under: the same indexed select of the
 * ownership row with the same liveness join, sent raw on its own client.
 *
 * The agents are real (Agent.start: a liveness lease each, renewed by one Leasehold's batches).
 * bench/fleet.ts is the longer stand-alone run with 100,000 ownership rows.
 */
import pg from 'pg';
import { Leasehold } from '../src/core/leasehold.js';
import { Agent } from '../src/fleet/agent.js';
import { openFleet } from '../src/fleet/open.js';
import { AGENT_LEASE_PREFIX } from '../src/fleet/port.js';
import { PostgresStore } from '../src/backends/postgres/store.js';
import { makeTestStore, TEST_PG_URL, type StoreKind } from '../test/helpers/stores.js';
import { interleave, stat, timed, uniq, type Recorder } from './lib.js';

/** Ownership rows written in bulk on PostgreSQL before owner() is measured (spread over the agents). */
const PG_RESOURCES = 100_000;

export async function fleetFigure(rec: Recorder, kind: StoreKind, fleetSizes: readonly number[], samples: number): Promise<void> {
  for (const n of fleetSizes) {
    const t = await makeTestStore(kind);
    const leasehold = new Leasehold({ store: t.store, suspension: false });
    const fleet = await openFleet(t.store);
    const agents: Agent[] = [];
    try {
      const run = uniq('h31f-bench');
      // 25 at a time: a hundred agents' first claims at once had etcd's channel closed under them on this machine.
      for (let i = 0; i < n; i += 25) {
        agents.push(
          ...(await Promise.all(
            Array.from({ length: Math.min(25, n - i) }, (_, k) =>
              // Heartbeat well inside the TTL, and both long against the figure, so no agent goes stale while it is measured.
              Agent.start(leasehold, fleet, { id: `${run}-${String(i + k).padStart(5, '0')}`, labels: { zone: (i + k) % 2 === 0 ? 'a' : 'b' }, heartbeat: '20s', staleAfter: '120s' }),
            ),
          )),
        );
      }
      // The floor of a placement is one durable write to the same store: an agent's registration
      // (an upsert of one row, hash or key), here of an agent with no liveness lease, which no
      // placement picks. A read round trip would leave the commit's flush in the ratio.
      const floor = `${run}-floor`;
      let placed = 0;
      const [p, b] = await interleave(samples * 3, () => timed(() => fleet.place(`r-${placed++}`)), () => timed(() => fleet.port.registerAgent(floor, {})));
      rec.add({ figure: 'fleet', store: kind, label: `place, ${n} agents`, unit: 'ms', leasehold: stat(p), baselineName: 'one agent upsert', baseline: stat(b) });
      if (kind === 'postgres' && t.store instanceof PostgresStore && n === Math.max(...fleetSizes)) await ownerFloor(rec, t.store, fleet, n, samples);
    } finally {
      await Promise.all(agents.map((a) => a.stop()));
      await leasehold.close();
      await t.cleanup();
    }
  }
}

/** owner() against the raw select it does, with the same liveness join, on a client of its own. */
async function ownerFloor(rec: Recorder, store: PostgresStore, fleet: Awaited<ReturnType<typeof openFleet>>, nAgents: number, samples: number): Promise<void> {
  const s = `"${store.schema}"`;
  const agentIds = (await fleet.agents()).map((a) => a.id);
  const direct = new pg.Client({ connectionString: TEST_PG_URL });
  await direct.connect();
  try {
    await direct.query(
      `INSERT INTO ${s}.fleet_ownership (resource, agent, generation, labels, placed_at)
       SELECT 'res-' || g, ($3::text[])[1 + g % $2], nextval('${s}.fleet_generation'), '{}', now() FROM generate_series(1, $1) g`,
      [PG_RESOURCES, nAgents, agentIds],
    );
    await direct.query(`ANALYZE ${s}.fleet_ownership; ANALYZE ${s}.fleet_agents; ANALYZE ${s}.leases`);
    const raw = {
      name: 'h31f-owner-floor',
      text: `SELECT o.agent, o.generation, (a.deregistered_at IS NULL AND l.holder IS NOT NULL AND l.expires_at > now()) AS live
               FROM ${s}.fleet_ownership o LEFT JOIN ${s}.fleet_agents a ON a.id = o.agent LEFT JOIN ${s}.leases l ON l.name = $2 || o.agent
              WHERE o.resource = $1`,
    };
    const pickRes = (): string => `res-${1 + Math.floor(Math.random() * PG_RESOURCES)}`;
    // Sent as leasehold sends its statements (unnamed: parsed and planned per call, which any
    // pool a caller passes in can do), and again as a prepared statement: the floor a driver
    // that prepares could reach, which the PgPoolLike interface does not promise.
    for (const [baselineName, q] of [
      ['raw select + liveness join', { text: raw.text }],
      ['the same, prepared', raw],
    ] as const) {
      const [o, r] = await interleave(
        samples * 5,
        () => timed(() => fleet.owner(pickRes())),
        () => timed(() => direct.query({ ...q, values: [pickRes(), AGENT_LEASE_PREFIX] })),
      );
      rec.add({ figure: 'fleet', store: 'postgres', label: `owner(), ${PG_RESOURCES / 1000}k rows`, unit: 'ms', leasehold: stat(o), baselineName, baseline: stat(r) });
    }
  } finally {
    await direct.end();
  }
}
