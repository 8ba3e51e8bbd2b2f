/**
 * Faults that clear on their own (a full disk, a read-only store, a server shutting down or
 * without a leader, lost connections) are retryable in every store's mapping, so a waiting
 * contender outlasts them; configuration mistakes stay non-retryable and fail fast. The
 * mapping table feeds each mapper the error its driver raises (the driver's own error class
 * where it exports one); the SQLite case is also proved end to end on a disk that really fills.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ReplyError } from 'ioredis';
import { GRPCResourceExhastedError, GRPCUnavailableError } from 'etcd3';
import { ConfigError, StoreUnavailableError, isRetryableError } from '../../src/core/errors.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { mapPgError } from '../../src/backends/postgres/errors.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { mapSqliteError } from '../../src/backends/sqlite/errors.js';
import { mapRedisError } from '../../src/backends/redis/errors.js';
import { mapEtcdError } from '../../src/backends/etcd/client.js';
import { selectedStores } from '../helpers/stores.js';
import { fill, smallDisk } from '../helpers/small-disk.js';

const SqliteError = (createRequire(import.meta.url)('better-sqlite3') as { SqliteError: new (message: string, code: string) => Error }).SqliteError;
const pgError = (code: string, message: string): Error => Object.assign(new Error(message), { code, severity: 'ERROR' });
const redisCtx = { where: 'redis://127.0.0.1:6379/0', prefix: 'p' };

const transient: [string, () => Error][] = [
  ['SQLite SQLITE_FULL', () => mapSqliteError(new SqliteError('database or disk is full', 'SQLITE_FULL'))],
  ['SQLite SQLITE_READONLY', () => mapSqliteError(new SqliteError('attempt to write a readonly database', 'SQLITE_READONLY'))],
  ['SQLite SQLITE_READONLY_DBMOVED', () => mapSqliteError(new SqliteError('attempt to write a readonly database', 'SQLITE_READONLY_DBMOVED'))],
  ['SQLite SQLITE_IOERR_WRITE', () => mapSqliteError(new SqliteError('disk I/O error', 'SQLITE_IOERR_WRITE'))],
  ['SQLite SQLITE_BUSY', () => mapSqliteError(new SqliteError('database is locked', 'SQLITE_BUSY'))],
  ['PostgreSQL 53100 disk_full', () => mapPgError(pgError('53100', 'could not extend file "base/16384/16385": No space left on device'), 's')],
  ['PostgreSQL 58030 io_error', () => mapPgError(pgError('58030', 'could not write to file "pg_wal/xlogtemp.123": No space left on device'), 's')],
  ['PostgreSQL 25006 read_only_sql_transaction (a hot standby)', () => mapPgError(pgError('25006', 'cannot execute UPDATE in a read-only transaction'), 's')],
  ['PostgreSQL 57P01 admin_shutdown', () => mapPgError(pgError('57P01', 'terminating connection due to administrator command'), 's')],
  ['PostgreSQL connection refused', () => mapPgError(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }), 's')],
  ['Redis READONLY', () => mapRedisError(new ReplyError("READONLY You can't write against a read only replica."), redisCtx)],
  ['Redis OOM', () => mapRedisError(new ReplyError("OOM command not allowed when used memory > 'maxmemory'."), redisCtx)],
  ['Redis LOADING', () => mapRedisError(new ReplyError('LOADING Redis is loading the dataset in memory'), redisCtx)],
  [
    'Redis MISCONF (cannot persist: its disk is full)',
    () =>
      mapRedisError(
        new ReplyError('MISCONF Redis is configured to save RDB snapshots, but it is currently not able to persist on disk. Commands that may modify the data set are disabled'),
        redisCtx,
      ),
  ],
  ['etcd no leader', () => mapEtcdError(new GRPCUnavailableError('etcdserver: no leader'), 'a claim')],
  ['etcd unavailable', () => mapEtcdError(new GRPCUnavailableError('No connection established'), 'a claim')],
  ['etcd database space exceeded (NOSPACE alarm)', () => mapEtcdError(new GRPCResourceExhastedError('etcdserver: mvcc: database space exceeded'), 'a claim')],
];

const configErrors: [string, () => Error][] = [
  ['SQLite SQLITE_CANTOPEN (a path that cannot be opened)', () => mapSqliteError(new SqliteError('unable to open database file', 'SQLITE_CANTOPEN'))],
  ['PostgreSQL 3D000 (no such database)', () => mapPgError(pgError('3D000', 'database "nope" does not exist'), 's')],
  ['PostgreSQL 28P01 (bad password)', () => mapPgError(pgError('28P01', 'password authentication failed for user "x"'), 's')],
  ['Redis WRONGPASS', () => mapRedisError(new ReplyError('WRONGPASS invalid username-password pair or user is disabled.'), redisCtx)],
];

void describe('transient faults are retryable in every store; configuration mistakes are not', () => {
  for (const [what, mapped] of transient) {
    void it(`${what} is a StoreUnavailableError (retryable)`, () => {
      const e = mapped();
      assert.ok(e instanceof StoreUnavailableError && isRetryableError(e), `${e.constructor.name}: ${e.message}`);
      assert.ok(e.cause !== undefined, 'the driver error is kept as the cause');
    });
  }
  for (const [what, mapped] of configErrors) {
    void it(`${what} is a ConfigError (fails fast)`, () => {
      const e = mapped();
      assert.ok(e instanceof ConfigError && !isRetryableError(e), `${e.constructor.name}: ${e.message}`);
    });
  }
});

const disk = selectedStores().includes('sqlite') ? smallDisk('4m') : 'sqlite not selected';
after(() => {
  if (typeof disk !== 'string') disk.unmount();
});
if (typeof disk === 'string') console.log(`# transient-faults (full disk) skipped: ${disk}`);

void describe('the library on a disk that fills up (SQLite)', { skip: typeof disk === 'string' && disk }, () => {
  void it('acquire({ wait }) outlasts a full disk, never leading while the store takes no write, and leads once space is freed', async () => {
    const { dir } = disk as { dir: string };
    const path = join(dir, `leases-${randomBytes(4).toString('hex')}.db`);
    const ttl = 1000;
    const store = new SqliteStore({ path });
    const lh = new Leasehold({ store, closeStore: true });
    const filler = join(dir, 'filler');
    try {
      // Someone else's term, about to expire: taking it over needs a write.
      const [held] = await store.claim([{ name: 'full', holder: 'someone-else', ttlMs: ttl, expect: null, nextNonce: 'n1' }]);
      assert.equal(held?.outcome, 'acquired');
      assert.ok(fill(filler) > 0);
      let settled: string | undefined;
      const lease = lh.lease('full', { ttl });
      const p = lease.acquire({ wait: '60s' }).then(
        (t) => (settled = `acquired ${t.token}`),
        (e: unknown) => (settled = `rejected: ${(e as Error).message}`),
      );
      // Five TTLs: the old term has long expired, and every takeover claim met the full disk.
      await sleep(5 * ttl);
      assert.equal(settled, undefined, 'acquire settled while the disk was full');
      assert.equal(lease.currentTerm, undefined);
      unlinkSync(filler);
      // The contender backs off for at most a TTL between claims: well within ten.
      await Promise.race([p, sleep(10 * ttl)]);
      assert.match(settled ?? 'still waiting', /^acquired /);
      await lease.release();
    } finally {
      try {
        unlinkSync(filler);
      } catch {
        // freed above
      }
      await lh.close();
    }
  });
});
