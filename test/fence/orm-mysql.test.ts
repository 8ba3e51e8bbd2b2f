/**
 * Issue 26, item 3: the fence inside the user's own query builder's transaction on MySQL/MariaDB
 * (the machine's MariaDB), through the real library over mysql2: Kysely (MysqlDialect), Knex
 * (client 'mysql2'), Drizzle (drizzle-orm/mysql2), TypeORM (type 'mysql') and Sequelize (dialect 'mysql'). The scenarios of orm-postgres.test.ts: a
 * stale token refused with its transaction's own writes rolled back, a same token accepted, the
 * second of two restored clones refused and its term ended in the store, a resource of another
 * lease refused naming both. The frozen-writer bound is not offered here (the idle timeout is a
 * session setting that would outlive the transaction on the library's pooled connection): asked
 * for, it is a ConfigError naming fencedMysqlTransaction, which has it (mysql-fence.test.ts).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { Kysely, MysqlDialect, type Transaction } from 'kysely';
import knexFactory from 'knex';
import { drizzle, type MySql2Database } from 'drizzle-orm/mysql2';
import { sql as dsql } from 'drizzle-orm';
import { int, mysqlTable, varchar } from 'drizzle-orm/mysql-core';
import type * as Mysql2 from 'mysql2';
import type * as Mysql2Promise from 'mysql2/promise';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError, FenceOwnedError, FencedError, LeaseLostError } from '../../src/core/errors.js';
import type { Term } from '../../src/core/lease.js';
import { resumeLease, snapshotLease } from '../../src/testing/index.js';
import * as kyselyFence from '../../src/fence/kysely.js';
import * as knexFence from '../../src/fence/knex.js';
import * as drizzleFence from '../../src/fence/drizzle.js';
import * as typeormFence from '../../src/fence/typeorm.js';
import * as sequelizeFence from '../../src/fence/sequelize.js';
import { DataSource, type EntityManager } from 'typeorm';
import { Sequelize, type Transaction as SequelizeTransaction } from 'sequelize';
import type { TxFenceOptions } from '../../src/backends/term-fence.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const require = createRequire(import.meta.url);
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

interface Db {
  writes: { id?: number; resource: string; token: string; writer: string };
}
const writes = mysqlTable('writes', { id: int('id').primaryKey().autoincrement(), resource: varchar('resource', { length: 200 }).notNull(), token: varchar('token', { length: 40 }).notNull(), writer: varchar('writer', { length: 100 }).notNull() });
type W = { resource: string; token: bigint; writer: string };

interface Adapter {
  name: string;
  fenced(options: TxFenceOptions, w: W): Promise<void>;
  opened(options: TxFenceOptions, w: W): Promise<void>;
  close(): Promise<void>;
}

function adapters(uri: string): Adapter[] {
  const list: Adapter[] = [];
  {
    const db = new Kysely<Db>({ dialect: new MysqlDialect({ pool: (require('mysql2') as typeof Mysql2).createPool({ uri, connectionLimit: 3 }) }) });
    const ins = async (trx: Transaction<Db>, w: W): Promise<void> => {
      await trx.insertInto('writes').values({ resource: w.resource, token: w.token.toString(), writer: w.writer }).execute();
    };
    list.push({
      name: 'kysely',
      fenced: (o, w) => kyselyFence.fencedTransaction(db, o, (trx) => ins(trx, w)),
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
    const knex = knexFactory({ client: 'mysql2', connection: uri, pool: { min: 0, max: 3 } });
    const ins = async (trx: knexFactory.Knex.Transaction, w: W): Promise<void> => {
      await trx('writes').insert({ resource: w.resource, token: w.token.toString(), writer: w.writer });
    };
    list.push({
      name: 'knex',
      fenced: (o, w) => knexFence.fencedTransaction(knex, o, (trx) => ins(trx, w)),
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
    const pool = (require('mysql2') as typeof Mysql2).createPool({ uri, connectionLimit: 3 });
    const db = drizzle(pool);
    const ins = async (tx: Parameters<Parameters<typeof db.transaction>[0]>[0], w: W): Promise<void> => {
      await tx.insert(writes).values({ resource: w.resource, token: w.token.toString(), writer: w.writer });
    };
    list.push({
      name: 'drizzle (mysql2)',
      fenced: (o, w) => drizzleFence.fencedTransaction(db, o, (tx) => ins(tx, w)),
      opened: (o, w) =>
        db.transaction(async (tx) => {
          await ins(tx, w);
          await drizzleFence.fence(tx, o);
          await ins(tx, w);
        }),
      close: () => new Promise<void>((r) => pool.end(() => r())),
    });
  }
  {
    const ds = new DataSource({ type: 'mysql', url: uri, poolSize: 3 });
    const ready = ds.initialize();
    const ins = async (manager: EntityManager, w: W): Promise<void> => {
      await manager.query('INSERT INTO writes (resource, token, writer) VALUES (?, ?, ?)', [w.resource, w.token.toString(), w.writer]);
    };
    list.push({
      name: 'typeorm',
      fenced: async (o, w) => {
        await ready;
        await typeormFence.fencedTransaction(ds, o, (manager) => ins(manager, w));
      },
      opened: async (o, w) => {
        await ready;
        await ds.transaction(async (manager) => {
          await ins(manager, w);
          await typeormFence.fence(manager, o);
          await ins(manager, w);
        });
      },
      close: async () => {
        await ready;
        await ds.destroy();
      },
    });
  }
  {
    const sequelize = new Sequelize(uri, { dialect: 'mysql', logging: false, pool: { max: 3 } });
    const ins = async (transaction: SequelizeTransaction, w: W): Promise<void> => {
      await sequelize.query('INSERT INTO writes (resource, token, writer) VALUES (?, ?, ?)', { replacements: [w.resource, w.token.toString(), w.writer], transaction });
    };
    list.push({
      name: 'sequelize',
      fenced: (o, w) => sequelizeFence.fencedTransaction(sequelize, o, (transaction) => ins(transaction, w)),
      opened: (o, w) =>
        sequelize.transaction(async (transaction) => {
          await ins(transaction, w);
          await sequelizeFence.fence(transaction, o);
          await ins(transaction, w);
        }),
      close: () => sequelize.close(),
    });
  }
  return list;
}

void describe('the fence inside query-builder transactions on MySQL/MariaDB', { skip: !selectedStores().includes('mysql') }, () => {
  let t: TestStore;
  let admin: Mysql2Promise.Pool;
  let list: Adapter[] = [];
  let lh1: Leasehold;
  let lh2: Leasehold;

  const rowsOf = async (resource: string): Promise<string[]> => {
    const [rows] = await admin.query<Mysql2Promise.RowDataPacket[]>('SELECT writer FROM writes WHERE resource = ? ORDER BY id', [resource]);
    return rows.map((r) => String(r['writer']));
  };
  const markOf = async (resource: string): Promise<{ token: bigint; lease: string | null } | undefined> => {
    const [rows] = await admin.query<Mysql2Promise.RowDataPacket[]>('SELECT CAST(token AS CHAR) AS token, lease FROM leasehold_fences WHERE resource = ?', [resource]);
    return rows[0] === undefined ? undefined : { token: BigInt(String(rows[0]['token'])), lease: (rows[0]['lease'] as string | null) ?? null };
  };

  before(async () => {
    t = await makeTestStore('mysql');
    const uri = t.url.replace(/^mariadb:/, 'mysql:');
    admin = (require('mysql2/promise') as typeof Mysql2Promise).createPool({ uri, connectionLimit: 2 });
    await admin.query('CREATE TABLE writes (id INT AUTO_INCREMENT PRIMARY KEY, resource VARCHAR(200) NOT NULL, token VARCHAR(40) NOT NULL, writer VARCHAR(100) NOT NULL) ENGINE = InnoDB');
    list = adapters(uri);
    lh1 = new Leasehold({ store: t.store });
    lh2 = new Leasehold({ store: await t.open() });
  });
  after(async () => {
    await lh1?.close();
    await lh2?.close();
    await Promise.allSettled(list.map((a) => a.close()));
    await admin?.end();
    await t?.cleanup();
  });

  for (const name of ['kysely', 'knex', 'drizzle (mysql2)', 'typeorm', 'sequelize']) {
    const a = (): Adapter => list.find((x) => x.name === name)!;

    void it(`${name}: a same or newer token is accepted, an older one is refused with FencedError and its transaction's own writes are rolled back`, async () => {
      const r = uniq('tok');
      await a().fenced({ resource: r, token: 10n }, { resource: r, token: 10n, writer: 'w10' });
      await a().fenced({ resource: r, token: 10n }, { resource: r, token: 10n, writer: 'w10b' });
      await a().opened({ resource: r, token: 11n }, { resource: r, token: 11n, writer: 'w11' });
      assert.deepEqual(await rowsOf(r), ['w10', 'w10b', 'w11', 'w11']);
      await assert.rejects(a().fenced({ resource: r, token: 9n }, { resource: r, token: 9n, writer: 'stale' }), (err: unknown) => {
        assert.ok(err instanceof FencedError, String(err));
        assert.equal(err.highWater, 11n);
        return true;
      });
      await assert.rejects(a().opened({ resource: r, token: 10n }, { resource: r, token: 10n, writer: 'stale-opened' }), FencedError);
      assert.deepEqual(await rowsOf(r), ['w10', 'w10b', 'w11', 'w11'], 'nothing of the refused transactions');
      assert.equal((await markOf(r))?.token, 11n);
    });

    void it(`${name}: with \`term\`, of two restored clones of one term the second is refused as 'cloned', its writes rolled back, and the term ends in the store`, async () => {
      const lease = uniq('clone');
      const lease1 = lh1.lease(lease, { ttl: '20s' });
      const term1 = await lease1.acquire({ wait: '5s' });
      const term2 = resumeLease(lh2.lease(lease, { ttl: '20s' }), snapshotLease(lease1)!);
      assert.equal(term2.token, term1.token);
      await a().fenced({ resource: `${lease}:a`, term: term1 }, { resource: `${lease}:a`, token: term1.token, writer: 'first' });
      await assert.rejects(a().fenced({ resource: `${lease}:b`, term: term2 }, { resource: `${lease}:b`, token: term2.token, writer: 'clone' }), (err: unknown) => {
        assert.ok(err instanceof LeaseLostError, String(err));
        assert.equal(err.reason, 'cloned');
        return true;
      });
      assert.equal(term2.signal.aborted, true);
      assert.deepEqual(await rowsOf(`${lease}:b`), [], "the clone's write was rolled back");
      assert.equal(await markOf(`${lease}:b`), undefined, "and so was the clone's mark");
      const history = await t.store.history({ name: lease });
      assert.ok(history.some((h) => h.event === 'conflict' && h.token === term1.token), JSON.stringify(history.map((h) => h.event)));
      assert.deepEqual(await rowsOf(`${lease}:a`), ['first']);
      assert.equal((await markOf(`${lease}:a`))?.lease, lease, 'the mark records the lease it belongs to');
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
      assert.deepEqual(await rowsOf(`${lease}:b`), []);
      assert.deepEqual(await rowsOf(`${lease}:a`), ['first', 'first']);
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
      assert.deepEqual(await rowsOf(r), ['billing']);
      assert.deepEqual(await markOf(r), { token: 3n, lease: 'billing' });
    });

    void it(`${name}: idleTimeout is refused with a ConfigError naming fencedMysqlTransaction, before anything runs`, async () => {
      const r = uniq('idle');
      await assert.rejects(a().fenced({ resource: r, token: 1n, idleTimeout: '5s' }, { resource: r, token: 1n, writer: 'x' }), (err: unknown) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.match(err.message, /fencedMysqlTransaction/);
        return true;
      });
      assert.deepEqual(await rowsOf(r), []);
    });
  }
});

// --- Compiled, never called: `fn` is given each library's own transaction type, no casts. ---

export async function kyselyMysqlUser(db: Kysely<Db>, term: Term): Promise<string> {
  const row = await kyselyFence.fencedTransaction(db, { resource: 'invoices', term }, async (trx) => {
    await trx.insertInto('writes').values({ resource: 'r', token: '1', writer: 'w' }).execute();
    assert.equal(trx.isTransaction, true);
    return trx.selectFrom('writes').select(['writer']).executeTakeFirstOrThrow();
  });
  return row.writer;
}

export async function knexMysqlUser(knex: knexFactory.Knex, term: Term): Promise<void> {
  await knexFence.fencedTransaction(knex, { resource: 'invoices', term }, async (trx) => {
    await trx('writes').insert({ resource: 'r' });
    await trx.savepoint(async (sp) => sp('writes').del());
  });
}

export async function drizzleMysqlUser(db: MySql2Database, term: Term): Promise<void> {
  await drizzleFence.fencedTransaction(db, { resource: 'invoices', term }, async (tx) => {
    // MySql2Transaction's own methods: the query builder, nested transactions, rollback.
    await tx.insert(writes).values({ resource: 'r', token: '1', writer: 'w' });
    await tx.transaction(async (inner) => inner.execute(dsql`SELECT 2`));
    if (Math.random() > 2) tx.rollback();
  });
}

export async function typeormMysqlUser(ds: DataSource, term: Term): Promise<boolean> {
  return typeormFence.fencedTransaction(ds, { resource: 'invoices', term }, async (manager) => {
    await manager.createQueryBuilder().insert().into('writes').values({ resource: 'r', token: '1', writer: 'w' }).execute();
    return manager.queryRunner?.isTransactionActive === true;
  });
}

export async function sequelizeMysqlUser(sequelize: Sequelize, term: Term): Promise<void> {
  await sequelizeFence.fencedTransaction(sequelize, { resource: 'invoices', term }, async (transaction) => {
    transaction.afterCommit(() => undefined);
    await sequelize.query('SELECT 1', { transaction });
  });
}
