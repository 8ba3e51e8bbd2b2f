/**
 * What unlessReleasedSince saves per-slot cron (issue 33: with 10 replicas, store requests per
 * slot within 1.5x the replicas). Ten `startCron` replicas, no kill, per-slot mode, on each
 * store named: once with every claim stripped of unlessReleasedSince (a store that does not
 * honour it: "before"), once as shipped ("after"), interleaved `rounds` times in one run.
 * Prints requests per slot, where they went, and the winner's job start after the first
 * replica's fire against the mean claim round trip.
 *
 *   nice -n 10 node dist/bench/cron-released-since.js [--stores redis,sqlite] [--rounds 2] [--replicas 10]
 */
import { parseArgs } from 'node:util';
import type { StoreKind } from '../test/helpers/stores.js';
import { oneMode, type Outcome } from './cron-failover.js';

const { values } = parseArgs({ options: { stores: { type: 'string', default: 'redis,sqlite' }, rounds: { type: 'string', default: '2' }, replicas: { type: 'string', default: '10' }, help: { type: 'boolean', short: 'h' } } });
if (values.help === true) {
  process.stdout.write('usage: node dist/bench/cron-released-since.js [--stores redis,sqlite] [--rounds 2] [--replicas 10]\n');
  process.exit(0);
}
const stores = values.stores.split(',') as StoreKind[];
const rounds = Number(values.rounds);
const replicas = Number(values.replicas);
const TTL_MS = 3000;

const line = (kind: string, label: string, o: Outcome): string => {
  const by = o.perSlotByMethod;
  const rt = (by['ms:store.claim'] ?? 0) / (by['store.claim'] || Number.NaN);
  const where = Object.entries(by).filter(([k]) => !k.startsWith('ms:')).map(([k, v]) => `${k} ${v}`).join(', ');
  const fire = o.afterFirstFire === undefined ? '' : `; start after first fire median ${o.afterFirstFire.median.toFixed(1)} / p90 ${o.afterFirstFire.p90.toFixed(1)} ms, claim round trip ${rt.toFixed(1)} ms`;
  return `${kind} ${label}: ${o.requestsPerSlot.toFixed(2)} requests/slot over ${o.slots} slots, lost ${o.lostPerKill}, lateness median ${o.lateness.median} ms${fire}\n    ${where}\n`;
};

for (let round = 0; round < rounds; round++) {
  for (const kind of stores) {
    const before = await oneMode(kind, 'per-slot', 0, TTL_MS, replicas, 0, { ignoreReleasedSince: true });
    process.stdout.write(line(kind, `round ${round + 1} before (unlessReleasedSince ignored)`, before));
    const after = await oneMode(kind, 'per-slot', 0, TTL_MS, replicas, 0);
    process.stdout.write(line(kind, `round ${round + 1} after`, after));
  }
}
