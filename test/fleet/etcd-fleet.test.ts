/**
 * etcd specifics of the fleet. A generation is the ownership key's mod revision plus the token floor it was written
 * under. `migrate({ minToken: N })` must put every later generation above N (as it does every
 * later lease token), leave a recorded generation as it was (a generation never changes under
 * its owner), and, since it ends every live term, leave the agents dead until they come back.
 * And a write whose answer was lost, re-sent by etcd3 on another member, is still this call's.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { newNonce } from '../../src/core/identity.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { OwnerDeadError } from '../../src/fleet/errors.js';
import { openFleet } from '../../src/fleet/open.js';
import type { Fleet } from '../../src/fleet/fleet.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';
import { createEtcdStore, type Etcd3Like } from '../../src/backends/etcd/index.js';
import { deleteEtcdKeys, etcdAdmin, freshEtcdPrefix } from '../helpers/etcd-store.js';

if (selectedStores().includes('etcd')) {
  void describe('fleet generations on etcd under a token floor', () => {
    let ts: TestStore;
    let fleet: Fleet;
    before(async () => {
      ts = await makeTestStore('etcd');
      fleet = await openFleet(ts.store);
    });
    after(async () => {
      await ts.cleanup();
    });

    const live = async (id: string): Promise<void> => {
      const [r] = await ts.store.claim([{ name: `agent/${id}`, holder: `h-${id}`, ttlMs: 30_000, expect: null, nextNonce: newNonce() }]);
      assert.equal(r?.outcome, 'acquired');
      await fleet.port.registerAgent(id, { pool: 'floor' });
    };

    void it('later generations are above the floor; recorded ones keep theirs; agents are dead until they claim again', async () => {
      await Promise.all([live('f1'), live('f2')]);
      const before = await fleet.place('kept', { labels: { pool: 'floor' } });
      const floor = before.generation + 1_000_000n;
      const other = await openFleet(await ts.open());
      assert.equal((await other.owner('kept')).generation, before.generation, 'a second process reads the same generation');

      const m = await ts.store.migrate({ minToken: floor });
      assert.equal(m.tokenFloor?.raised, true);
      assert.equal(m.tokenFloor?.endedTerms, 2, 'both agents’ liveness terms ended');
      const dead = await fleet.owner('kept').catch((e: unknown) => e);
      assert.ok(dead instanceof OwnerDeadError, `the floor ended the owner's term: ${String(dead)}`);
      assert.equal(dead.generation, before.generation, 'the recorded generation did not move under its owner');

      // The other process still has the old floor: one retryable answer, then the new floor.
      const stale = await other.owner('kept').catch((e: unknown) => e);
      assert.ok(stale instanceof StoreUnavailableError && /token floor/.test(stale.message), String(stale));
      await assert.rejects(other.owner('kept'), OwnerDeadError);

      await Promise.all([live('f1'), live('f2')]);
      const placed = await other.place('new', { labels: { pool: 'floor' } });
      assert.ok(placed.generation > floor, `placed at ${placed.generation}, floor ${floor}`);
      const moved = await fleet.reassign('kept', { from: before.agent });
      assert.ok(moved.generation > placed.generation, `moved at ${moved.generation} after ${placed.generation}`);
      assert.equal((await other.owner('kept')).generation, moved.generation);
    });

    void it('a placement or reassign that landed, re-sent after a lost answer, answers placed/moved, not owned', async () => {
      const prefix = freshEtcdPrefix();
      const admin = await etcdAdmin();
      // Every ownership write is sent twice and the second answer returned: what etcd3's failover
      // does when the first member applied it but the answer never came back.
      let twice = 0;
      const client: Etcd3Like = Object.create(admin) as Etcd3Like;
      Object.defineProperty(client, 'kv', {
        value: {
          ...admin.kv,
          range: admin.kv.range.bind(admin.kv),
          deleteRange: admin.kv.deleteRange.bind(admin.kv),
          txn: async (req: Parameters<Etcd3Like['kv']['txn']>[0], o?: { deadline?: Date | number }) => {
            const writes = req.success.some((op) => op.request_put?.key.toString().includes('/fleet/own/') === true);
            const first = await admin.kv.txn(req, o);
            if (!writes || !first.succeeded) return first;
            twice++;
            return admin.kv.txn(req, o);
          },
        },
      });
      const store = await createEtcdStore({ client, prefix });
      try {
        await store.migrate();
        const f = await openFleet(store);
        for (const id of ['w1', 'w2']) {
          const [r] = await store.claim([{ name: `agent/${id}`, holder: `h-${id}`, ttlMs: 30_000, expect: null, nextNonce: newNonce() }]);
          assert.equal(r?.outcome, 'acquired');
          await f.port.registerAgent(id, {});
        }
        const p = await f.place('retried');
        const moved = await f.reassign('retried', { from: p.agent });
        assert.ok(moved.generation > p.generation);
        assert.equal((await f.owner('retried')).generation, moved.generation);
        assert.deepEqual((await f.agents()).map((a) => a.owned).sort(), [0, 1], 'each write counted once');
        assert.equal(twice, 2, 'the placement and the reassign were each re-sent');
      } finally {
        await store.close();
        admin.close();
        await deleteEtcdKeys(prefix);
      }
    });
  });
}
