/**
 * etcd placement walks a load index (src/backends/etcd/fleet-load.ts) instead of reading every
 * agent record and term key (issue 34: 302 ms at 10,000 agents, and a deadline exceeded under
 * load). Counted in keys, not time: the key-values etcd returns to one place() call, through a
 * client that counts them. The bound follows from the walk: the resource's record, the
 * `load-built` marker, one step of WALK (32) load keys, each one's record and term key, and the
 * record read back by the write; while the least loaded agents are live and carry the labels, one
 * step. The fleet here is 300 live agents: 600 keys read before, whatever the order.
 *
 * And the index follows every change of a record (placement, removal, reassign, drain,
 * deregistration, registration again) exactly: the load keys are those of the records that are
 * registered and not draining, at their owned counts; and a rebuild (no `load-built`) puts back a
 * missing key and deletes one no record accounts for.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { newNonce } from '../../src/core/identity.js';
import { EtcdStore } from '../../src/backends/etcd/store.js';
import type { Etcd3Like, EtcdTxnRequest, EtcdTxnResponse } from '../../src/backends/etcd/client.js';
import { parseEtcdUrl } from '../../src/backends/etcd/index.js';
import { Fleet } from '../../src/fleet/fleet.js';
import { openFleet } from '../../src/fleet/open.js';
import { AGENT_LEASE_PREFIX } from '../../src/fleet/port.js';
import { deleteEtcdKeys, etcdAdmin, freshEtcdPrefix, TEST_ETCD_URL } from '../helpers/etcd-store.js';
import { selectedStores } from '../helpers/stores.js';

const AGENTS = 300;
const WALK = 32;
/** The record and the marker, one step's load keys, its agents' records and term keys, the write's read-back. */
const BOUND = 2 + WALK + 2 * WALK + 1;

if (!selectedStores().includes('etcd')) {
  console.log('# etcd-placement-index: skipped, LEASEHOLD_TEST_STORES leaves etcd out');
} else {
  void describe('etcd fleet: placement walks the load index', () => {
    const prefix = freshEtcdPrefix();
    let client: Etcd3Like & { close(): void };
    let store: EtcdStore;
    let fleet: Fleet;
    let keysRead = 0;
    let keysCounted = 0;
    before(async () => {
      const { Etcd3 } = (await import('etcd3')) as unknown as { Etcd3: new (o: Record<string, unknown>) => Etcd3Like & { close(): void } };
      client = new Etcd3({ hosts: parseEtcdUrl(TEST_ETCD_URL).hosts });
      const txn = client.kv.txn.bind(client.kv);
      (client.kv as { txn: (req: EtcdTxnRequest, o?: unknown) => Promise<EtcdTxnResponse> }).txn = async (req, o) => {
        const r = await txn(req, o as never);
        for (const op of r.responses) keysRead += op.response_range?.kvs.length ?? 0;
        // What etcd counted for each range's `count`: every key of the range, whatever its limit.
        for (const op of r.responses) keysCounted += Number(op.response_range?.count ?? 0);
        return r;
      };
      store = await EtcdStore.create({ client, prefix });
      await store.migrate();
      fleet = await openFleet(store);
      // Live agents (a term key each, an hour's TTL: nothing here waits for one to go stale), half of them zone b.
      for (let i = 0; i < AGENTS; i += 25) {
        await Promise.all(
          Array.from({ length: 25 }, async (_, j) => {
            const id = `ix-${String(i + j).padStart(4, '0')}`;
            const [r] = await store.claim([{ name: `${AGENT_LEASE_PREFIX}${id}`, holder: `h-${id}`, ttlMs: 3_600_000, expect: null, nextNonce: newNonce() }]);
            assert.equal(r?.outcome, 'acquired');
            await fleet.port.registerAgent(id, { zone: (i + j) % 2 === 0 ? 'a' : 'b' });
          }),
        );
      }
      // The first placement builds the index (a fleet registered before it): not what is counted.
      await fleet.place('warm-up');
    });
    after(async () => {
      await store?.close();
      client?.close();
      await deleteEtcdKeys(prefix);
    });

    const counted = async <T>(fn: () => Promise<T>): Promise<{ value: T; keys: number }> => {
      keysRead = 0;
      const value = await fn();
      return { value, keys: keysRead };
    };

    void it('reads one step of the index, not every agent', async () => {
      for (let i = 0; i < 5; i++) {
        const { value, keys } = await counted(() => fleet.place(`walk-${i}`));
        assert.ok(value.agent.startsWith('ix-'));
        assert.ok(keys <= BOUND, `place read ${keys} keys (bound ${BOUND}, fleet ${2 * AGENTS})`);
      }
      const { keys } = await counted(() => fleet.place('walk-b', { labels: { zone: 'b' } }));
      assert.ok(keys <= BOUND, `place with labels read ${keys} keys`);
      assert.equal((await fleet.owner('walk-b')).agent.match(/\d+$/)![0].length, 4);
      const moved = await counted(async () => fleet.reassign('walk-0', { from: (await fleet.owner('walk-0')).agent }));
      assert.ok(moved.keys <= BOUND + 8, `reassign read ${moved.keys} keys`);
    });

    void it('has etcd count about one step of keys per placement, not the whole index (a window, refilled now and then)', async () => {
      const placements = 24;
      let whole = 0;
      for (let i = 0; i < placements; i++) {
        keysCounted = 0;
        await fleet.place(`count-${i}`);
        // A placement that counted past its step's bound read the index to its end: a refill.
        if (keysCounted > BOUND) whole++;
      }
      // The window starts at WALK keys and loses one a placement; it is refilled below WALK / 4:
      // at most one refill per (WALK - WALK / 4) placements, and one more for where it started.
      assert.ok(whole <= Math.ceil(placements / (WALK - WALK / 4)) + 1, `${whole} of ${placements} placements counted the whole index (${AGENTS} load keys)`);
    });

    void it('still places on the least loaded', async () => {
      for (let i = 0; i < 20; i++) await fleet.place(`spread-${i}`);
      const owned = (await fleet.agents()).map((a) => a.owned);
      assert.ok(Math.max(...owned) - Math.min(...owned) <= 1, `owned counts ${Math.min(...owned)}..${Math.max(...owned)}`);
    });

    void it('follows every change of a record', async () => {
      const admin = await etcdAdmin();
      const index = async (): Promise<Map<string, number>> => {
        const r = await admin.kv.range({ key: Buffer.from(`${prefix}/fleet/load/`), range_end: Buffer.from(`${prefix}/fleet/load0`) });
        const out = new Map<string, number>();
        for (const kv of r.kvs) {
          const [owned, id] = kv.key.toString().slice(`${prefix}/fleet/load/`.length).split('/');
          // A second key of one agent is a key left behind: marked so that no comparison passes with it.
          out.set(decodeURIComponent(id!), out.has(decodeURIComponent(id!)) ? -1 : Number(owned));
        }
        return out;
      };
      const expected = async (): Promise<Map<string, number>> => new Map((await fleet.agents()).filter((a) => !a.deregistered && !a.draining).map((a) => [a.id, a.owned]));
      try {
        assert.deepEqual(await index(), await expected());
        const o = await fleet.owner('walk-1');
        await fleet.remove('walk-1', { from: o.agent });
        await fleet.drain('ix-0007');
        await fleet.port.deregisterAgent('ix-0008');
        assert.deepEqual(await index(), await expected());
        assert.equal((await index()).has('ix-0007'), false, 'a draining agent is out of the index');
        await fleet.port.setDraining('ix-0007', false);
        await fleet.port.registerAgent('ix-0008', { zone: 'a' });
        assert.deepEqual(await index(), await expected());
        // An index gone wrong behind leasehold's back (an older version's writes): one key
        // missing, one left behind. Deleting load-built has the next placement rebuild it.
        const load = `${prefix}/fleet/load/`;
        const gone = [...(await index())].find(([id]) => id === 'ix-0009')!;
        await admin.kv.txn(
          {
            compare: [],
            success: [
              { request_delete_range: { key: Buffer.from(`${load}${String(gone[1]).padStart(12, '0')}/ix-0009`) } },
              { request_put: { key: Buffer.from(`${load}000000000999/ix-0010`), value: Buffer.from('{}') } },
              { request_delete_range: { key: Buffer.from(`${prefix}/fleet/load-built`) } },
            ],
            failure: [],
          },
          { deadline: Date.now() + 10_000 },
        );
        assert.notDeepEqual(await index(), await expected());
        await fleet.place('after-rebuild');
        assert.deepEqual(await index(), await expected());
      } finally {
        admin.close();
      }
    });
  });
}
