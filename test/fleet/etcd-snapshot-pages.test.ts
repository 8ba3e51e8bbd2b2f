/**
 * etcd placement past one answer's size limit. A placement (and a reassign) reads the agents it
 * picks among; read as one range, a fleet whose agent records pass gRPC's receive limit (4 MB by
 * default: about 15,000 agents) could place nothing, every call failing with the over-size
 * error. Read a page at a time past one page, it places on the one live agent.
 *
 * To keep this quick, the store's client gets a 64 KB receive limit, so 1,500 small records are
 * over it (at 4 MB it takes 15,000 and a minute); the listings on the same client read in pages too.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { newNonce } from '../../src/core/identity.js';
import { EtcdStore } from '../../src/backends/etcd/store.js';
import type { Etcd3Like, EtcdRequestOp } from '../../src/backends/etcd/client.js';
import { Fleet } from '../../src/fleet/fleet.js';
import { openFleet } from '../../src/fleet/open.js';
import { AGENT_LEASE_PREFIX } from '../../src/fleet/port.js';
import { deleteEtcdKeys, etcdAdmin, freshEtcdPrefix, TEST_ETCD_URL } from '../helpers/etcd-store.js';
import { parseEtcdUrl } from '../../src/backends/etcd/index.js';
import { selectedStores } from '../helpers/stores.js';

const LIMIT = 64 * 1024;
/** About 120 bytes a record: 1,500 of them (~180 KB) are well over LIMIT, a page of 500 (~60 KB) near it. */
const SEEDED = 1500;

if (!selectedStores().includes('etcd')) {
  console.log('# etcd-snapshot-pages: skipped, LEASEHOLD_TEST_STORES leaves etcd out');
} else {
  void describe('etcd fleet: placement and listings past the answer size limit', () => {
    const prefix = freshEtcdPrefix();
    let client: Etcd3Like;
    let store: EtcdStore;
    let fleet: Fleet;
    before(async () => {
      const { Etcd3 } = (await import('etcd3')) as unknown as { Etcd3: new (o: Record<string, unknown>) => Etcd3Like };
      // No retries and no circuit breaker, as the client leasehold makes itself (client.ts): an over-size answer must reach leasehold once.
      const passThrough = { execute: <T>(fn: (c: { signal: AbortSignal; attempt: number }) => T): T => fn({ signal: new AbortController().signal, attempt: 0 }) };
      client = new Etcd3({
        hosts: parseEtcdUrl(TEST_ETCD_URL).hosts,
        grpcOptions: { 'grpc.max_receive_message_length': LIMIT },
        faultHandling: { host: () => passThrough, global: passThrough },
      });
      store = await EtcdStore.create({ client, prefix });
      await store.migrate();
      fleet = await openFleet(store);
      // Seeded records have no liveness lease (stale) and each owns one seeded resource.
      const admin = await etcdAdmin();
      try {
        const puts: EtcdRequestOp[] = [];
        for (let i = 0; i < SEEDED; i++) {
          const id = `seed-${String(i).padStart(4, '0')}`;
          puts.push({ request_put: { key: Buffer.from(`${prefix}/fleet/agent/${id}`), value: Buffer.from(JSON.stringify({ labels: { pool: 'p'.repeat(40) }, startedAtMs: Date.now(), draining: false, owned: 1 })) } });
          puts.push({ request_put: { key: Buffer.from(`${prefix}/fleet/own/res-${String(i).padStart(4, '0')}`), value: Buffer.from(JSON.stringify({ agent: id, labels: {}, placedAtMs: Date.now(), floor: '0' })) } });
        }
        for (let i = 0; i < puts.length; i += 100) await admin.kv.txn({ compare: [], success: puts.slice(i, i + 100), failure: [] }, { deadline: Date.now() + 30_000 });
      } finally {
        admin.close();
      }
      // One live agent, past every seeded id: a placement that read only a first page would not see it.
      const [r] = await store.claim([{ name: `${AGENT_LEASE_PREFIX}zz-live`, holder: 'zz-live-holder', ttlMs: 60_000, expect: null, nextNonce: newNonce() }]);
      assert.equal(r?.outcome, 'acquired');
      await fleet.port.registerAgent('zz-live', {});
    });
    after(async () => {
      await store?.close();
      client?.close();
      await deleteEtcdKeys(prefix);
    });

    void it('places on the one live agent among records over the limit, and reassigns', async () => {
      const p = await fleet.place('new-resource');
      assert.equal(p.agent, 'zz-live');
      // A reassign reads the same way: no other live agent, so nowhere to go (not an over-size error).
      await assert.rejects(fleet.reassign('new-resource', { from: 'zz-live' }), (e: unknown) => (e as Error).name === 'NoLiveAgentError');
    });

    void it('lists every agent and every resource, in pages that fit', async () => {
      const agents = await fleet.agents();
      assert.equal(agents.length, SEEDED + 1);
      assert.deepEqual(agents.filter((a) => a.live).map((a) => a.id), ['zz-live']);
      const names: string[] = [];
      let after: string | undefined;
      let pages = 0;
      for (;;) {
        const page = await fleet.resources({ ...(after === undefined ? {} : { after }), limit: 1000 });
        pages++;
        names.push(...page.resources.map((r) => r.resource));
        assert.ok(page.resources.every((r) => r.resource === 'new-resource' || r.ownerState === 'stale'), 'seeded owners have no liveness lease');
        if (page.next === null) break;
        after = page.next;
      }
      assert.equal(names.length, SEEDED + 1);
      assert.equal(new Set(names).size, names.length);
      // 1,000 records are over the limit: a page halves until it fits, so more pages than 2.
      assert.ok(pages > 2, `${pages} pages`);
    });
  });
}
