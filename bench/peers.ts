/**
 * The peers leasehold is compared with, used by the bench only: redlock, redis-semaphore,
 * etcd3's Election, PostgreSQL advisory locks. Each behind the smallest wrapper the figures need.
 */
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { Mutex } from 'redis-semaphore';
import { TEST_MYSQL_URL, TEST_PG_URL } from '../test/helpers/stores.js';
import { TEST_REDIS_URL } from '../test/helpers/redis-store.js';
import { TEST_ETCD_URL } from '../test/helpers/etcd-store.js';
import { parseEtcdUrl } from '../src/backends/etcd/index.js';

const require = createRequire(import.meta.url);

interface RedlockLock {
  extend(ttl: number): Promise<RedlockLock>;
  unlock(): Promise<void>;
}
interface RedlockLike {
  lock(resource: string, ttl: number): Promise<RedlockLock>;
}
type Callback = (err: unknown, v?: unknown) => void;

/**
 * redlock 4 (the release most installs use) calls its clients node-style; ioredis 6 no longer
 * takes callbacks, so it gets a three-line adapter rather than a second Redis driver.
 */
export function redlockOn(r: Redis): RedlockLike {
  const Redlock = require('redlock') as new (clients: unknown[], o: object) => RedlockLike;
  const client = {
    evalsha: (hash: string, args: (string | number)[], cb: Callback) =>
      r.evalsha(hash, ...(args as [number, ...string[]])).then((v) => cb(null, v), (e: unknown) => cb(e)),
    eval: (args: (string | number)[], cb: Callback) => r.eval(...(args as [string, number, ...string[]])).then((v) => cb(null, v), (e: unknown) => cb(e)),
  };
  return new Redlock([client], { retryCount: 0, driftFactor: 0.01 });
}

export function redisClient(): Redis {
  return new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
}

export function semaphoreMutex(r: Redis, key: string, ttlMs: number): Mutex {
  // redis-semaphore's defaults: poll every 10 ms while waiting, refresh at ttl * 0.8.
  return new Mutex(r, key, { lockTimeout: ttlMs, acquireTimeout: 60_000 });
}

export const randomKey = (p: string): string => `lhbench-${p}-${randomBytes(4).toString('hex')}`;

/** A session-level advisory lock: the server frees it the moment the session ends. */
export async function advisoryClient(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: TEST_PG_URL });
  await c.connect();
  return c;
}

export async function etcdClient(): Promise<import('etcd3').Etcd3> {
  const { Etcd3 } = await import('etcd3');
  return new Etcd3({ hosts: parseEtcdUrl(TEST_ETCD_URL).hosts });
}

/** A named lock held by the session (GET_LOCK): the server frees it when the session ends. */
export async function namedLockClient(): Promise<import('mysql2/promise').Connection> {
  const { createConnection } = await import('mysql2/promise');
  return createConnection(TEST_MYSQL_URL.replace(/^mariadb:/, 'mysql:'));
}
