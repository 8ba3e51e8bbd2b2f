/**
 * Issue 26, item 3: the fence inside the user's own query builder's transaction on SQLite, on the
 * lease store's own file, through the real library over better-sqlite3: Kysely (SqliteDialect),
 * Knex (client 'better-sqlite3'), and Drizzle (drizzle-orm/better-sqlite3, whose transactions are
 * synchronous: it fences through fencedWriteSync on the same connection, `db.$client`). The same
 * scenarios as on PostgreSQL (orm-postgres.test.ts): a stale token refused with its transaction's
 * own writes rolled back, a same token accepted, the second of two restored clones refused, a
 * resource of another lease refused naming both, and what a writer frozen inside its transaction
 * does to a newer one (SQLite has no server to end it: the newer one is refused as busy, retryable,
 * and `idleTimeout` is refused as a ConfigError rather than silently ignored).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { Kysely, SqliteDialect, type Transaction } from 'kysely';
import knexFactory from 'knex';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { sql as dsql } from 'drizzle-orm';
import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import type BetterSqlite3 from 'better-sqlite3';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError, FenceOwnedError, FencedError, LeaseLostError, StoreUnavailableError } from '../../src/core/errors.js';
import type { Term } from '../../src/core/lease.js';
import { resumeLease, snapshotLease } from '../../src/testing/index.js';
import * as kyselyFence from '../../src/fence/kysely.js';
import * as knexFence from '../../src/fence/knex.js';
import { fencedWriteSync } from '../../src/fence/index.js';
import type { TxFenceOptions } from '../../src/backends/term-fence.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const require = createRequire(import.meta.url);
const Database = require('better-sqlite3') as typeof BetterSqlite3;
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Db {
  writes: { id?: number; resource: string; token: string; writer: string };
}
const writes = sqliteTable('writes', { id: integer('id').primaryKey(), resource: text('resource').notNull(), token: text('token').notNull(), writer: text('writer').notNull() });

type W = { resource: string; token: bigint; writer: string };

/** One library, as the scenarios drive it: its own transaction, its own insert. */
interface Adapter {
  name: string;
  /** fencedTransaction(db, options, fn): fn inserts one row (two, `pauseMs` apart, when given). */
  fenced(options: TxFenceOptions, w: W, pauseMs?: number): Promise<void>;
  /** A transaction the user opened: an insert, then fence(trx, options), then another insert. */
  opened(options: TxFenceOptions, w: W): Promise<void>;
  close(): Promise<void>;
}

function adapters(file: string, busyMs: number): Adapter[] {
  const list: Adapter[] = [];
  {
    // Kysely's SqliteDialect over better-sqlite3: one connection per Kysely instance.
    const db = new Kysely<Db>({ dialect: new SqliteDialect({ database: new Database(file, { timeout: busyMs }) }) });
    const ins = async (trx: Transaction<Db>, w: W): Promise<void> => {
      await trx.insertInto('writes').values({ resource: w.resource, token: w.token.toString(), writer: w.writer }).execute();
    };
    list.push({
      name: 'kysely',
      fenced: (o, w, pauseMs) =>
        kyselyFence.fencedTransaction(db, o, async (trx) => {
          await ins(trx, w);
          if (pauseMs !== undefined) {
            await sleep(pauseMs);
            await ins(trx, w);
          }
        }),
      opened: (o, w) =>
        db.transaction().execute(async (trx) => {
          await ins(trx, w);
          await kyselyFence.fence(trx, o);
          await ins(trx, w);
        }),
      close: () => db.destroy(),
    });
  }
  {
    const knex = knexFactory({ client: 'better-sqlite3', connection: { filename: file, options: { timeout: busyMs } } as never, useNullAsDefault: true });
    const ins = async (trx: knexFactory.Knex.Transaction, w: W): Promise<void> => {
      await trx('writes').insert({ resource: w.resource, token: w.token.toString(), writer: w.writer });
    };
    list.push({
      name: 'knex',
      fenced: (o, w, pauseMs) =>
        knexFence.fencedTransaction(knex, o, async (trx) => {
          await ins(trx, w);
          if (pauseMs !== undefined) {
            await sleep(pauseMs);
            await ins(trx, w);
          }
        }),
      opened: (o, w) =>
        knex.transaction(async (trx) => {
          await ins(trx, w);
          await knexFence.fence(trx, o);
          await ins(trx, w);
        }),
      close: () => knex.destroy(),
    });
  }
  {
    // Drizzle's better-sqlite3 transactions are synchronous: the fence is fencedWriteSync on
    // the same connection, and Drizzle's statements inside it run in that transaction.
    const db = drizzle(new Database(file, { timeout: busyMs }));
    const ins = (w: W): void => {
      db.insert(writes).values({ resource: w.resource, token: w.token.toString(), writer: w.writer }).run();
    };
    list.push({
      name: 'drizzle (fencedWriteSync on db.$client)',
      fenced: async (o, w) => {
        fencedWriteSync(db.$client, o, () => ins(w));
      },
      opened: async (o, w) => {
        // A transaction the user opened cannot be fenced from inside on a synchronous driver: the same call.
        fencedWriteSync(db.$client, o, () => {
          ins(w);
          ins(w);
        });
      },
      close: async () => {
        db.$client.close();
      },
    });
  }
  return list;
}

void describe('the fence inside query-builder transactions on SQLite', { skip: !selectedStores().includes('sqlite') }, () => {
  let t: TestStore;
  let file: string;
  let admin: BetterSqlite3.Database;
  let list: Adapter[] = [];
  let lh1: Leasehold;
  let lh2: Leasehold;

  const rowsOf = (resource: string): string[] => (admin.prepare('SELECT writer FROM writes WHERE resource = ? ORDER BY id').all(resource) as { writer: string }[]).map((r) => r.writer);
  const markOf = (resource: string): { token: bigint; lease: string | null } | undefined => {
    const r = admin.prepare('SELECT CAST(token AS TEXT) AS token, lease FROM leasehold_fences WHERE resource = ?').get(resource) as { token: string; lease: string | null } | undefined;
    return r === undefined ? undefined : { token: BigInt(r.token), lease: r.lease };
  };

  before(async () => {
    t = await makeTestStore('sqlite');
    await t.store.migrate?.();
    file = t.url.slice('sqlite:'.length);
    admin = new Database(file, { timeout: 5000 });
    admin.exec('CREATE TABLE writes (id INTEGER PRIMARY KEY, resource TEXT NOT NULL, token TEXT NOT NULL, writer TEXT NOT NULL)');
    list = adapters(file, 200);
    lh1 = new Leasehold({ store: t.store });
    lh2 = new Leasehold({ store: await t.open() });
  });
  after(async () => {
    await lh1?.close();
    await lh2?.close();
    await Promise.allSettled(list.map((a) => a.close()));
    admin?.close();
    await t?.cleanup();
  });

  for (const name of ['kysely', 'knex', 'drizzle (fencedWriteSync on db.$client)']) {
    const a = (): Adapter => list.find((x) => x.name === name)!;

    void it(`${name}: a same or newer token is accepted, an older one is refused with FencedError and its transaction's own writes are rolled back`, async () => {
      const r = uniq('tok');
      await a().fenced({ resource: r, token: 10n }, { resource: r, token: 10n, writer: 'w10' });
      await a().fenced({ resource: r, token: 10n }, { resource: r, token: 10n, writer: 'w10b' });
      await a().opened({ resource: r, token: 11n }, { resource: r, token: 11n, writer: 'w11' });
      assert.deepEqual(rowsOf(r), ['w10', 'w10b', 'w11', 'w11']);
      await assert.rejects(a().fenced({ resource: r, token: 9n }, { resource: r, token: 9n, writer: 'stale' }), (err: unknown) => {
        assert.ok(err instanceof FencedError, String(err));
        assert.equal(err.highWater, 11n);
        return true;
      });
      await assert.rejects(a().opened({ resource: r, token: 10n }, { resource: r, token: 10n, writer: 'stale-opened' }), FencedError);
      assert.deepEqual(rowsOf(r), ['w10', 'w10b', 'w11', 'w11'], 'nothing of the refused transactions');
      assert.equal(markOf(r)?.token, 11n);
    });

    void it(`${name}: with \`term\`, of two restored clones of one term the second is refused as 'cloned' and its writes rolled back`, async () => {
      const lease = uniq('clone');
      const lease1 = lh1.lease(lease, { ttl: '20s' });
      const term1 = await lease1.acquire({ wait: '5s' });
      const term2 = resumeLease(lh2.lease(lease, { ttl: '20s' }), snapshotLease(lease1)!);
      assert.equal(term2.token, term1.token);
      await a().fenced({ resource: `${lease}:a`, term: term1 }, { resource: `${lease}:a`, token: term1.token, writer: 'first' });
      // Another resource: the token mark alone would accept the clone.
      await assert.rejects(a().fenced({ resource: `${lease}:b`, term: term2 }, { resource: `${lease}:b`, token: term2.token, writer: 'clone' }), (err: unknown) => {
        assert.ok(err instanceof LeaseLostError, String(err));
        assert.equal(err.reason, 'cloned');
        return true;
      });
      assert.equal(term2.signal.aborted, true);
      assert.deepEqual(rowsOf(`${lease}:b`), [], "the clone's write was rolled back");
      assert.equal(markOf(`${lease}:b`), undefined, "and so was the clone's mark");
      assert.deepEqual(rowsOf(`${lease}:a`), ['first']);
      assert.equal(markOf(`${lease}:a`)?.lease, lease, 'the mark records the lease it belongs to');
      await lease1.release().catch(() => {});
    });

    void it(`${name}: with \`term\` in a transaction the user opened, a clone is refused and its writes (also those before fence()) are rolled back`, async () => {
      const lease = uniq('clone-open');
      const lease1 = lh1.lease(lease, { ttl: '20s' });
      const term1 = await lease1.acquire({ wait: '5s' });
      const term2 = resumeLease(lh2.lease(lease, { ttl: '20s' }), snapshotLease(lease1)!);
      await a().opened({ resource: `${lease}:a`, term: term1 }, { resource: `${lease}:a`, token: term1.token, writer: 'first' });
      await assert.rejects(
        a().opened({ resource: `${lease}:b`, term: term2 }, { resource: `${lease}:b`, token: term2.token, writer: 'clone' }),
        (err: unknown) => err instanceof LeaseLostError && err.reason === 'cloned',
      );
      assert.equal(term2.signal.aborted, true);
      assert.deepEqual(rowsOf(`${lease}:b`), []);
      assert.deepEqual(rowsOf(`${lease}:a`), ['first', 'first']);
      await lease1.release().catch(() => {});
    });

    void it(`${name}: a resource fenced under one lease refuses another lease with FenceOwnedError naming both, whatever its token`, async () => {
      const r = uniq('owned');
      await a().fenced({ resource: r, token: 3n, lease: 'billing' }, { resource: r, token: 3n, writer: 'billing' });
      for (const token of [1n, 99n]) {
        await assert.rejects(a().fenced({ resource: r, token, lease: 'reports' }, { resource: r, token, writer: 'reports' }), (err: unknown) => {
          assert.ok(err instanceof FenceOwnedError, String(err));
          assert.match(err.message, /lease "reports".*lease "billing"/);
          assert.doesNotMatch(err.message, /newer leader/);
          return true;
        });
      }
      assert.deepEqual(rowsOf(r), ['billing']);
      assert.deepEqual(markOf(r), { token: 3n, lease: 'billing' });
    });
  }

  void it('with `term`, a Kysely handle on another SQLite file is a ConfigError naming the lease store\'s file, and nothing is written there', async () => {
    const other = `${file}.other.db`;
    const side = new Database(other);
    side.exec('CREATE TABLE writes (id INTEGER PRIMARY KEY, resource TEXT, token TEXT, writer TEXT)');
    kyselyFence.createSqliteFenceTable(side);
    const db = new Kysely<Db>({ dialect: new SqliteDialect({ database: side }) });
    const lease = lh1.lease(uniq('other-file'), { ttl: '20s' });
    try {
      const term = await lease.acquire({ wait: '5s' });
      await assert.rejects(
        kyselyFence.fencedTransaction(db, { resource: 'r', term }, async (trx) => {
          await trx.insertInto('writes').values({ resource: 'r', token: '1', writer: 'w' }).execute();
        }),
        (err: unknown) => err instanceof ConfigError && err.message.includes(file),
      );
      assert.equal((side.prepare('SELECT count(*) AS n FROM writes').get() as { n: number }).n, 0);
      assert.equal((side.prepare('SELECT count(*) AS n FROM leasehold_fences').get() as { n: number }).n, 0);
    } finally {
      await lease.release().catch(() => {});
      await db.destroy();
    }
  });

  for (const name of ['kysely', 'knex']) {
    const a = (): Adapter => list.find((x) => x.name === name)!;
    void it(`${name}: a writer frozen inside its transaction keeps the file's write lock (no server can end it): a newer term is refused as retryable, and idleTimeout is a ConfigError`, async () => {
      const r = uniq('frozen');
      await assert.rejects(a().fenced({ resource: r, token: 1n, idleTimeout: '1s' }, { resource: r, token: 1n, writer: 'x' }), (err: unknown) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.match(err.message, /SQLite has no idleTimeout/);
        return true;
      });
      // The other library's connection is "another process": 200ms busy timeout, the freeze 1.5s.
      const other = list.find((x) => x.name !== name && x.name !== 'drizzle (fencedWriteSync on db.$client)')!;
      const frozen = a().fenced({ resource: r, token: 30n }, { resource: r, token: 30n, writer: 'frozen' }, 1500);
      await sleep(100);
      await assert.rejects(other.fenced({ resource: r, token: 31n }, { resource: r, token: 31n, writer: 'newer' }), (err: unknown) => {
        assert.ok(err instanceof StoreUnavailableError, String(err));
        assert.match(err.message, /write lock/);
        return true;
      });
      await frozen;
      // Once the frozen writer is gone, the newer term goes ahead, and the older one is fenced from then on.
      await other.fenced({ resource: r, token: 31n }, { resource: r, token: 31n, writer: 'newer' });
      assert.deepEqual(rowsOf(r), ['frozen', 'frozen', 'newer']);
    });
  }
});

// --- Compiled, never called: `fn` is given each library's own transaction type, no casts. ---

export async function kyselySqliteUser(db: Kysely<Db>, term: Term): Promise<string> {
  const row = await kyselyFence.fencedTransaction(db, { resource: 'invoices', term }, async (trx) => {
    await trx.insertInto('writes').values({ resource: 'r', token: '1', writer: 'w' }).execute();
    assert.equal(trx.isTransaction, true);
    return trx.selectFrom('writes').select(['writer']).executeTakeFirstOrThrow();
  });
  return row.writer;
}

export async function knexSqliteUser(knex: knexFactory.Knex, term: Term): Promise<void> {
  await knexFence.fencedTransaction(knex, { resource: 'invoices', term }, async (trx) => {
    await trx('writes').insert({ resource: 'r' });
    assert.equal(trx.isTransaction, true);
    await trx.savepoint(async (sp) => sp('writes').del());
  });
}

export function drizzleSqliteUser(file: string, term: Term): number {
  const db = drizzle(new Database(file));
  return fencedWriteSync(db.$client, { resource: 'invoices', term }, () => {
    db.insert(writes).values({ resource: 'r', token: '1', writer: 'w' }).run();
    return db.all<{ n: number }>(dsql`SELECT count(*) AS n FROM writes`)[0]!.n;
  });
}
