/**
 * What unlessReleasedSince saves per-slot cron (issue 33: with 10 replicas, store requests per
 * slot within 1.5x the replicas). Ten `startCron` replicas, no kill, per-slot mode, on each
 * store named: once with every claim stripped of unlessReleasedSince (a store that does not
 * honour it: "before"), once as shipped ("after"), interleaved `rounds` times in one run.
 * Prints requests per slot, where they went, and the winner's job start after the first
 * replica's fire against the mean claim round trip.
 *
 * Each round also measures the raw floor of that start (bench/cron-floor-replica.ts: as many
 * processes, each firing on the slot boundary and claiming the slot with one store call, SET NX
 * PX or INSERT ... ON CONFLICT DO NOTHING), and prints leasehold's start against it as a ratio:
 * issue 33 wants the start within the first fire plus one round trip, and on a small machine
 * the floor says how much of that the processes' wake-up alone costs. With --trace, where the
 * winner's milliseconds went (bench/cron-failover.ts, winnerSplit). With --base DIST (another
 * build's dist folder, e.g. a worktree of the commit before a change), the variant 'base' runs
 * that build's replicas in the same rounds: before and after a change, beside the same floor.
 *
 *   nice -n 10 node dist/bench/cron-released-since.js [--stores redis,sqlite] [--rounds 2] [--replicas 10] [--variants before,after,base] [--base DIST] [--slots 8] [--trace]
 */
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { StoreKind } from '../test/helpers/stores.js';
import { cronRun, FLOOR_STORES, oneFloor, oneMode, type Outcome } from './cron-failover.js';

const usage = 'usage: node dist/bench/cron-released-since.js [--stores redis,sqlite] [--rounds 2] [--replicas 10] [--variants before,after,base] [--base DIST] [--slots 8] [--trace]\n';
const { values } = parseArgs({
  options: {
    stores: { type: 'string', default: 'redis,sqlite' },
    rounds: { type: 'string', default: '2' },
    replicas: { type: 'string', default: '10' },
    variants: { type: 'string', default: 'before,after' },
    trace: { type: 'boolean', default: false },
    base: { type: 'string' },
    slots: { type: 'string', default: '8' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help === true) {
  process.stdout.write(usage);
  process.exit(0);
}
const stores = values.stores.split(',') as StoreKind[];
const rounds = Number(values.rounds);
const replicas = Number(values.replicas);
const variants = values.variants.split(',');
if (variants.includes('base') && values.base === undefined) {
  process.stderr.write(`--variants base needs --base DIST\n${usage}`);
  process.exit(2);
}
const TTL_MS = 3000;
cronRun.steadySlots = Number(values.slots);

const ms = (n: number): string => n.toFixed(1);
const line = (kind: string, label: string, o: Outcome, floor: Outcome | undefined): string => {
  const by = o.perSlotByMethod;
  const rt = (by['ms:store.claim'] ?? 0) / (by['store.claim'] || Number.NaN);
  const where = Object.entries(by).filter(([k]) => !k.startsWith('ms:')).map(([k, v]) => `${k} ${v}`).join(', ');
  const f = o.afterFirstFire;
  const vsFloor = f === undefined || floor?.afterFirstFire === undefined ? '' : ` (${(f.median / floor.afterFirstFire.median).toFixed(2)}x the floor's median, ${(f.p90 / floor.afterFirstFire.p90).toFixed(2)}x its p90)`;
  const late = o.firstFireLate === undefined ? '' : `, first fire ${ms(o.firstFireLate.median)} / ${ms(o.firstFireLate.p90)} ms after the slot`;
  const fire = f === undefined ? '' : `; start after first fire median ${ms(f.median)} / p90 ${ms(f.p90)} ms${vsFloor}, claim round trip ${ms(rt)} ms${late}`;
  const split = o.split === undefined ? '' : `\n    winner's split, median / p90: ${Object.entries(o.split).map(([k, s]) => `${k} ${ms(s.median)} / ${ms(s.p90)}`).join(', ')}`;
  return `${kind} ${label}: ${o.requestsPerSlot.toFixed(2)} requests/slot over ${o.slots} slots, lost ${o.lostPerKill}, lateness median ${o.lateness.median} ms${fire}\n    ${where}${split}\n`;
};

for (let round = 0; round < rounds; round++) {
  for (const kind of stores) {
    const floor = FLOOR_STORES.includes(kind) ? await oneFloor(kind, replicas, TTL_MS) : undefined;
    if (floor?.afterFirstFire !== undefined) {
      const f = floor.afterFirstFire;
      const late = floor.firstFireLate === undefined ? '' : `, first fire ${ms(floor.firstFireLate.median)} / ${ms(floor.firstFireLate.p90)} ms after the slot`;
      process.stdout.write(`${kind} round ${round + 1} raw floor (one claim call per fire): start after first fire median ${ms(f.median)} / p90 ${ms(f.p90)} ms over ${f.n} slots${late}, ${floor.requestsPerSlot.toFixed(2)} requests/slot, lost ${floor.lostPerKill}, duplicates ${floor.steadyDuplicates}\n`);
    }
    const trace = values.trace ? { trace: true } : {};
    if (variants.includes('before')) {
      const before = await oneMode(kind, 'per-slot', 0, TTL_MS, replicas, 0, { ignoreReleasedSince: true, ...trace });
      process.stdout.write(line(kind, `round ${round + 1} before (unlessReleasedSince ignored)`, before, floor));
    }
    if (variants.includes('base')) {
      const base = await oneMode(kind, 'per-slot', 0, TTL_MS, replicas, 0, { replicaJs: join(resolve(values.base!), 'bench', 'cron-replica.js'), ...trace });
      process.stdout.write(line(kind, `round ${round + 1} base (${values.base})`, base, floor));
    }
    if (variants.includes('after')) {
      const after = await oneMode(kind, 'per-slot', 0, TTL_MS, replicas, 0, trace);
      process.stdout.write(line(kind, `round ${round + 1} after`, after, floor));
    }
  }
}
