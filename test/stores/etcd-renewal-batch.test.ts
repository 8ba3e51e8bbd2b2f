// A process holding more than 5,000 leases on etcd renews them in one store call per tick (issue
// 34). On etcd a renewal tick is one swap of the session key and one keepalive whatever the
// number of leases (src/backends/etcd/session.ts), so the engine's default cut at 5,000 leases a
// call (core/renewal-batcher.ts, MAX_BATCH) made a process holding 10,000 pay two of them each
// tick: the bench's 10,000-lease row read "store calls/tick 2.00". Real etcd
// (LEASEHOLD_TEST_ETCD_URL), through Leasehold, with the store's claim calls counted.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createEtcdStore } from '../../src/backends/etcd/index.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { MAX_BATCH } from '../../src/core/renewal-batcher.js';
import type { ClaimRequest } from '../../src/core/port.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { selectedStores } from '../helpers/stores.js';
import { TEST_ETCD_URL, deleteEtcdKeys, freshEtcdPrefix } from '../helpers/etcd-store.js';

const N = MAX_BATCH + 1;

/** The store, with the size of every claim call it is sent recorded. */
function counted(store: LeaseStore): { store: LeaseStore; calls: number[] } {
  const calls: number[] = [];
  const proxy = new Proxy(store, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (prop === 'claim') {
        return (requests: readonly ClaimRequest[], options?: unknown) => {
          calls.push(requests.length);
          return (v as (r: readonly ClaimRequest[], o?: unknown) => unknown).call(target, requests, options);
        };
      }
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { store: proxy, calls };
}

void describe(`etcd: ${N} leases held by one process`, { skip: !selectedStores().includes('etcd') }, () => {
  void it('are acquired in one claim call and renewed in one call per tick', { timeout: 120_000 }, async () => {
    const prefix = freshEtcdPrefix();
    const etcd = await createEtcdStore({ url: TEST_ETCD_URL, prefix });
    await etcd.migrate();
    const { store, calls } = counted(etcd);
    const lh = new Leasehold({ store });
    try {
      // TTL 30 s: the terms outlast the test, also when part of the acquisitions are retried.
      const leases = Array.from({ length: N }, (_, i) => lh.lease(`many-${i}`, { ttl: 30_000 }));
      await Promise.all(leases.map((l) => l.acquire()));
      // Acquisitions asked for in one turn go out in one call. (Under load a part of it may miss
      // the call's deadline and be asked again; those are retries, not the batch.)
      assert.equal(calls[0], N, `acquisitions went out as calls of ${calls.join(', ')}`);
      // confirm() asks for a round trip of the term now: asked of every lease in one turn, the
      // renewals of all of them are due in one tick, which is what a steady process does once
      // its renewals have aligned (the batcher merges due times closer than half an interval).
      const before = calls.length;
      await Promise.all(leases.map((l) => l.confirm()));
      assert.deepEqual(calls.slice(before), [N], `one tick's ${N} renewals went out as calls of ${calls.slice(before).join(', ')}`);
      assert.ok(
        leases.every((l) => l.isLeader),
        'every lease still held',
      );
    } finally {
      await lh.close();
      await etcd.close();
      await deleteEtcdKeys(prefix);
    }
  });
});
