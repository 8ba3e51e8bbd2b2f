// etcd's unlessReleasedSince refusal (src/backends/etcd/claim.ts, refusedSince) judges a term's
// start, written by its granter's wall clock, against a contender's time from the ledger (etcd's
// Date header). Where the two clocks disagree it grants as usual, as before the refusal: a start
// ahead of the claimant's own clock, and a term of the claimant's own holder id. A refusal only
// saves a term; a wrong one would cost every slot while the clock stays ahead.
// Real etcd (LEASEHOLD_TEST_ETCD_URL, default 127.0.0.1:2379).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createEtcdStore } from '../../src/backends/etcd/index.js';
import type { ClaimResult } from '../../src/backends/store.js';
import { realClock, type Clock } from '../../src/core/clock.js';
import { deleteEtcdKeys, freshEtcdPrefix, TEST_ETCD_URL } from '../helpers/etcd-store.js';

const AHEAD_MS = 30_000;
const skewed = (offsetMs: number): Clock => ({ ...realClock, wallNow: () => Date.now() + offsetMs });

void describe('etcd store: unlessReleasedSince across clocks', () => {
  void it('refuses a term begun since by another holder; grants past one begun on a clock ahead, or by its own holder id', async () => {
    const prefix = freshEtcdPrefix();
    const right = await createEtcdStore({ url: TEST_ETCD_URL, prefix });
    const ahead = await createEtcdStore({ url: TEST_ETCD_URL, prefix, clock: skewed(AHEAD_MS) });
    try {
      await right.migrate();
      const claim = async (store: typeof right, holder: string, nonce: string, since: number): Promise<ClaimResult> => (await store.claim([{ name: 'job', holder, ttlMs: 4000, expect: null, nextNonce: nonce, unlessReleasedSince: since }]))[0]!;
      const release = async (store: typeof right, holder: string, nonce: string): Promise<void> => assert.equal(await store.release({ name: 'job', holder, expect: [nonce] }), true);
      const slot = Date.now() - 1000;
      // A right clock's term, begun since the slot and released: another holder is refused.
      assert.equal((await claim(right, 'A', 'a1', slot)).outcome, 'acquired');
      await release(right, 'A', 'a1');
      const refused = await claim(right, 'B', 'b1', slot);
      assert.equal(refused.outcome === 'busy' && refused.releasedSince, true, `B refused: ${refused.outcome}`);
      // A host 30 s ahead begins a term (its start reads 30 s in the future) and releases it: to a
      // contender on a right clock that start is ahead of its own clock, so it is granted.
      assert.equal((await claim(ahead, 'F', 'f1', Date.now())).outcome, 'acquired');
      await release(ahead, 'F', 'f1');
      const granted = await claim(right, 'B', 'b2', Date.now());
      assert.equal(granted.outcome, 'acquired', 'a start on a clock ahead of the claimant refuses nothing');
      await release(right, 'B', 'b2');
      // The fast host again, alone, at its next slot (the store's time, not its own): its own
      // earlier term reads as begun since, on its own clock; it is granted.
      assert.equal((await claim(ahead, 'F', 'f2', Date.now())).outcome, 'acquired');
      await release(ahead, 'F', 'f2');
      const own = await claim(ahead, 'F', 'f3', Date.now());
      assert.equal(own.outcome, 'acquired', 'a term of its own holder id refuses nothing');
      await release(ahead, 'F', 'f3');
    } finally {
      await right.close();
      await ahead.close();
      await deleteEtcdKeys(prefix);
    }
  });
});
