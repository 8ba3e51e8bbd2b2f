/**
 * Retention's cost to a running schedule: 100,000 old slot rows of an every-second schedule are
 * pruned (`pruneLedger`, 30 days' worth kept as the default would: here everything older than a
 * day, the newest 100 rows kept) while that schedule runs in another process. Prints the prune's
 * time and the replica's worst and median store-call time before and during it, and its slot
 * start lateness during it. `node dist/bench/retention.js [postgres|sqlite|...] [rows]`.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { openSlotLedger } from '../src/backends/index.js';
import { newNonce } from '../src/core/identity.js';
import { pruneLedger } from '../src/scheduler/retention.js';
import { makeTestStore, type StoreKind } from '../test/helpers/stores.js';
import { sleep, stat } from './lib.js';

const kind = (process.argv[2] ?? 'sqlite') as StoreKind;
const ROWS = Number(process.argv[3] ?? 100_000);
const DAY = 86_400_000;
const name = 'every-second';

const ts = await makeTestStore(kind);
const store = await ts.open();
const ledger = await openSlotLedger(store, ts.url);
try {
  // The history: ROWS slots a second apart, ending two days ago, written by an ended term.
  const nonce = newNonce();
  const [term] = await store.claim([{ name, holder: 'seed', ttlMs: 600_000, expect: null, nextNonce: nonce }]);
  if (term?.outcome !== 'acquired') throw new Error('could not take the lease to seed the ledger');
  const end = Math.floor(((await store.now()) - 2 * DAY) / 1000) * 1000;
  for (let i = 0; i < ROWS; i += 5000) {
    const slots = Array.from({ length: Math.min(5000, ROWS - i) }, (_, j) => end - (ROWS - 1 - i - j) * 1000).map((t) => ({ key: new Date(t).toISOString(), slotAtMs: t }));
    await ledger.skip({ name, holder: 'seed', token: term.token, reason: 'seed', slots });
  }
  await store.release({ name, holder: 'seed', expect: [nonce] });
  // A table that grew to 100,000 rows has been analyzed by autovacuum by then; one filled a
  // moment ago has not, and its planner, expecting a few rows, sorts the whole name per batch.
  // LEASEHOLD_BENCH_NO_ANALYZE=1 measures that case.
  if (kind === 'postgres' && process.env['LEASEHOLD_BENCH_NO_ANALYZE'] !== '1') {
    const pg = ledger as unknown as { pool: { query(q: string): Promise<unknown> }; s: string };
    await pg.pool.query(`ANALYZE ${pg.s}.slots`);
  }
  const seeded = (await ledger.records(name, { limit: 10_000_000 })).length;

  const replica = spawn(process.execPath, [fileURLToPath(new URL('./retention-replica.js', import.meta.url)), JSON.stringify({ url: ts.url, name })], { stdio: ['ignore', 'pipe', 'inherit'] });
  const calls: Array<{ ms: number; at: number; what: string }> = [];
  const late: Array<{ ms: number; at: number }> = [];
  let up!: () => void;
  const isUp = new Promise<void>((r) => (up = r));
  let buf = '';
  replica.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    const lines = buf.split('\n');
    buf = lines.pop()!;
    for (const l of lines) {
      const p = l.split(' ');
      if (p[0] === 'up') up();
      else if (p[0] === 'call') calls.push({ what: p[1]!, ms: Number(p[2]), at: Number(p[3]) });
      else if (p[0] === 'late') late.push({ ms: Number(p[1]), at: Number(p[2]) });
    }
  });
  await isUp;
  // Past the replica's startup catch-up (the window's missed slots), then a baseline.
  await sleep(8000);
  const baselineFrom = Date.now();
  await sleep(6000);
  const t0 = Date.now();
  const p0 = performance.now();
  const r = await pruneLedger(ledger, { name, olderThan: '1d', keep: 100 });
  const pruneMs = performance.now() - p0;
  const t1 = Date.now();
  await sleep(2000);
  replica.kill('SIGTERM');
  await new Promise((res) => replica.once('exit', res));
  const during = calls.filter((c) => c.at >= t0 && c.at <= t1 + 50);
  const before = calls.filter((c) => c.at >= baselineFrom && c.at < t0);
  const claims = (xs: typeof calls): number[] => xs.filter((c) => c.what === 'claim').map((c) => c.ms);
  const fmt = (xs: number[]): string => {
    const s = stat(xs);
    return `n=${s.n} median ${s.median.toFixed(1)} ms, p90 ${s.p90.toFixed(1)} ms, max ${xs.length === 0 ? 'n/a' : Math.max(...xs).toFixed(1)} ms`;
  };
  console.log(`retention on ${kind}: seeded ${seeded} rows; pruned ${r.deleted} in ${pruneMs.toFixed(0)} ms, ${r.batches} batches (${(pruneMs / Math.max(1, r.batches)).toFixed(1)} ms per batch of 1000)`);
  console.log(`  replica's claims   before: ${fmt(claims(before))}`);
  console.log(`  replica's claims   during: ${fmt(claims(during))}`);
  console.log(`  every store call   before: ${fmt(before.map((c) => c.ms))}`);
  console.log(`  every store call   during: ${fmt(during.map((c) => c.ms))}`);
  console.log(`  slot start lateness during: ${fmt(late.filter((l) => l.at >= t0 && l.at <= t1 + 1000).map((l) => l.ms))}`);
  console.log(`  rows left: ${(await ledger.records(name, { limit: 10_000_000 })).length}`);
} finally {
  await ledger.close();
  await store.close();
  await ts.cleanup();
}
