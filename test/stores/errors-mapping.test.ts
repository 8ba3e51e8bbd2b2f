/**
 * Each store's error mapper, fed real errors from the real backend: a store that is down is
 * retryable (StoreUnavailableError); a missing schema is a SchemaError; an error the store
 * answered with that is neither (an SQL error, a script error, an unknown command) is a
 * StoreError, which is not retryable, so the engine never retries it in silence.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { SchemaError, StoreError, StoreUnavailableError, isRetryableError } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import { mapPgError } from '../../src/backends/postgres/errors.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { mapSqliteError } from '../../src/backends/sqlite/errors.js';
import { mapRedisError } from '../../src/backends/redis/errors.js';
import { mapEtcdError } from '../../src/backends/etcd/client.js';
import { downUrl, makeTestStore, selectedStores, TEST_PG_URL, type TestStore } from '../helpers/stores.js';
import { TEST_REDIS_URL } from '../helpers/redis-store.js';
import { etcdAdmin } from '../helpers/etcd-store.js';

const contend = (name: string) => [{ name, holder: 'h-errors', ttlMs: 5000, expect: null, nextNonce: randomBytes(8).toString('base64url') }];

function assertStoreError(err: unknown, what: string): true {
  assert.ok(err instanceof StoreError, `${what}: expected StoreError, got ${String((err as Error)?.constructor?.name)}: ${String((err as Error)?.message)}`);
  assert.equal(err.retryable, false);
  assert.equal(isRetryableError(err), false);
  assert.equal(err.code, 'STORE');
  assert.ok(err.cause !== undefined, 'the driver error is kept as the cause');
  return true;
}

const stores = selectedStores();

void describe('unknown errors are not retryable; outages are', () => {
  for (const kind of stores) {
    const down = downUrl(kind);
    if (down === undefined) continue;
    void it(`${kind}: a store that is down is still StoreUnavailableError (retryable)`, async () => {
      const store = await openStore(down);
      try {
        await assert.rejects(store.claim(contend('down')), (err: unknown) => err instanceof StoreUnavailableError && isRetryableError(err));
      } finally {
        await store.close();
      }
    });
  }

  if (stores.includes('postgres')) {
    void describe('postgres', () => {
      let t: TestStore;
      before(async () => {
        t = await makeTestStore('postgres');
      });
      after(async () => {
        await t?.cleanup();
      });

      void it('an SQL error the server answered (a check constraint) is a StoreError, from the store itself', async () => {
        const schema = new URL(t.url).searchParams.get('schema')!;
        const c = new pg.Client({ connectionString: TEST_PG_URL });
        await c.connect();
        try {
          await c.query(`ALTER TABLE "${schema}".leases ADD CONSTRAINT no_forbidden CHECK (name <> 'forbidden')`);
        } finally {
          await c.end();
        }
        await assert.rejects(t.store.claim(contend('forbidden')), (err: unknown) => assertStoreError(err, 'check violation'));
        // The store still works for everything else: the error was about this statement.
        const [ok] = await t.store.claim(contend('allowed'));
        assert.equal(ok?.outcome, 'acquired');
      });

      void it('a syntax error from the real server maps to StoreError; a missing schema to SchemaError', async () => {
        const c = new pg.Client({ connectionString: TEST_PG_URL });
        await c.connect();
        try {
          const syntax = await c.query('SELEC 1').catch((e: unknown) => e);
          assertStoreError(mapPgError(syntax, 'x'), 'syntax error');
        } finally {
          await c.end();
        }
        const fresh = await openStore(`${TEST_PG_URL}?schema=lh_never_${randomBytes(4).toString('hex')}`);
        try {
          await assert.rejects(fresh.claim(contend('x')), (err: unknown) => err instanceof SchemaError && !isRetryableError(err) && /leasehold migrate/.test(err.message));
        } finally {
          await fresh.close();
        }
      });
    });
  }

  if (stores.includes('sqlite')) {
    void it('sqlite: an SQL error from the file is a StoreError, a missing table a SchemaError, a held lock retryable', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'lh-errors-'));
      try {
        const path = join(dir, 'leases.db');
        const store = new SqliteStore({ path, busyTimeoutMs: 50 });
        try {
          store.database.exec(
            `CREATE TRIGGER no_forbidden BEFORE INSERT ON leasehold_leases WHEN NEW.name = 'forbidden' BEGIN SELECT RAISE(ABORT, 'forbidden name'); END`,
          );
          await assert.rejects(store.claim(contend('forbidden')), (err: unknown) => assertStoreError(err, 'trigger abort'));
          let syntax: unknown;
          try {
            store.database.prepare('SELEC 1');
          } catch (e) {
            syntax = e;
          }
          assertStoreError(mapSqliteError(syntax), 'syntax error');

          const other = new SqliteStore({ path, busyTimeoutMs: 50 });
          try {
            other.database.exec('BEGIN IMMEDIATE');
            await assert.rejects(store.claim(contend('locked')), (err: unknown) => err instanceof StoreUnavailableError && isRetryableError(err));
            other.database.exec('ROLLBACK');
          } finally {
            await other.close();
          }
        } finally {
          await store.close();
        }
        const bare = new SqliteStore({ path: join(dir, 'bare.db'), migrate: false });
        try {
          await assert.rejects(bare.claim(contend('x')), (err: unknown) => err instanceof SchemaError);
        } finally {
          await bare.close();
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  if (stores.includes('redis')) {
    void describe('redis', () => {
      void it('an unknown command from the real server maps to StoreError', async () => {
        const admin = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 0 });
        admin.on('error', () => {});
        try {
          const err = await admin.call('LEASEHOLDNOSUCHCOMMAND').catch((e: unknown) => e);
          assertStoreError(mapRedisError(err, { where: 'test', prefix: 'p' }), 'unknown command');
        } finally {
          admin.disconnect();
        }
      });
    });
  }

  if (stores.includes('etcd')) {
    void it('etcd: an argument etcd refuses maps to StoreError; a store never migrated answers SchemaError', async () => {
      const admin = await etcdAdmin();
      try {
        const err = await admin.kv.txn({ compare: [], success: [{ request_put: { key: Buffer.alloc(0), value: Buffer.from('x') } }], failure: [] }).catch((e: unknown) => e);
        assert.ok(err instanceof Error, 'etcd refused an empty key');
        assertStoreError(mapEtcdError(err, 'test'), 'invalid argument');
      } finally {
        admin.close();
      }
      const fresh = await openStore(`etcd://127.0.0.1:2379?prefix=lh-never-${randomBytes(4).toString('hex')}`);
      try {
        await assert.rejects(fresh.claim(contend('x')), (err: unknown) => err instanceof SchemaError);
      } finally {
        await fresh.close();
      }
    });
  }
});
