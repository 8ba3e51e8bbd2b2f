/**
 * Elector.stop() called twice, as a slot gate does (its signal's abort starts one stop, then it
 * awaits stop() itself): the second call must not resolve while the first call's release is
 * still on its way to the store, or a caller that closes the store next loses the release.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ReleaseRequest } from '../../src/core/port.js';
import { world, TIMING } from './harness.js';

void test('stop() after the signal abort that began stopping resolves only once the release reached the store', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const ac = new AbortController();
    const elected: bigint[] = [];
    const elector = lh.elect('job', { onElected: (t) => void elected.push(t.token) }, { ...TIMING, signal: ac.signal });
    await w.clock.until(() => elected.length === 1, 5000, 100);

    // The store takes its time to answer the release (a round trip on a loaded host).
    let letGo!: () => void;
    const slow = new Promise<void>((resolve) => (letGo = resolve));
    let released = false;
    const release = w.store.release.bind(w.store);
    const releaseMany = w.store.releaseMany.bind(w.store);
    w.store.release = async (req: ReleaseRequest, o) => {
      await slow;
      const r = await release(req, o);
      released = true;
      return r;
    };
    w.store.releaseMany = async (reqs: readonly ReleaseRequest[], o) => {
      await slow;
      const r = await releaseMany(reqs, o);
      released = true;
      return r;
    };

    ac.abort();
    let stopped = false;
    const stopping = elector.stop().then(() => (stopped = true));
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    assert.equal(stopped, false, 'stop() resolved while the release begun by the abort was still in flight');
    letGo();
    await stopping;
    assert.ok(released, 'stop() resolved before the store answered the release');
    assert.equal(w.store.row('job')?.endedBy, 'released');
  } finally {
    await w.close();
  }
});
