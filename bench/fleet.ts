/**
 * Fleet registry latency on PostgreSQL: placement and owner lookup with 1,000 live agents and
 * 100,000 owned resources (printed, never asserted).
 *
 *   npm run build:test && node dist/bench/fleet.js [--agents 1000] [--resources 100000] [--samples 2000] [--store postgres|mysql]
 *
 * On MySQL the ownership rows are not written in bulk (placement reads agents, not resources):
 * only the placements' own rows exist there.
 *
 * The agents are real liveness leases held by this one process (a Leasehold batches their
 * renewals), registered through the Agent API; the 100,000 ownership rows are written in bulk,
 * spread over the agents. Then, one call at a time from one client: `place` of new resources
 * and `owner` of random existing ones. The baseline is the same pool's `SELECT 1`.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Leasehold } from '../src/core/leasehold.js';
import { Agent } from '../src/fleet/agent.js';
import { openFleet } from '../src/fleet/open.js';
import { PostgresStore } from '../src/backends/postgres/store.js';
import { makeTestStore, TEST_PG_URL } from '../test/helpers/stores.js';

const { values } = parseArgs({
  options: {
    agents: { type: 'string', default: '1000' },
    resources: { type: 'string', default: '100000' },
    samples: { type: 'string', default: '2000' },
    store: { type: 'string', default: 'postgres' },
  },
});
const nAgents = Number(values.agents);
const nResources = Number(values.resources);
const samples = Number(values.samples);
const pct = (xs: number[], q: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const line = (what: string, xs: number[]): void => {
  process.stdout.write(`${what.padEnd(34)} p50 ${pct(xs, 0.5).toFixed(2)}ms  p99 ${pct(xs, 0.99).toFixed(2)}ms  (n=${xs.length})\n`);
};

if (values.store !== 'postgres' && values.store !== 'mysql') throw new Error(`--store postgres or mysql, not ${values.store}`);
const kind = values.store;
const t = await makeTestStore(kind);
const store = t.store;
const leasehold = new Leasehold({ store, suspension: false });
const fleet = await openFleet(store);
const agents: Agent[] = [];
try {
  const t0 = performance.now();
  for (let i = 0; i < nAgents; i += 100) {
    const batch = Array.from({ length: Math.min(100, nAgents - i) }, (_, k) =>
      Agent.start(leasehold, fleet, { id: `agent-${String(i + k).padStart(4, '0')}`, labels: { zone: (i + k) % 2 === 0 ? 'a' : 'b' }, heartbeat: '20s', staleAfter: '60s' }),
    );
    agents.push(...(await Promise.all(batch)));
  }
  process.stdout.write(`# ${nAgents} agents live in ${((performance.now() - t0) / 1000).toFixed(1)}s\n`);

  const direct = kind === 'postgres' ? new pg.Client({ connectionString: TEST_PG_URL }) : undefined;
  await direct?.connect();
  const s = store instanceof PostgresStore ? `"${store.schema}"` : '';
  const t1 = performance.now();
  if (direct !== undefined) {
  await direct.query(
    `INSERT INTO ${s}.fleet_ownership (resource, agent, generation, labels, placed_at)
     SELECT 'res-' || g, 'agent-' || lpad(((g % $2))::text, 4, '0'), nextval('${s}.fleet_generation'), '{}', now()
       FROM generate_series(1, $1) g`,
    [nResources, nAgents],
  );
  await direct.query(`UPDATE ${s}.fleet_agents a SET owned = c.n FROM (SELECT agent, count(*) n FROM ${s}.fleet_ownership GROUP BY agent) c WHERE a.id = c.agent`);
  await direct.query(`ANALYZE ${s}.fleet_ownership; ANALYZE ${s}.fleet_agents; ANALYZE ${s}.leases`);
  process.stdout.write(`# ${nResources} ownership rows written in ${((performance.now() - t1) / 1000).toFixed(1)}s\n`);
  }

  const baseline: number[] = [];
  for (let i = 0; i < samples; i++) {
    const a = performance.now();
    await store.now();
    baseline.push(performance.now() - a);
  }
  const place: number[] = [];
  for (let i = 0; i < samples; i++) {
    const a = performance.now();
    await fleet.place(`new-${i}`);
    place.push(performance.now() - a);
  }
  const owner: number[] = [];
  for (let i = 0; i < samples; i++) {
    // Without the bulk rows (MySQL) the resources on record are the placements' (made below, first).
    const r = direct === undefined ? `new-${Math.floor(Math.random() * samples)}` : `res-${1 + Math.floor(Math.random() * nResources)}`;
    const a = performance.now();
    await fleet.owner(r);
    owner.push(performance.now() - a);
  }
  const placeLabelled: number[] = [];
  for (let i = 0; i < Math.min(samples, 500); i++) {
    const a = performance.now();
    await fleet.place(`new-z-${i}`, { labels: { zone: 'b' } });
    placeLabelled.push(performance.now() - a);
  }
  const owned = (await fleet.agents()).map((a) => a.owned);
  await direct?.end();
  process.stdout.write(`# ${kind}, ${nAgents} live agents, ${direct === undefined ? 0 : nResources} owned resources before the placements, one client, sequential calls\n`);
  line('baseline: SELECT now() round trip', baseline);
  line('owner(resource)', owner);
  line('place(resource)', place);
  line('place(resource, {zone: b})', placeLabelled);
  process.stdout.write(`# owned per agent after the placements: min ${Math.min(...owned)}, max ${Math.max(...owned)}\n`);
} finally {
  await Promise.all(agents.map((a) => a.stop()));
  await leasehold.close();
  await t.cleanup();
}
