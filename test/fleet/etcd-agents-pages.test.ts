/**
 * etcd's `agents()` on a fleet whose agent records pass gRPC's 4 MB answer limit (about 15,000
 * agents with a few labels each). Read in one answer, the listing (`fleet ls`, the dashboard's
 * fleet view) failed with the over-size error; read a page of records at a time, with each page's
 * liveness keys, it lists every agent, the live ones live.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import { Agent } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';
import type { Fleet } from '../../src/fleet/fleet.js';
import type { EtcdRequestOp } from '../../src/backends/etcd/client.js';
import { etcdAdmin } from '../helpers/etcd-store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

/** Records of about 450 bytes: 12,000 of them are 5 MB, over the limit. */
const SEEDED = 12_000;
const LABEL = 'x'.repeat(380);

if (!selectedStores().includes('etcd')) {
  console.log('# etcd-agents-pages: skipped, LEASEHOLD_TEST_STORES leaves etcd out');
} else {
  void describe('etcd fleet: agents() past 4 MB of agent records', () => {
    let ts: TestStore;
    let lh: Leasehold;
    let fleet: Fleet;
    let live: Agent;
    before(async () => {
      ts = await makeTestStore('etcd');
      lh = new Leasehold({ store: ts.store, suspension: false });
      fleet = await openFleet(ts.store);
      // One real agent, registered and live, among the seeded records (which have no lease: stale).
      live = await Agent.start(lh, fleet, { id: 'pg-live', heartbeat: '10s', staleAfter: '30s' });
      const prefix = new URL(ts.url).searchParams.get('prefix')!;
      const admin = await etcdAdmin();
      try {
        const txns: EtcdRequestOp[][] = [];
        for (let i = 0; i < SEEDED; i += 100) {
          txns.push(
            Array.from({ length: Math.min(100, SEEDED - i) }, (_, k) => ({
              request_put: {
                key: Buffer.from(`${prefix}/fleet/agent/seed-${String(i + k).padStart(5, '0')}`),
                value: Buffer.from(JSON.stringify({ labels: { pool: LABEL }, startedAtMs: Date.now(), draining: false, owned: 0 })),
              },
            })),
          );
        }
        for (let i = 0; i < txns.length; i += 8) {
          await Promise.all(txns.slice(i, i + 8).map((success) => admin.kv.txn({ compare: [], success, failure: [] }, { deadline: Date.now() + 30_000 })));
        }
      } finally {
        admin.close();
      }
    });
    after(async () => {
      await live.stop();
      await lh.close();
      await ts.cleanup();
    });

    void it('lists every agent in id order, the live one live and the seeded ones not', async () => {
      const rows = await fleet.agents();
      assert.equal(rows.length, SEEDED + 1);
      assert.deepEqual(rows.map((r) => r.id), [...rows.map((r) => r.id)].sort());
      const me = rows.find((r) => r.id === 'pg-live');
      assert.equal(me?.live, true);
      assert.ok(me.expiresInMs !== null && me.expiresInMs > 0);
      assert.equal(rows.filter((r) => r.live).length, 1);
      assert.equal(rows.find((r) => r.id === 'seed-11999')?.labels['pool'], LABEL);
    });
  });
}
