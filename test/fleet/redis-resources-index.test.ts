/**
 * Redis lists resources from a sorted set of their names, which every script that writes an
 * ownership hash keeps. A fleet placed by an older leasehold has ownership hashes and no set:
 * the first listing must build it (in bounded SCAN steps) rather than list nothing, and entries
 * an older leasehold's remove left behind must not be listed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { newNonce } from '../../src/core/identity.js';
import { openFleet } from '../../src/fleet/open.js';
import type { Fleet } from '../../src/fleet/fleet.js';
import { AGENT_LEASE_PREFIX } from '../../src/fleet/port.js';
import { RedisStore } from '../../src/backends/redis/store.js';
import { TEST_REDIS_URL } from '../helpers/redis-store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

/** More ownership hashes than one build step's SCAN looks at (2,000 keys of the whole database). */
const OLD = 5000;
const name = (i: number): string => `old-${String(i).padStart(5, '0')}`;

if (selectedStores().includes('redis')) {
  void describe('redis fleet: the resources index', () => {
    let ts: TestStore;
    let fleet: Fleet;
    let redis: Redis;
    let tag: string;
    before(async () => {
      ts = await makeTestStore('redis');
      assert.ok(ts.store instanceof RedisStore);
      tag = `{${ts.store.prefix}}`;
      fleet = await openFleet(ts.store);
      redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
      const [r] = await ts.store.claim([{ name: `${AGENT_LEASE_PREFIX}ix-live`, holder: 'ix-holder', ttlMs: 60_000, expect: null, nextNonce: newNonce() }]);
      assert.equal(r?.outcome, 'acquired');
      await fleet.port.registerAgent('ix-live', {});
    });
    after(async () => {
      redis.disconnect();
      await ts.cleanup();
    });

    const index = (): Promise<string[]> => redis.zrange(`${tag}:fleet:resources`, '0', '-1');
    const listAll = async (limit: number): Promise<string[]> => {
      const out: string[] = [];
      let after: string | undefined;
      for (;;) {
        const page = await fleet.resources({ ...(after === undefined ? {} : { after }), limit });
        out.push(...page.resources.map((r) => r.resource));
        if (page.next === null) return out;
        after = page.next;
      }
    };

    void it('placements and removals keep the index', async () => {
      for (const r of ['ix-a', 'ix-b', 'ix-c']) await fleet.place(r);
      assert.deepEqual(await index(), ['ix-a', 'ix-b', 'ix-c']);
      await fleet.remove('ix-b', { from: 'ix-live' });
      assert.deepEqual(await index(), ['ix-a', 'ix-c']);
      assert.deepEqual(await listAll(1), ['ix-a', 'ix-c']);
    });

    void it('an older fleet without the index: the first listing builds it from the ownership hashes', async () => {
      // As an older leasehold left it: ownership hashes, no index, no built flag.
      const pipe = redis.pipeline();
      for (let i = 0; i < OLD; i++) pipe.hset(`${tag}:fleet:own:${name(i)}`, 'agent', 'ix-live', 'gen', String(1000 + i), 'labels', '{}', 'placed', String(Date.now()));
      pipe.del(`${tag}:fleet:resources`, `${tag}:fleet:resources-built`);
      await pipe.exec();
      const listed = await listAll(1000);
      assert.equal(listed.length, OLD + 2);
      assert.deepEqual(listed, [...listed].sort(), 'in name order');
      assert.ok(listed.includes('ix-a') && listed.includes(name(OLD - 1)));
      assert.equal(await redis.exists(`${tag}:fleet:resources-built`), 1, 'the build finished');
      assert.equal(await redis.exists(`${tag}:fleet:resources-scan`), 0, 'its cursor is gone');
      const row = (await fleet.resources({ after: name(6), limit: 1 })).resources[0]!;
      assert.deepEqual([row.resource, row.agent, row.generation, row.ownerState], [name(7), 'ix-live', 1007n, 'live']);
    });

    void it('an entry whose ownership hash an older leasehold deleted is not listed, and is dropped', async () => {
      await redis.del(`${tag}:fleet:own:${name(3)}`);
      const page = await fleet.resources({ after: name(1), limit: 3 });
      assert.deepEqual(page.resources.map((r) => r.resource), [name(2), name(4), name(5)]);
      assert.equal(await redis.zscore(`${tag}:fleet:resources`, name(3)), null);
    });
  });
}
