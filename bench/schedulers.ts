/**
 * Issue 27's table, re-measured: two replicas of an app whose schedule lives in NestJS or
 * node-cron 4, the second started 300 ms after the first, a job every 2 s (`*\/2 * * * * *`) that
 * takes JOB_MS, on PostgreSQL. For each approach, the first SLOTS slots after both replicas are
 * up: how many ran twice, once, or not at all (from the resource file both replicas append to).
 * With --offset, the second replica's wall clock is also 400 ms behind (libfaketime).
 *
 *   node dist/bench/schedulers.js [--offset] [--slots 6] [--job-ms 100] [--store postgres|sqlite]
 *
 * Not part of `npm run bench`: a table for the issue's closing note, run on demand.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { makeTestStore, type StoreKind } from '../test/helpers/stores.js';
import { hasFaketime, readRuns, startReplica, until, type Replica } from '../test/integrations/replicas.js';

const { values } = parseArgs({
  options: { offset: { type: 'boolean', default: false }, slots: { type: 'string', default: '6' }, 'job-ms': { type: 'string', default: '100' }, store: { type: 'string', default: 'postgres' } },
});
const SLOTS = Number(values.slots);
const JOB_MS = values['job-ms'];
const KIND = values.store as StoreKind;
const PERIOD_MS = 2000;
const SCHEDULE = '*/2 * * * * *';
const nest = fileURLToPath(new URL('../test/integrations/fixtures/nest-replica.js', import.meta.url));
const nodeCron = fileURLToPath(new URL('../test/integrations/fixtures/node-cron-replica.js', import.meta.url));

interface Approach {
  label: string;
  script: string;
  args: (url: string, resource: string) => string[];
}
const approaches: Approach[] = [
  { label: "NestJS @Cron('*/2 * * * * *') + runExclusive(..., { wait: false }) in the body", script: nest, args: (u, r) => [u, r, JOB_MS, 'naive'] },
  { label: "NestJS @Cron('*/2 * * * * *') + @OncePerSlot", script: nest, args: (u, r) => [u, r, JOB_MS, 'cron'] },
  { label: 'node-cron 4 + leaseholdCoordinator', script: nodeCron, args: (u, r) => [u, r, JOB_MS, 'coordinator'] },
  { label: 'node-cron 4 + runExclusive in the callback, maxRandomDelay 600', script: nodeCron, args: (u, r) => [u, r, JOB_MS, 'naive'] },
];

const dir = mkdtempSync(join(tmpdir(), 'lh-bench-schedulers-'));

async function measure(a: Approach, i: number): Promise<{ twice: number; once: number; missed: number; more: number }> {
  const ts = await makeTestStore(KIND);
  const resource = join(dir, `resource-${i}.log`);
  const env = { SCHEDULE, PERIOD_MS: String(PERIOD_MS) };
  const replicas: Replica[] = [];
  try {
    replicas.push(startReplica(a.script, a.args(ts.url, resource), undefined, env));
    await new Promise((r) => setTimeout(r, 300));
    replicas.push(startReplica(a.script, a.args(ts.url, resource), values.offset ? '-0.4' : undefined, env));
    await until('both replicas are up', () => replicas.every((r) => r.out.includes('ready')), 30_000);
    // The first slot counted is the first whole period a second after both are up (a replica's
    // first fire also contends for the lease); the last one's job has ended when we stop.
    const first = Math.ceil((Date.now() + 1000) / PERIOD_MS) * PERIOD_MS;
    const slots = Array.from({ length: SLOTS }, (_, k) => new Date(first + k * PERIOD_MS).toISOString());
    const last = first + (SLOTS - 1) * PERIOD_MS;
    // Past the last slot: its fire (up to 600 ms of random delay, 400 ms of clock offset), its job, and slack.
    await new Promise((r) => setTimeout(r, last - Date.now() + 1000 + Number(JOB_MS) + 1500));
    const starts = new Map<string, number>();
    for (const r of readRuns(resource).filter((x) => x.what === 'start')) starts.set(r.slot, (starts.get(r.slot) ?? 0) + 1);
    const n = slots.map((s) => starts.get(s) ?? 0);
    return { twice: n.filter((x) => x === 2).length, once: n.filter((x) => x === 1).length, missed: n.filter((x) => x === 0).length, more: n.filter((x) => x > 2).length };
  } finally {
    for (const r of replicas) r.proc.kill('SIGTERM');
    await Promise.all(replicas.map((r) => r.exited));
    await ts.cleanup();
  }
}

if (values.offset && !hasFaketime()) {
  process.stderr.write('--offset needs libfaketime (the Debian package faketime)\n');
  process.exit(2);
}
process.stdout.write(`two replicas, the second 300 ms late${values.offset ? ' with its clock 400 ms behind' : ''}; ${SCHEDULE}; job ${JOB_MS} ms; ${KIND}; ${SLOTS} slots each\n\n`);
process.stdout.write('| approach | ran twice | once | missed |\n|---|---|---|---|\n');
try {
  for (const [i, a] of approaches.entries()) {
    const r = await measure(a, i);
    process.stdout.write(`| ${a.label} | ${r.twice}${r.more > 0 ? ` (+${r.more} more than twice)` : ''} | ${r.once} | ${r.missed} |\n`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
