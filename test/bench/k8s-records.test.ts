/**
 * The bench's polling-elector baseline keeps its records in Redis without a TTL (as client-go's
 * have none), so closing its record store must leave none behind, even when an elector was
 * between its read and its write as the store closed (the crash-failover figure stops the
 * follower's elector and closes at once, also when the crash failed): its write may not land
 * after the delete.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { redisRecords } from '../../bench/k8s-elector.js';
import { TEST_REDIS_URL } from '../helpers/redis-store.js';
import { selectedStores } from '../helpers/stores.js';

const skip = selectedStores().includes('redis') ? false : 'redis is not among LEASEHOLD_TEST_STORES';

void test('closing the k8s record store deletes its records, also with a write that follows the close', { skip }, async () => {
  const name = `failover-h-${randomBytes(4).toString('hex')}`;
  const check = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    const records = await redisRecords(TEST_REDIS_URL);
    // An elector read no record (the name is new), and the store starts closing before its write.
    const rec = await records.get(name);
    assert.equal(rec, null);
    const closed = records.close();
    await records.put(name, 'follower', 0).catch(() => false);
    await closed;
    assert.equal(await check.exists(`k8s:${name}`), 0, 'a k8s record outlived its record store (it has no TTL)');
  } finally {
    await check.del(`k8s:${name}`);
    check.disconnect();
  }
});
