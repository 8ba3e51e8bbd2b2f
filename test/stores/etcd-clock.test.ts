// The etcd store reads time only from the clock it is given (EtcdStoreOptions.clock): what it
// reports and writes is that clock's time, and its calls still meet their deadlines when that
// clock is far from the process's own (gRPC's deadlines are process wall time: time.ts).
// Real etcd (LEASEHOLD_TEST_ETCD_URL, default 127.0.0.1:2379).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createEtcdStore } from '../../src/backends/etcd/index.js';
import type { ClaimRequest, ClaimResult } from '../../src/backends/store.js';
import { realClock, type Clock } from '../../src/core/clock.js';
import { deleteEtcdKeys, freshEtcdPrefix, TEST_ETCD_URL } from '../helpers/etcd-store.js';

const HOUR = 3_600_000;
const TTL = 4000;

/** The process's clocks, its wall time `offsetMs` away (a host whose clock is that far off, or a test's clock). */
const skewed = (offsetMs: number): Clock => ({ ...realClock, wallNow: () => Date.now() + offsetMs });

async function one(claim: Promise<ClaimResult[]>): Promise<ClaimResult> {
  const [r] = await claim;
  assert.ok(r);
  return r;
}

void describe('etcd store: the injected clock', () => {
  for (const offset of [-HOUR, HOUR]) {
    void it(`a clock an hour ${offset < 0 ? 'behind' : 'ahead'}: answers, history and list are on it, and every call (grant, Txn, session keepalive) meets its deadline`, async () => {
      const prefix = freshEtcdPrefix();
      const store = await createEtcdStore({ url: TEST_ETCD_URL, prefix, clock: skewed(offset), callTimeoutMs: 3000 });
      try {
        await store.migrate();
        const before = Date.now() + offset;
        const req = (expect: string[] | null, nextNonce: string): ClaimRequest => ({ name: 'job', holder: 'h24', ttlMs: TTL, expect, nextNonce });
        const acquired = await one(store.claim([req(null, 'a')]));
        assert.equal(acquired.outcome, 'acquired');
        // A deadline an hour in the past, handed to gRPC as it is, fails every call at once; an
        // hour in the future never times out: the renewals below go through the session (one
        // Txn, then a keepalive) on the converted deadline.
        const moved = await one(store.claim([req(['a'], 'b')]));
        const ticked = await one(store.claim([req(['b'], 'c')]));
        const after = Date.now() + offset;
        for (const r of [acquired, moved, ticked]) {
          assert.ok(r.storeNowMs >= before && r.storeNowMs <= after, `storeNowMs ${r.storeNowMs - before}ms after the first call, on the given clock`);
          const left = r.expiresAtMs! - r.storeNowMs;
          // The TTL less the round trip: a lower bound of what etcd keeps, whatever the offset.
          assert.ok(left > 0 && left <= TTL, `${left}ms left of a ${TTL}ms term`);
        }
        assert.deepEqual([moved.outcome, ticked.outcome], ['renewed', 'renewed']);
        const [info] = await store.list({ name: 'job' });
        assert.ok(info !== undefined && info.storeNowMs >= before, 'list on the given clock');
        assert.ok(Math.abs(info.termStartedAtMs! - acquired.storeNowMs) < 5000, 'the term began by the given clock');
        const [entry] = await store.history({ name: 'job' });
        assert.ok(entry !== undefined && entry.atMs >= before && entry.atMs <= after, 'history is written on the given clock');
        assert.ok((await store.now()) >= after);
        assert.equal(await store.release({ name: 'job', holder: 'h24', expect: ['c'] }), true);
      } finally {
        await store.close();
        await deleteEtcdKeys(prefix);
      }
    });
  }
});
