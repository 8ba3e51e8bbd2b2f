/**
 * Lease.release() called twice at once (a shutdown hook and the work's own finally, say): the
 * second call must not resolve while the first call's release is still on its way to the store,
 * or a caller that closes the store next loses the release, and the lease stays held for a TTL.
 * The same shape as Elector.stop() called twice (elector-stop.test.ts), one level down.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ReleaseRequest } from '../../src/core/port.js';
import { world, TIMING } from './harness.js';

void test('a second release() while the first is in flight resolves only once the store answered it, with the same answer', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const lease = lh.lease('job', TIMING);
    let term: { token: bigint } | undefined;
    void lease.acquire().then((t) => (term = t));
    await w.clock.until(() => term !== undefined, 5000, 10);

    let letGo!: () => void;
    const slow = new Promise<void>((resolve) => (letGo = resolve));
    let answered = false;
    const release = w.store.release.bind(w.store);
    const releaseMany = w.store.releaseMany.bind(w.store);
    w.store.release = async (req: ReleaseRequest, o) => {
      await slow;
      const r = await release(req, o);
      answered = true;
      return r;
    };
    w.store.releaseMany = async (reqs: readonly ReleaseRequest[], o) => {
      await slow;
      const r = await releaseMany(reqs, o);
      answered = true;
      return r;
    };

    const first = lease.release();
    let secondDone = false;
    const second = lease.release().then((r) => {
      secondDone = true;
      return r;
    });
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    assert.equal(secondDone, false, 'the second release() resolved while the first was still on its way to the store');
    letGo();
    const [a, b] = await Promise.all([first, second]);
    assert.ok(answered, 'a release() resolved before the store answered');
    assert.equal(a, true, 'the first release was confirmed by the store');
    assert.equal(b, a, 'the second call answers what the release it waited for answered');
    assert.equal(w.store.row('job')?.endedBy, 'released');
  } finally {
    await w.close();
  }
});
