/**
 * Redis placement reads a sorted set of the agents that can take work, scored by owned count,
 * instead of every agent. The set must follow every change (a placement, a removal, a drain, a
 * deregistration), and a fleet whose agents registered before the set existed must get it built
 * at its first placement rather than find no agent.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { Leasehold } from '../../src/core/leasehold.js';
import { Agent } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';
import type { Fleet } from '../../src/fleet/fleet.js';
import { RedisStore } from '../../src/backends/redis/store.js';
import { TEST_REDIS_URL } from '../helpers/redis-store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

if (selectedStores().includes('redis')) {
  void describe('redis fleet: the placement index', () => {
    let ts: TestStore;
    let lh: Leasehold;
    let fleet: Fleet;
    let redis: Redis;
    let load: string;
    const agents: Agent[] = [];
    before(async () => {
      ts = await makeTestStore('redis');
      assert.ok(ts.store instanceof RedisStore);
      load = `{${ts.store.prefix}}:fleet:load`;
      lh = new Leasehold({ store: ts.store, suspension: false });
      fleet = await openFleet(ts.store);
      redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
      // Long heartbeats: nothing here waits for an agent to go stale.
      for (const id of ['ix-a', 'ix-b', 'ix-c']) agents.push(await Agent.start(lh, fleet, { id, heartbeat: '10s', staleAfter: '30s' }));
    });
    after(async () => {
      await Promise.all(agents.map((a) => a.stop()));
      await lh.close();
      redis.disconnect();
      await ts.cleanup();
    });

    const index = async (): Promise<Record<string, number>> => {
      const flat = await redis.zrange(load, '0', '-1', 'WITHSCORES');
      const out: Record<string, number> = {};
      for (let i = 0; i < flat.length; i += 2) out[flat[i]!] = Number(flat[i + 1]);
      return out;
    };
    const owned = async (): Promise<Record<string, number>> => Object.fromEntries((await fleet.agents()).map((a) => [a.id, a.owned]));

    void it('follows placements, removals, drains and deregistrations', async () => {
      for (let i = 0; i < 6; i++) await fleet.place(`ix-r${i}`);
      assert.deepEqual(await index(), await owned());
      assert.deepEqual(Object.values(await owned()), [2, 2, 2], 'placements spread by owned count');
      const r0 = await fleet.owner('ix-r0');
      await fleet.remove('ix-r0', { from: r0.agent });
      await fleet.drain('ix-b');
      const drained = await index();
      assert.equal(drained['ix-b'], undefined, 'a draining agent is out of the index');
      assert.equal(drained[r0.agent === 'ix-b' ? 'ix-a' : r0.agent], r0.agent === 'ix-b' ? 2 : 1);
      for (let i = 0; i < 4; i++) assert.notEqual((await fleet.place(`ix-d${i}`)).agent, 'ix-b');
      await fleet.undrain('ix-b');
      const all = await owned();
      assert.deepEqual(await index(), all);
      await fleet.port.deregisterAgent('ix-c');
      const { ['ix-c']: _gone, ...rest } = all;
      assert.deepEqual(await index(), rest, 'a deregistered agent is out of the index');
      await fleet.port.registerAgent('ix-c', {});
      assert.deepEqual(await index(), await owned(), 'registered again, it is back with its owned count');
    });

    void it('is built at the first placement of a fleet registered before it existed', async () => {
      await fleet.drain('ix-a');
      await redis.del(load, `${load}-built`);
      const p = await fleet.place('ix-old');
      assert.notEqual(p.agent, 'ix-a');
      const rebuilt = await index();
      const { ['ix-a']: _drained, ...rest } = await owned();
      assert.deepEqual(rebuilt, rest);
      await fleet.undrain('ix-a');
    });
  });
}
