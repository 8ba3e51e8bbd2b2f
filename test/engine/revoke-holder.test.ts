/**
 * An operator's revocation reaches the holder through the store's "freed" channel, not at the
 * holder's next scheduled renewal: the notification makes the holder renew at once, and that
 * renewal is answered "revoked". On every store that has a freed channel, with a real second
 * connection doing the revocation.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Leasehold } from '../../src/core/leasehold.js';
import { LeaseLostError } from '../../src/core/errors.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

for (const kind of selectedStores()) {
  void describe(`a revoked holder hears of it on ${kind}`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      await t?.cleanup();
    });

    void it('revoke from another connection ends the term before its first scheduled renewal', async () => {
      assert.ok(t.store.watchFreed !== undefined, `${kind} has a freed channel`);
      const lh = new Leasehold({ store: t.store });
      const operator = await t.open();
      try {
        const name = uniq('revoked');
        const lease = lh.lease(name, { ttl: '30s' });
        const term = await lease.acquire({ wait: false });
        let renewals = 0;
        lease.on('renewed', () => void renewals++);
        // Let the holder's listener come up (it is opened when the term begins).
        await new Promise((r) => setTimeout(r, 300));
        const lost = new Promise<LeaseLostError>((resolve) => term.signal.addEventListener('abort', () => resolve(term.signal.reason as LeaseLostError), { once: true }));
        const start = performance.now();
        const r = await operator.revoke(name, 'test: operator release --force');
        assert.equal(r.revoked, true);
        // The logic bound: the first scheduled renewal is renewMs (10s) after the acquisition.
        // Without the notification the term could only end there; give up just before it.
        const bound = lease.timing.renewMs - 1500;
        const err = await Promise.race([
          lost,
          new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), bound).unref()),
        ]);
        const ms = performance.now() - start;
        assert.notEqual(err, 'timeout', `the holder still believed it led ${bound}ms after the revocation (renew interval ${lease.timing.renewMs}ms)`);
        assert.ok(err instanceof LeaseLostError);
        assert.equal(err.reason, 'revoked');
        assert.equal(renewals, 0, 'the notification never counts as a renewal');
        assert.equal(lease.isLeader, false);
        console.log(`# ${kind}: revocation reached the holder in ${ms.toFixed(1)}ms (ttl 30s, renew interval ${lease.timing.renewMs}ms)`);
      } finally {
        await lh.close();
      }
    });

    void it('a freed notification for a lease still held costs one renewal and changes nothing', async () => {
      const lh = new Leasehold({ store: t.store });
      const other = new Leasehold({ store: await t.open() });
      try {
        const name = uniq('kept');
        const lease = lh.lease(name, { ttl: '30s' });
        const term = await lease.acquire({ wait: false });
        const deadlineBefore = lease.msUntilDeadline!;
        let renewals = 0;
        lease.on('renewed', () => void renewals++);
        await new Promise((r) => setTimeout(r, 300));
        // Another lease name freed in the same namespace: not ours, no renewal.
        const unrelated = other.lease(uniq('unrelated'), { ttl: '30s' });
        await unrelated.acquire({ wait: false });
        await unrelated.release();
        await new Promise((r) => setTimeout(r, 500));
        assert.equal(renewals, 0, 'a notification for another name does not renew ours');
        assert.equal(term.signal.aborted, false);
        assert.ok(lease.isLeader);
        assert.ok(lease.msUntilDeadline! <= deadlineBefore, 'nothing extended the term without a renewal');
      } finally {
        await other.close();
        await lh.close();
      }
    });
  });
}
