// Suspension detectors, on a fake clock: a guest that was paused, restored or blocked stands down.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NotLeaderError } from '../../src/core/errors.js';
import { lossOf, world, RENEW, TIMING } from './harness.js';

void test('wall-clock jump: the wall clock moved without the monotonic clock, so every term ends and is released', async () => {
  const w = world();
  try {
    const lh = w.leasehold({ suspension: { wallJumpMs: 2000, checkIntervalMs: 500 } });
    const suspected: string[] = [];
    lh.on('suspected', (d) => suspected.push(d));
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    const holder = lh.holder;
    w.clock.stepWall(1999); // within tolerance
    await w.clock.advance(500);
    assert.equal(term.signal.aborted, false);
    w.clock.suspend(5000); // a woken guest whose wall clock was re-synced
    await w.clock.advance(500);
    assert.deepEqual(suspected, ['wall-clock-jump']);
    assert.equal(lossOf(term).reason, 'suspended');
    assert.notEqual(lh.holder, holder, 'a woken process takes a new identity');
    assert.equal(w.store.releases.length, 1, 'and hands the term back (nonce-guarded)');
  } finally {
    await w.close();
  }
});

void test('store-clock advance: the store clock ran further than ours between renewals (a restore with no clock re-sync)', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const suspected: string[] = [];
    lh.on('suspected', (d) => suspected.push(d));
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    await w.clock.advance(RENEW);
    assert.equal(term.signal.aborted, false);
    // 1s of the world's time this guest never saw (limit: max(ttl/4, 500ms) = 750ms); its
    // wall clock was not re-synced, so the wall-clock watchdog cannot see it.
    w.clock.suspendUnsynced(1000);
    await w.clock.advance(RENEW);
    assert.deepEqual(suspected, ['store-clock-advance']);
    assert.equal(lossOf(term).reason, 'suspended');
  } finally {
    await w.close();
  }
});

void test('a store clock that merely drifts within the limit ends nothing', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const suspected: string[] = [];
    lh.on('suspected', (d) => suspected.push(d));
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    for (let i = 0; i < 10; i++) {
      w.skewStore(50);
      await w.clock.advance(RENEW);
    }
    assert.deepEqual(suspected, []);
    assert.equal(term.signal.aborted, false);
  } finally {
    await w.close();
  }
});

void test('deadline passed: a blocked event loop noticed past the deadline is treated as a wake (every term ends, new identity)', async () => {
  const w = world();
  try {
    const lh = w.leasehold({ suspension: false });
    const suspected: string[] = [];
    lh.on('suspected', (d) => suspected.push(d));
    const lease = lh.lease('job', TIMING);
    const other = lh.lease('other', TIMING);
    const term = await lease.acquire();
    const otherTerm = await other.acquire();
    const holder = lh.holder;
    w.clock.block(5000); // no timer ran: the first thing to run is the work asking for its token
    assert.throws(() => lease.token, NotLeaderError);
    assert.deepEqual(suspected, ['deadline-passed']);
    assert.equal(lossOf(term).reason, 'suspended');
    assert.equal(lossOf(otherTerm).reason, 'suspended');
    assert.notEqual(lh.holder, holder);
  } finally {
    await w.close();
  }
});
