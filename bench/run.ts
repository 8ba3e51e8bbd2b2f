/**
 * The benchmark suite. Every figure is printed as median and p90 next to a baseline measured in
 * the same run, interleaved with it, and their ratio: the ratio holds up on a loaded machine
 * where the absolute numbers do not. Timings are reported, never asserted.
 *
 *   npm run bench [-- --quick | --smoke] [--only renewal,handover,failover,followers,fence,startup,cron-failover,pg-server,fleet]
 *                 [--stores postgres,sqlite,redis,etcd,mysql] [--json FILE] [--svg FILE]
 *   npm run bench -- --soak 10m [--soak-leases 10000] [--stores postgres]   (soak.ts)
 *
 * Against the real local stores (LEASEHOLD_TEST_PG_URL / _REDIS_URL / _ETCD_URL / _MYSQL_URL, as the tests).
 * Idle follower load is counted at a server of its own (see servers.ts), on ports from
 * LEASEHOLD_BENCH_PORT_BASE (default 26000): +1 Redis, +10/+11 etcd, +20 PostgreSQL with pg_stat_statements (pg-server.ts).
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { ALL_STORES, type StoreKind } from '../test/helpers/stores.js';
import { heading, Recorder, SIZES, type Mode } from './lib.js';
import { renewal } from './renewal.js';
import { handover } from './handover.js';
import { failover } from './failover.js';
import { followerLoad } from './followers.js';
import { fenceOverhead } from './fence.js';
import { startup } from './startup.js';
import { cronFailover } from './cron-failover.js';
import { cronMidJob } from './cron-midjob.js';
import { pgServer } from './pg-server.js';
import { fleetFigure } from './fleet-figure.js';
import { chartSvg } from './chart.js';
import { preflight } from './preflight.js';
import { parseSoakDuration, soak } from './soak.js';

const FIGURES = ['renewal', 'handover', 'failover', 'followers', 'fence', 'startup', 'cron-failover', 'pg-server', 'fleet'] as const;
type Figure = (typeof FIGURES)[number];

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    smoke: { type: 'boolean', default: false },
    only: { type: 'string' },
    stores: { type: 'string' },
    soak: { type: 'string' },
    'soak-leases': { type: 'string', default: '10000' },
    json: { type: 'string' },
    svg: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (values.help) {
  process.stdout.write(
    'npm run bench [-- --quick | --smoke] [--only ' + FIGURES.join(',') + '] [--stores postgres,sqlite,redis,etcd,mysql] [--json FILE] [--svg FILE]\n' +
      '  --quick about 2-2.5 minutes, --smoke seconds (proves the suite runs; its numbers mean nothing)\n' +
      '  --soak 10m: instead of the figures, N leases (--soak-leases, default 10000) held on one store (--stores, default postgres) for that long;\n' +
      '    RSS, heap, client and store CPU each minute, and their slopes per minute\n' +
      '  stores from LEASEHOLD_TEST_PG_URL, LEASEHOLD_TEST_REDIS_URL, LEASEHOLD_TEST_ETCD_URL, LEASEHOLD_TEST_MYSQL_URL (as the tests);\n  each is checked before the first figure, and etcd is started when none is running (as npm test does)\n',
  );
  process.exit(0);
}

const usage = (why: string): never => {
  process.stderr.write(`bench: ${why}\n`);
  process.exit(2);
};
const mode: Mode = values.smoke ? 'smoke' : values.quick ? 'quick' : 'full';
const sizes = SIZES[mode];
const only = (values.only ?? FIGURES.join(',')).split(',').map((s) => s.trim()) as Figure[];
for (const f of only) if (!FIGURES.includes(f)) usage(`--only names unknown figure "${f}"; figures: ${FIGURES.join(', ')}`);
const stores = (values.stores ?? (values.soak !== undefined ? 'postgres' : ALL_STORES.join(','))).split(',').map((s) => s.trim()) as StoreKind[];
for (const s of stores) if (!ALL_STORES.includes(s)) usage(`--stores names unknown store "${s}"; stores: ${ALL_STORES.join(', ')}`);

const out = fileURLToPath(new URL('.', import.meta.url));
const jsonPath = resolve(values.json ?? `${out}/results.json`);
const svgPath = resolve(values.svg ?? jsonPath.replace(/\.json$/, '') + '.svg');

const ready = await preflight(stores);
if (!ready.ok) {
  process.stderr.write(`bench: ${ready.why}\n`);
  process.exit(1);
}

if (values.soak !== undefined) {
  const ms = parseSoakDuration(values.soak);
  const leases = Number(values['soak-leases']);
  if (ms === undefined) usage(`--soak takes a duration such as 10m or 30s, got "${values.soak}"`);
  if (!Number.isInteger(leases) || leases < 1) usage(`--soak-leases takes a whole number above 0, got "${values['soak-leases']}"`);
  heading(`soak: ${leases} leases held for ${values.soak} on ${stores.join(', ')}`);
  const out = [];
  let failedSoak = false;
  for (const kind of stores) {
    try {
      out.push(await soak(kind, leases, ms!));
    } catch (e) {
      failedSoak = true;
      process.stderr.write(`bench: soak on ${kind} failed: ${(e instanceof Error ? e.message : String(e)).split('\n')[0]}\n`);
    }
  }
  mkdirSync(dirname(jsonPath), { recursive: true });
  writeFileSync(jsonPath.replace(/\.json$/, '') + '-soak.json', JSON.stringify({ machine: `${cpus().length} cores, Node ${process.version}`, date: new Date().toISOString(), soak: out }, null, 2) + '\n');
  await ready.stop();
  process.exit(failedSoak ? 1 : 0);
}

const rec = new Recorder();
const started = performance.now();
const machine = `${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown'}), Node ${process.version}, ${process.platform}`;
process.stdout.write(`leasehold bench (${mode}) on ${machine}; stores: ${stores.join(', ')}\n`);
process.stdout.write('each row: leasehold median (p90) | baseline median (p90), same run, interleaved | ratio\n');

/** Figures that failed on a store: said in one line each, left out, and the run exits 1. */
const failed: string[] = [];
/**
 * One figure on each store. A store that fails mid-figure (an etcd deadline on a loaded machine,
 * a dropped connection) is one line on stderr, not a stack that ends the run and loses every
 * figure after it.
 */
const eachStore = async (figure: Figure, kinds: readonly StoreKind[], body: (kind: StoreKind) => Promise<void>): Promise<void> => {
  for (const kind of kinds) {
    try {
      await body(kind);
    } catch (e) {
      const why = (e instanceof Error ? e.message : String(e)).split('\n')[0];
      failed.push(`${figure} on ${kind}`);
      process.stderr.write(`bench: ${figure} on ${kind} failed, its remaining figures left out: ${why}\n`);
    }
  }
};

const run = async (figure: Figure, title: string, body: () => Promise<void>): Promise<void> => {
  if (!only.includes(figure)) return;
  heading(title);
  const t0 = performance.now();
  await body();
  process.stdout.write(`  (${((performance.now() - t0) / 1000).toFixed(1)}s)\n`);
};

await run('renewal', 'renewal: one tick renewing N leases (as the scheduler batches them)', async () => {
  await eachStore('renewal', stores, (kind) => renewal(rec, kind, sizes.leases, sizes.samples));
});
await run('handover', 'clean handover: release -> the waiting follower holds it', async () => {
  await eachStore('handover', stores, (kind) => handover(rec, kind, sizes.handovers));
});
await run('failover', 'crash failover: holder SIGKILLed -> a follower holds it, as a fraction of the TTL', async () => {
  await eachStore('failover', stores, (kind) => failover(rec, kind, sizes.failovers, sizes.ttlMs));
});
await run('followers', 'idle follower load, counted at the server, per follower per TTL', async () => {
  await eachStore('followers', stores, (kind) => followerLoad(rec, kind, sizes.followers, sizes.followerTtls, sizes.ttlMs));
});
await run('fence', 'fence overhead: fenced vs unfenced PostgreSQL transaction', async () => {
  await eachStore('fence', stores.includes('postgres') ? ['postgres'] : [], () => fenceOverhead(rec, sizes.samples));
});
await run('cron-failover', 'cron through replica deaths: per-slot mode vs leader mode, the latest slot\'s replica SIGKILLed between slots; then mid-job, liveness session vs ttl', async () => {
  // Smoke: one store only (the figure takes ~20 s a store even so).
  await eachStore('cron-failover', mode === 'smoke' ? stores.slice(0, 1) : stores, async (kind) => {
    await cronFailover(rec, kind, Math.max(2, sizes.failovers), sizes.ttlMs, mode === 'smoke');
    // A death mid-job rather than between slots: how soon its slot runs again (issue 33 item 5).
    await cronMidJob(rec, kind, mode === 'smoke' ? 1 : Math.max(3, sizes.failovers), sizes.ttlMs);
  });
});
await run('pg-server', 'PostgreSQL server time (pg_stat_statements): renewal vs raw, and the statements a close sends', async () => {
  await eachStore('pg-server', stores.includes('postgres') ? ['postgres'] : [], () => pgServer(rec, mode === 'full' ? [1, 1000, 10_000] : sizes.leases, sizes.samples));
});
await run('fleet', 'fleet registry: placement as the fleet grows, owner() against its raw select (PostgreSQL)', async () => {
  // Placement's ratio at each size is the figure: flat means its cost does not grow with the fleet.
  const fleetSizes = mode === 'smoke' ? [10, 100] : mode === 'quick' ? [100, 1000] : [100, 1000, 10_000];
  await eachStore('fleet', stores, (kind) => fleetFigure(rec, kind, fleetSizes, sizes.samples));
});
await run('startup', 'CLI start-up: leasehold run --store URL -- true vs node -e 0', async () => {
  await eachStore('startup', stores, (kind) => startup(rec, kind, sizes.startups));
});

const seconds = (performance.now() - started) / 1000;
mkdirSync(dirname(jsonPath), { recursive: true });
writeFileSync(jsonPath, JSON.stringify({ mode, machine, date: new Date().toISOString(), seconds, results: rec.results, skipped: rec.skipped }, null, 2) + '\n');
mkdirSync(dirname(svgPath), { recursive: true });
writeFileSync(svgPath, chartSvg(rec.results, `leasehold bench (${mode}), ${machine}`));
process.stdout.write(`\n${rec.results.length} figures in ${seconds.toFixed(1)}s; wrote ${jsonPath} and ${svgPath}\n`);
if (failed.length > 0) process.stderr.write(`bench: ${failed.length} figure(s) failed and are left out: ${failed.join(', ')}\n`);
await ready.stop();
// Drivers' sockets and timers (etcd3's pools, the pg pools) need not be waited out.
process.exit(failed.length > 0 ? 1 : 0);
