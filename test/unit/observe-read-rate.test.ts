// The load a watcher puts on the store (issue 31 item 4): about one read per TTL whatever the
// lease did last. Fake clock, in-memory store: hours of watching in milliseconds, the same way
// every run. The bounds come from the watcher's documented schedule (src/observe/index.ts):
//   - a held lease is read just after the expiry the store reported: while its holder renews at
//     TTL/3 that expiry is 2/3 to 1 TTL ahead, so at most 1.5 reads per TTL, and at least one
//     read per TTL + EXPIRY_SLACK (the promised wake-up at the expiry);
//   - a free, expired or absent lease is re-read after 100, 200, 400 ms, ... up to its TTL (30 s
//     when no TTL is known), then once per that interval for as long as it lasts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Lease } from '../../src/core/lease.js';
import { LeaseWatcher, observe, type LeaseChange } from '../../src/observe/index.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { DEFAULT_TTL_MS } from '../../src/core/config.js';
import { FakeClock } from './fake-clock.js';
import { MemoryStore } from './memory-store.js';
import { TTL } from './harness.js';

const FIRST_FAST_MS = 100;
const EXPIRY_SLACK_MS = 50;

/** How many reads the back-off from 100 ms takes to reach `capMs` (100, 200, 400, ... < cap). */
function rampReads(capMs: number): number {
  let n = 0;
  for (let d = FIRST_FAST_MS; d < capMs; d *= 2) n++;
  return n;
}

/** The store, with every list() it answers timestamped: the reads the watcher cost it. */
function countReads(store: MemoryStore, clock: FakeClock): { store: LeaseStore; reads: number[]; since(at: number): number } {
  const reads: number[] = [];
  const counted = new Proxy(store, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (prop === 'list') {
        return (...args: Parameters<LeaseStore['list']>) => {
          reads.push(clock.monoNow());
          return target.list(...args);
        };
      }
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { store: counted, reads, since: (at) => reads.filter((r) => r >= at).length };
}

function setup(): { clock: FakeClock; store: MemoryStore; lh: Leasehold } {
  const clock = new FakeClock();
  const store = new MemoryStore(() => clock.outsideNow());
  return { clock, store, lh: new Leasehold({ store, clock }) };
}

/** Releases a held lease `gapMs` after its next renewal: the row's expiry becomes the release instant. */
async function releaseRightAfterRenewal(clock: FakeClock, lease: Lease, gapMs: number): Promise<void> {
  let renewed = false;
  lease.on('renewed', () => (renewed = true));
  await clock.until(() => renewed, 2 * TTL, 1);
  await clock.advance(gapMs);
  await lease.release();
}

void test('a watcher on a lease released a few ms after a renewal backs off to the TTL, not to the gap', async () => {
  const { clock, store, lh } = setup();
  const { store: counted, reads, since } = countReads(store, clock);
  const watcher = new LeaseWatcher(counted, { name: 'job', clock });
  const changes: LeaseChange[] = [];
  watcher.on('change', (c) => changes.push(c));
  try {
    const lease = lh.lease('job', { ttl: TTL });
    await lease.acquire();
    await watcher.start();
    assert.equal(watcher.current.get('job')?.state, 'held');
    await releaseRightAfterRenewal(clock, lease, 3);
    await clock.until(() => changes.some((c) => c.kind === 'freed'), TTL);
    const freed = watcher.current.get('job')!;
    // The report's row: expiry minus last renewal is the 3 ms before the release, not the TTL.
    assert.ok(freed.expiresAtMs! - freed.renewedAtMs! < 10, `gap ${freed.expiresAtMs! - freed.renewedAtMs!}ms`);
    const releasedAt = clock.monoNow();
    await clock.advance(10 * TTL);
    const total = since(releasedAt);
    // After the release: the back-off's ramp to the TTL, then one read per TTL, plus one for
    // rounding. The old cap (the 3 ms gap, floored at 100 ms) read 10 times a second: ~300.
    const bound = rampReads(TTL) + 10 + 1;
    assert.ok(total <= bound, `${total} reads in 10 TTLs after the release (bound ${bound}): ${JSON.stringify(watcher.reads)}`);
    // Steady state, past the ramp: about one read per TTL.
    const late = since(releasedAt + 5 * TTL);
    assert.ok(late <= 5 + 1, `${late} reads in the last 5 TTLs`);
    assert.ok(late >= 4, `${late} reads in the last 5 TTLs: a free lease is still re-read once per TTL`);
    assert.ok(reads.length > 0);
  } finally {
    await watcher.close();
    await lh.close();
  }
});

void test('observe() started after such a release (no TTL known) backs off to the 30 s default', async () => {
  const { clock, store, lh } = setup();
  const { store: counted, since } = countReads(store, clock);
  const lease = lh.lease('job', { ttl: TTL });
  await lease.acquire();
  await releaseRightAfterRenewal(clock, lease, 2);
  const obs = observe(counted, 'job', { clock });
  try {
    const it = obs[Symbol.asyncIterator]();
    const first = it.next();
    await clock.advance(0);
    assert.equal((await first).value?.lease.state, 'free');
    const start = clock.monoNow();
    await clock.advance(4 * DEFAULT_TTL_MS);
    const total = since(start);
    // The first read, the ramp to 30 s, then one read per 30 s, plus one for rounding. The
    // report measured 126 transactions in 12 s here (status --watch on a released 3 s lease).
    const bound = 1 + rampReads(DEFAULT_TTL_MS) + 4 + 1;
    assert.ok(total <= bound, `${total} reads in 120 s of a freed lease with no TTL known (bound ${bound}): ${JSON.stringify(obs.reads)}`);
  } finally {
    await obs.close();
    await lh.close();
  }
});

void test('a watcher on a lease held and renewed at TTL/3 reads at most 1.5 times per TTL, and at least once per TTL', async () => {
  const { clock, store, lh } = setup();
  const { store: counted, since } = countReads(store, clock);
  const watcher = new LeaseWatcher(counted, { name: 'job', clock });
  try {
    await lh.lease('job', { ttl: TTL }).acquire();
    await watcher.start();
    const start = clock.monoNow();
    await clock.advance(10 * TTL);
    const total = since(start);
    assert.equal(watcher.current.get('job')?.state, 'held');
    // Read at each expiry it saw (2/3 to 1 TTL ahead): 15 at most in 10 TTLs, plus one for rounding.
    assert.ok(total <= 15 + 1, `${total} reads in 10 TTLs of a renewing holder: ${JSON.stringify(watcher.reads)}`);
    // The promised wake-up just after each reported expiry: never more than TTL + slack apart.
    assert.ok(total >= Math.floor((10 * TTL) / (TTL + EXPIRY_SLACK_MS)), `${total} reads in 10 TTLs`);
  } finally {
    await watcher.close();
    await lh.close();
  }
});

void test('a watcher on a held lease whose holder dies sees it expire just after the reported expiry, then backs off to the TTL', async () => {
  const { clock, store, lh } = setup();
  const { store: counted, since } = countReads(store, clock);
  const watcher = new LeaseWatcher(counted, { name: 'job', clock });
  const changes: { kind: string; at: number }[] = [];
  watcher.on('change', (c) => changes.push({ kind: c.kind, at: clock.monoNow() }));
  try {
    const [r] = await store.claim([{ name: 'job', holder: 'dead', ttlMs: TTL, expect: null, nextNonce: 'n-dead' }]);
    assert.equal(r?.outcome, 'acquired');
    const expiresAt = clock.monoNow() + TTL;
    await watcher.start();
    await clock.advance(TTL + EXPIRY_SLACK_MS + 1);
    const expired = changes.find((c) => c.kind === 'expired');
    assert.ok(expired !== undefined, `no expiry seen by ${clock.monoNow() - expiresAt}ms after it: ${JSON.stringify(changes)}`);
    assert.ok(expired.at >= expiresAt, 'not before the store says');
    const start = clock.monoNow();
    await clock.advance(10 * TTL);
    const total = since(start);
    const bound = rampReads(TTL) + 10 + 1;
    assert.ok(total <= bound, `${total} reads in 10 TTLs of an expired lease (bound ${bound})`);
  } finally {
    await watcher.close();
    await lh.close();
  }
});

void test('a watcher on a name never held backs off to the 30 s default', async () => {
  const { clock, store } = setup();
  const { store: counted, since } = countReads(store, clock);
  const watcher = new LeaseWatcher(counted, { name: 'never', clock });
  try {
    await watcher.start();
    const start = clock.monoNow();
    await clock.advance(4 * DEFAULT_TTL_MS);
    const total = since(start);
    assert.equal(watcher.current.size, 0);
    const bound = rampReads(DEFAULT_TTL_MS) + 4 + 1;
    assert.ok(total <= bound, `${total} reads in 120 s of a name never held (bound ${bound})`);
    assert.ok(total >= 4, 'it keeps looking: an acquisition notifies nothing');
  } finally {
    await watcher.close();
  }
});

void test('a watcher of every lease (the dashboard) is not hurried by one lease released right after a renewal', async () => {
  const { clock, store, lh } = setup();
  const { store: counted, since } = countReads(store, clock);
  const watcher = new LeaseWatcher(counted, { clock, heldRefresh: 0.5 });
  try {
    await lh.lease('busy', { ttl: TTL }).acquire();
    const lease = lh.lease('job', { ttl: TTL });
    await lease.acquire();
    await watcher.start();
    await releaseRightAfterRenewal(clock, lease, 3);
    await clock.advance(TTL);
    const start = clock.monoNow();
    await clock.advance(10 * TTL);
    const total = since(start);
    // heldRefresh 0.5 re-reads the held lease at half its TTL: 2 per TTL; the freed one needs no
    // more than that (it is read once per TTL). ~300 with the old cap.
    assert.ok(total <= 2 * 10 + 2, `${total} reads in 10 TTLs: ${JSON.stringify(watcher.reads)}`);
  } finally {
    await watcher.close();
    await lh.close();
  }
});
