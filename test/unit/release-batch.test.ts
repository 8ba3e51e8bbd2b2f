// Releases sent together travel together: closing a process with N leases costs N / batch
// store calls, not N (core/release-batcher.ts). On the reference store, on a fake clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { world, TIMING } from './harness.js';

void test('closing a process that holds 120 leases sends one releaseMany, and every lease is free after', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const names = Array.from({ length: 120 }, (_, i) => `batch-${i}`);
    const terms = await Promise.all(names.map((n) => lh.lease(n, TIMING).acquire()));
    await lh.close();
    assert.equal(w.store.releaseBatches.length, 1, `one batch call (got ${w.store.releaseBatches.length})`);
    assert.deepEqual([...w.store.releaseBatches[0]!].sort(), [...names].sort());
    for (const n of names) assert.equal(w.store.row(n)?.holder, null, `${n} is free`);
    assert.ok(terms.every((t) => t.signal.aborted), 'every term ended locally, before the store answered');
  } finally {
    await w.close();
  }
});

void test("batches are cut at the store's maxClaimBatch", async () => {
  const w = world();
  Object.defineProperty(w.store, 'maxClaimBatch', { value: 50 });
  try {
    const lh = w.leasehold();
    await Promise.all(Array.from({ length: 120 }, (_, i) => lh.lease(`cap-${i}`, TIMING).acquire()));
    await lh.close();
    assert.deepEqual(
      w.store.releaseBatches.map((b) => b.length),
      [50, 50, 20],
    );
  } finally {
    await w.close();
  }
});

void test('a lone release is one plain release call, not a batch', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const lease = lh.lease('alone', TIMING);
    await lease.acquire();
    assert.equal(await lease.release(), true);
    assert.equal(w.store.releaseBatches.length, 0);
    assert.equal(w.store.releases.length, 1);
  } finally {
    await w.close();
  }
});

void test('a batch that fails: every caller has already stood down, close resolves, and the rows wait for their expiry', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const leases = Array.from({ length: 10 }, (_, i) => lh.lease(`down-${i}`, TIMING));
    await Promise.all(leases.map((l) => l.acquire()));
    w.store.fail();
    const errors: string[] = [];
    for (const l of leases) l.on('store-error', (_err, op) => errors.push(op));
    await lh.close();
    assert.equal(w.store.releaseBatches.length, 1, 'one attempt');
    assert.deepEqual(errors, leases.map(() => 'release'), "each lease reports the batch's error");
    assert.ok(leases.every((l) => l.state !== 'leading' && l.state !== 'jeopardy'), 'no lease believes it leads');
    assert.ok(leases.every((_, i) => w.store.row(`down-${i}`)?.holder !== null), 'the store still has them held: they expire instead');
  } finally {
    await w.close();
  }
});

void test('one name at most once per batch: a second release of the same name goes in a batch of its own', async () => {
  const w = world();
  try {
    const { ReleaseBatcher } = await import('../../src/core/release-batcher.js');
    const batcher = new ReleaseBatcher(w.store);
    const req = (name: string) => ({ name, holder: 'h', expect: ['n'] });
    await Promise.all([batcher.release(req('a')), batcher.release(req('b')), batcher.release(req('a')), batcher.release(req('c'))]);
    assert.deepEqual(w.store.releaseBatches, [['a', 'b', 'c']], 'the first three travel together');
    assert.equal(w.store.releases.length, 4, 'the second "a" is its own plain release');
  } finally {
    await w.close();
  }
});
