// Closing a process that holds many leases on etcd (issue 34's bench: closing 1,000 and 10,000
// leases failed, "etcd is unavailable during release (DEADLINE_EXCEEDED ...)", and the leases
// were left to expire). Real etcd (LEASEHOLD_TEST_ETCD_URL). The releases go as Leasehold.close
// sends them (core/release-batcher.ts: one releaseMany per batch of maxClaimBatch).
//
// The store's call timeout is 1 s here, etcd's smallest sensible one: a release batch is many
// transactions, and what has to fit in one call's deadline is one of them (a chunk of at most
// (maxOpsPerTxn - 4) / 2 leases, a few milliseconds of etcd's time), not the whole close. Before,
// every chunk of every batch was sent at once under one deadline, so the close failed once the
// chunks queued in etcd took longer than the call timeout, whatever that was set to.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createEtcdStore, type Etcd3Like } from '../../src/backends/etcd/index.js';
import type { EtcdTxnRequest } from '../../src/backends/etcd/client.js';
import { ReleaseBatcher } from '../../src/core/release-batcher.js';
import { newNonce } from '../../src/core/identity.js';
import { TEST_ETCD_URL, deleteEtcdKeys, etcdAdmin, freshEtcdPrefix } from '../helpers/etcd-store.js';

const N = 10_000;

void describe('etcd: closing 10,000 leases', () => {
  void it('releases every one, with a call timeout of 1 s', { timeout: 120_000 }, async () => {
    const prefix = freshEtcdPrefix();
    const store = await createEtcdStore({ url: TEST_ETCD_URL, prefix, callTimeoutMs: 1000 });
    try {
      await store.migrate();
      const step = 500;
      const names = Array.from({ length: N }, (_, i) => `close-${i}`);
      const nonces = names.map(() => newNonce());
      // Acquired in batches of 500 (each well inside its 1 s), so only the close is under test.
      for (let i = 0; i < N; i += step) {
        const part = names.slice(i, i + step);
        const got = await store.claim(part.map((name, j) => ({ name, holder: 'h', ttlMs: 60_000, expect: null, nextNonce: nonces[i + j]! })));
        assert.ok(got.every((g) => g.outcome === 'acquired'), 'precondition: every lease acquired');
      }
      const batcher = new ReleaseBatcher(store);
      const answers = await Promise.all(names.map((name, i) => batcher.release({ name, holder: 'h', expect: [nonces[i]!] })));
      assert.equal(answers.filter((a) => a).length, N, 'every release answered true');
      // And they are free: spot-check that a new holder takes some at once.
      const sample = [0, 1, 4_999, 5_000, N - 1].map((i) => names[i]!);
      const next = await store.claim(sample.map((name) => ({ name, holder: 'h2', ttlMs: 60_000, expect: null, nextNonce: newNonce() })));
      assert.deepEqual(next.map((g) => g.outcome), sample.map(() => 'acquired'));
    } finally {
      await store.close();
      await deleteEtcdKeys(prefix);
    }
  });

  void it('stops at the first chunk that fails: the chunks still waiting for a lane are not sent', async () => {
    const prefix = freshEtcdPrefix();
    const real = await etcdAdmin();
    let releaseReads = 0;
    let failing = false;
    // A batch release's read: a Txn of ranges only, over term and state keys.
    const isReleaseRead = (req: EtcdTxnRequest): boolean => (req.success ?? []).length > 2 && (req.success ?? []).every((op) => 'request_range' in op);
    const client: Etcd3Like = {
      ...real,
      kv: {
        txn: async (req, o) => {
          if (failing && isReleaseRead(req)) {
            releaseReads++;
            // Not a transport error: the member pool passes it on at once, as a refusal.
            throw new Error('refused by the test');
          }
          return real.kv.txn(req, o);
        },
        range: (r, o) => real.kv.range(r, o),
        deleteRange: (r, o) => real.kv.deleteRange(r, o),
      },
    };
    // 16 ops per Txn: 6 leases per chunk, so 60 leases are 10 chunks, more than the 4 lanes.
    const store = await createEtcdStore({ client, prefix, maxOpsPerTxn: 16 });
    try {
      await store.migrate();
      const names = Array.from({ length: 60 }, (_, i) => `stop-${i}`);
      const got = await store.claim(names.map((name) => ({ name, holder: 'h', ttlMs: 60_000, expect: null, nextNonce: `${name}-1` })));
      assert.ok(got.every((g) => g.outcome === 'acquired'), 'precondition: every lease acquired');
      failing = true;
      await assert.rejects(store.releaseMany(names.map((name) => ({ name, holder: 'h', expect: [`${name}-1`] }))));
      assert.ok(releaseReads >= 1 && releaseReads <= 4, `${releaseReads} chunks were sent after the first failed: at most the 4 already in their lanes`);
    } finally {
      await store.close();
      await deleteEtcdKeys(prefix);
      real.close();
    }
  });
});
