/**
 * On etcd a generation is the ownership key's mod revision plus the token floor it was written
 * under. `migrate({ minToken: N })` must put every later generation above N (as it does every
 * later lease token), leave a recorded generation as it was (a generation never changes under
 * its owner), and, since it ends every live term, leave the agents dead until they come back.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { newNonce } from '../../src/core/identity.js';
import { OwnerDeadError, StoreUnavailableError } from '../../src/core/errors.js';
import { openFleet } from '../../src/fleet/open.js';
import type { Fleet } from '../../src/fleet/fleet.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

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
  });
}
