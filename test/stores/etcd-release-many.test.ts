// etcd's batch release (src/backends/etcd/release.ts) when the answer to its write is lost: the
// member pool (members.ts) sends the write again once the attempt's deadline passes, the first
// one having landed. Real etcd (LEASEHOLD_TEST_ETCD_URL); the lost answer is made by a client
// wrapper that lets the write through and then fails the call as gRPC would at the deadline.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createEtcdStore, type Etcd3Like } from '../../src/backends/etcd/index.js';
import type { EtcdTxnRequest } from '../../src/backends/etcd/client.js';
import { deleteEtcdKeys, etcdAdmin, freshEtcdPrefix } from '../helpers/etcd-store.js';

/** Named as gRPC's: the member pool treats the class by name as a transport failure, outcome unknown. */
class GRPCDeadlineExceededError extends Error {}

/** The batch write: one nested Txn per lease, each deleting a term key. */
const isBatchEnd = (req: EtcdTxnRequest): boolean =>
  (req.success ?? []).some((op) => 'request_txn' in op && (op.request_txn?.success ?? []).some((inner) => 'request_delete_range' in inner));

function losingFirstBatchAnswer(real: Etcd3Like): { client: Etcd3Like; lost: () => number } {
  let lost = 0;
  const client: Etcd3Like = {
    ...real,
    kv: {
      txn: async (req, o) => {
        const answer = await real.kv.txn(req, o);
        if (lost > 0 || !isBatchEnd(req)) return answer;
        lost++;
        // Applied, and its answer never arrives: the call ends at its attempt deadline.
        const deadline = Number(o?.deadline ?? Date.now());
        await sleep(Math.max(0, deadline - Date.now()) + 5);
        throw new GRPCDeadlineExceededError('4 DEADLINE_EXCEEDED: Deadline exceeded (its answer was lost)');
      },
      range: (r, o) => real.kv.range(r, o),
      deleteRange: (r, o) => real.kv.deleteRange(r, o),
    },
  };
  return { client, lost: () => lost };
}

void describe('etcd releaseMany: a write whose answer was lost and was sent again', () => {
  void it('answers true for every lease it released, once each in the history', async () => {
    const prefix = freshEtcdPrefix();
    const real = await etcdAdmin();
    const w = losingFirstBatchAnswer(real);
    const store = await createEtcdStore({ client: w.client, prefix });
    try {
      await store.migrate();
      const names = ['a', 'b', 'c'];
      const got = await store.claim(names.map((name) => ({ name, holder: 'h', ttlMs: 30_000, expect: null, nextNonce: `${name}-1` })));
      assert.deepEqual(got.map((g) => g.outcome), ['acquired', 'acquired', 'acquired']);
      const answers = await store.releaseMany(names.map((name) => ({ name, holder: 'h', expect: [`${name}-1`] })));
      assert.equal(w.lost(), 1, 'the batch write was sent, landed, and its answer lost');
      assert.deepEqual(answers, [true, true, true], 'a release that landed is answered true, not "was not held"');
      for (const name of names) {
        const events = (await store.history({ name })).map((e) => e.event);
        assert.deepEqual(events, ['acquired', 'released'], `history of ${name}`);
      }
      // And the leases are free: a new holder takes each at once.
      const next = await store.claim(names.map((name) => ({ name, holder: 'h2', ttlMs: 30_000, expect: null, nextNonce: `${name}-2` })));
      assert.deepEqual(next.map((g) => g.outcome), ['acquired', 'acquired', 'acquired']);
    } finally {
      await store.close();
      await deleteEtcdKeys(prefix);
      real.close();
    }
  });
});
