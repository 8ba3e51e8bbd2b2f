import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { createRedisStore } from '../../src/backends/redis/index.js';
import type { LeaseStore } from '../../src/backends/store.js';

export const TEST_REDIS_URL = process.env['LEASEHOLD_TEST_REDIS_URL'] ?? 'redis://127.0.0.1:6379/0';

/** A prefix no other test (or test run) shares, so tests never see each other's keys. */
export function freshRedisPrefix(): string {
  return `lhtest-${randomBytes(6).toString('hex')}`;
}

/**
 * Deletes every key under `prefix` (its store's keys all start with `{prefix}:`), plus the
 * fence marks a test wrote under `extraPatterns`. Never FLUSHALL/FLUSHDB: the server is shared.
 */
export async function deleteRedisKeys(prefix: string, extraPatterns: string[] = []): Promise<void> {
  const admin = new Redis(TEST_REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, commandTimeout: 5000 });
  admin.on('error', () => {});
  try {
    for (const pattern of [`{${prefix}}:*`, ...extraPatterns]) {
      let cursor = '0';
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
        cursor = next;
        if (keys.length > 0) await admin.unlink(...keys);
      } while (cursor !== '0');
    }
  } finally {
    admin.disconnect();
  }
}

/**
 * A Redis store on its own random prefix (Redis needs no migration; `migrate: true` records the
 * layout version anyway). `cleanup` closes it and deletes its keys.
 */
export async function makeRedisTestStore(options: { migrate?: boolean } = {}): Promise<{ store: LeaseStore; cleanup(): Promise<void> }> {
  const prefix = freshRedisPrefix();
  const store = await createRedisStore({ url: TEST_REDIS_URL, prefix });
  if (options.migrate === true) await store.migrate();
  return {
    store,
    async cleanup() {
      try {
        await store.close();
      } finally {
        await deleteRedisKeys(prefix);
      }
    },
  };
}
