/**
 * Issue 26: the fence inside the transaction of the user's own query builder or ORM, on the real
 * PostgreSQL, through the real library: Kysely, Knex, Drizzle (node-postgres and postgres.js
 * drivers) and postgres.js. One table of adapters, the same scenarios for each:
 * a stale token is refused and its transaction's own writes are rolled back; a same token is
 * accepted; of two restored clones of one term only the first commits; a writer frozen inside
 * its transaction is cut off after idleTimeout so the newer term goes ahead; and a resource
 * fenced under one lease name refuses another lease (naming both).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import knexFactory from 'knex';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { sql as dsql } from 'drizzle-orm';
import postgres from 'postgres';
import { DataSource, type EntityManager } from 'typeorm';
import { Sequelize, type Transaction as SequelizeTransaction } from 'sequelize';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError, FenceOwnedError, FencedError, LeaseLostError, SchemaError, StoreUnavailableError } from '../../src/core/errors.js';
import type { Term } from '../../src/core/lease.js';
import { resumeLease, snapshotLease } from '../../src/testing/index.js';
import * as kyselyFence from '../../src/fence/kysely.js';
import * as knexFence from '../../src/fence/knex.js';
import * as drizzleFence from '../../src/fence/drizzle.js';
import * as postgresFence from '../../src/fence/postgres.js';
import * as typeormFence from '../../src/fence/typeorm.js';
import * as sequelizeFence from '../../src/fence/sequelize.js';
import { fencedTransaction as rawPgFence, type PgTxFenceOptions } from '../../src/backends/postgres/fence.js';
import { TEST_PG_URL, makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One library, as the scenarios drive it: its own transaction, its own insert. */
interface Adapter {
  name: string;
  /** fencedTransaction(db, options, fn) where fn inserts one row per entry of `tokens`, `pauseMs` apart. */
  fenced(options: PgTxFenceOptions, insert: { resource: string; token: bigint; writer: string }, pauseMs?: number): Promise<void>;
  /** A transaction the user opened: an insert, then fence(trx, options), then another insert. */
  opened(options: PgTxFenceOptions, insert: { resource: string; token: bigint; writer: string }): Promise<void>;
  close(): Promise<void>;
}

/**
 * node-postgres: a checked-out client the server disconnects (the idle bound ending a frozen
 * writer) emits 'error', which with no listener crashes the process; pg-pool listens only while a
 * client is idle. The documented setup (docs/fencing-orm.md): listen on every client. The error
 * still reaches the transaction's next statement.
 */
function guardedPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: TEST_PG_URL, max: 4 });
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

async function adapters(schema: string): Promise<Adapter[]> {
  const writes = `"${schema}".writes`;
  const insertSql = `INSERT INTO ${writes} (resource, token, writer) VALUES ($1, $2, $3)`;
  const list: Adapter[] = [];

  {
    const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: guardedPool() }) });
    const ins = async (trx: Parameters<Parameters<typeof kyselyFence.fencedTransaction<Record<string, never>, void>>[2]>[0], w: { resource: string; token: bigint; writer: string }) => {
      await trx.withSchema(schema).insertInto('writes' as never).values({ resource: w.resource, token: w.token.toString(), writer: w.writer } as never).execute();
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
    const knex = knexFactory({ client: 'pg', connection: TEST_PG_URL, pool: { min: 0, max: 4 } });
    const ins = async (trx: knexFactory.Knex.Transaction, w: { resource: string; token: bigint; writer: string }) => {
      await trx.withSchema(schema).table('writes').insert({ resource: w.resource, token: w.token.toString(), writer: w.writer });
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
    const pool = guardedPool();
    const db = drizzleNodePg(pool);
    const ins = async (tx: drizzleFence.DrizzlePgDatabase, w: { resource: string; token: bigint; writer: string }) => {
      await tx.execute(dsql`INSERT INTO ${dsql.raw(writes)} (resource, token, writer) VALUES (${w.resource}, ${w.token.toString()}, ${w.writer})`);
    };
    list.push({
      name: 'drizzle (node-postgres)',
      fenced: (o, w, pauseMs) =>
        drizzleFence.fencedTransaction(db, o, async (tx) => {
          await ins(tx, w);
          if (pauseMs !== undefined) {
            await sleep(pauseMs);
            await ins(tx, w);
          }
        }),
      opened: (o, w) =>
        db.transaction(async (tx) => {
          await ins(tx, w);
          await drizzleFence.fence(tx, o);
          await ins(tx, w);
        }),
      close: () => pool.end(),
    });
  }
  {
    const client = postgres(TEST_PG_URL, { max: 4, onnotice: () => {} });
    const db = drizzlePostgresJs(client);
    const ins = async (tx: drizzleFence.DrizzlePgDatabase, w: { resource: string; token: bigint; writer: string }) => {
      await tx.execute(dsql`INSERT INTO ${dsql.raw(writes)} (resource, token, writer) VALUES (${w.resource}, ${w.token.toString()}, ${w.writer})`);
    };
    list.push({
      name: 'drizzle (postgres.js)',
      fenced: (o, w, pauseMs) =>
        drizzleFence.fencedTransaction(db, o, async (tx) => {
          await ins(tx, w);
          // No statement after the freeze: on a postgres.js transaction whose connection the server
          // ended, it crashes the process (a TypeError from a timer) or runs outside any
          // transaction (postgres 3.4.9). The postgres.js entry guards its `tx` against that;
          // Drizzle's transaction wraps it where the fence cannot reach (docs/fencing-orm.md).
          if (pauseMs !== undefined) await sleep(pauseMs);
        }),
      opened: (o, w) =>
        db.transaction(async (tx) => {
          await ins(tx, w);
          await drizzleFence.fence(tx, o);
          await ins(tx, w);
        }),
      close: () => client.end({ timeout: 1 }),
    });
  }
  {
    const sql = postgres(TEST_PG_URL, { max: 4, onnotice: () => {} });
    const ins = async (tx: postgres.TransactionSql, w: { resource: string; token: bigint; writer: string }) => {
      await tx.unsafe(insertSql, [w.resource, w.token.toString(), w.writer]);
    };
    list.push({
      name: 'postgres.js',
      fenced: (o, w, pauseMs) =>
        postgresFence.fencedTransaction(sql, o, async (tx) => {
          await ins(tx, w);
          if (pauseMs !== undefined) {
            await sleep(pauseMs);
            await ins(tx, w);
          }
        }),
      opened: async (o, w) => {
        await sql.begin(async (tx) => {
          await ins(tx, w);
          await postgresFence.fence(tx, o);
          await ins(tx, w);
        });
      },
      close: () => sql.end({ timeout: 1 }),
    });
  }
  {
    const ds = new DataSource({ type: 'postgres', url: TEST_PG_URL, poolSize: 4 });
    await ds.initialize();
    const ins = async (manager: EntityManager, w: { resource: string; token: bigint; writer: string }) => {
      await manager.query(insertSql, [w.resource, w.token.toString(), w.writer]);
    };
    list.push({
      name: 'typeorm',
      fenced: (o, w, pauseMs) =>
        typeormFence.fencedTransaction(ds, o, async (manager) => {
          await ins(manager, w);
          if (pauseMs !== undefined) {
            await sleep(pauseMs);
            await ins(manager, w);
          }
        }),
      opened: (o, w) =>
        ds.transaction(async (manager) => {
          await ins(manager, w);
          await typeormFence.fence(manager, o);
          await ins(manager, w);
        }),
      close: () => ds.destroy(),
    });
  }
  {
    const sequelize = new Sequelize(TEST_PG_URL, { logging: false, pool: { max: 4 } });
    const ins = async (transaction: SequelizeTransaction, w: { resource: string; token: bigint; writer: string }) => {
      await sequelize.query(insertSql, { bind: [w.resource, w.token.toString(), w.writer], transaction });
    };
    list.push({
      name: 'sequelize',
      fenced: (o, w, pauseMs) =>
        sequelizeFence.fencedTransaction(sequelize, o, async (transaction) => {
          await ins(transaction, w);
          if (pauseMs !== undefined) {
            await sleep(pauseMs);
            await ins(transaction, w);
          }
        }),
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

void describe('the fence inside ORM transactions on PostgreSQL', { skip: !selectedStores().includes('postgres') }, () => {
  let t: TestStore;
  let schema: string;
  let admin: pg.Pool;
  let list: Adapter[] = [];
  let lh1: Leasehold;
  let lh2: Leasehold;

  const rowsOf = async (resource: string): Promise<string[]> =>
    (await admin.query<{ writer: string }>(`SELECT writer FROM "${schema}".writes WHERE resource = $1 ORDER BY id`, [resource])).rows.map((r) => r.writer);
  const markOf = async (resource: string): Promise<{ token: bigint; lease: string | null } | undefined> => {
    const r = await admin.query<{ token: string; lease: string | null }>(`SELECT token::text AS token, lease FROM "${schema}".fences WHERE resource = $1`, [resource]);
    return r.rows[0] === undefined ? undefined : { token: BigInt(r.rows[0].token), lease: r.rows[0].lease };
  };

  before(async () => {
    t = await makeTestStore('postgres');
    schema = new URL(t.url).searchParams.get('schema')!;
    admin = new pg.Pool({ connectionString: TEST_PG_URL, max: 2 });
    await admin.query(`CREATE TABLE "${schema}".writes (id serial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL, writer text NOT NULL)`);
    list = await adapters(schema);
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

  const tokenOpts = (resource: string, token: bigint, extra: Partial<PgTxFenceOptions> = {}): PgTxFenceOptions => ({ resource, token, table: `${schema}.fences`, ...extra }) as PgTxFenceOptions;

  for (const name of ['kysely', 'knex', 'drizzle (node-postgres)', 'drizzle (postgres.js)', 'postgres.js', 'typeorm', 'sequelize']) {
    const a = (): Adapter => list.find((x) => x.name === name)!;

    void it(`${name}: a same or newer token is accepted, an older one is refused with FencedError and its transaction's own writes are rolled back`, async () => {
      const r = uniq('tok');
      await a().fenced(tokenOpts(r, 10n), { resource: r, token: 10n, writer: 'w10' });
      await a().fenced(tokenOpts(r, 10n), { resource: r, token: 10n, writer: 'w10b' });
      await a().opened(tokenOpts(r, 11n), { resource: r, token: 11n, writer: 'w11' });
      assert.deepEqual(await rowsOf(r), ['w10', 'w10b', 'w11', 'w11']);
      await assert.rejects(a().fenced(tokenOpts(r, 9n), { resource: r, token: 9n, writer: 'stale' }), (err: unknown) => {
        assert.ok(err instanceof FencedError, String(err));
        assert.equal(err.code, 'FENCED');
        assert.equal(err.highWater, 11n);
        return true;
      });
      // The user wrote before calling fence(): the refusal rolls that write back too.
      await assert.rejects(a().opened(tokenOpts(r, 10n), { resource: r, token: 10n, writer: 'stale-opened' }), (err: unknown) => err instanceof FencedError && err.token === 10n);
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
      await a().opened({ resource: `${lease}:a`, term: term1 }, { resource: `${lease}:a`, token: term1.token, writer: 'first-opened' });
      // Another resource: the token mark alone would accept the clone.
      await assert.rejects(a().fenced({ resource: `${lease}:b`, term: term2 }, { resource: `${lease}:b`, token: term2.token, writer: 'clone' }), (err: unknown) => {
        assert.ok(err instanceof LeaseLostError, String(err));
        assert.equal(err.reason, 'cloned');
        return true;
      });
      assert.equal(term2.signal.aborted, true);
      assert.deepEqual(await rowsOf(`${lease}:b`), [], "the clone's write was rolled back");
      assert.equal((await markOf(`${lease}:b`))?.token, undefined, "and so was the clone's mark");
      const history = await t.store.history({ name: lease });
      assert.ok(history.some((h) => h.event === 'conflict' && h.token === term1.token), JSON.stringify(history.map((h) => h.event)));
      assert.deepEqual(await rowsOf(`${lease}:a`), ['first', 'first-opened', 'first-opened']);
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

    void it(`${name}: a resource fenced under one lease refuses another lease with FenceOwnedError naming both`, async () => {
      const r = uniq('owned');
      await a().fenced(tokenOpts(r, 3n, { lease: 'billing' }), { resource: r, token: 3n, writer: 'billing' });
      await assert.rejects(a().fenced(tokenOpts(r, 1n, { lease: 'reports' }), { resource: r, token: 1n, writer: 'reports' }), (err: unknown) => {
        assert.ok(err instanceof FenceOwnedError, String(err));
        assert.equal(err.code, 'FENCE_OWNED');
        assert.match(err.message, /lease "reports".*lease "billing"/);
        assert.doesNotMatch(err.message, /newer leader/);
        return true;
      });
      // Even a higher token of the other lease: tokens of two leases are not comparable.
      await assert.rejects(a().fenced(tokenOpts(r, 99n, { lease: 'reports' }), { resource: r, token: 99n, writer: 'reports' }), FenceOwnedError);
      assert.deepEqual(await rowsOf(r), ['billing']);
      assert.deepEqual(await markOf(r), { token: 3n, lease: 'billing' });
    });

    void it(`${name}: a writer frozen inside its transaction is ended after idleTimeout, nothing of it commits, and the newer term goes ahead`, { timeout: 20_000 }, async () => {
      const r = uniq('frozen');
      const boundMs = 400;
      const frozen = a()
        .fenced(tokenOpts(r, 30n, { idleTimeout: boundMs }), { resource: r, token: 30n, writer: 'frozen' }, boundMs * 4)
        .then(
          () => undefined,
          (err: unknown) => err,
        );
      await sleep(100); // the frozen writer holds the mark's row
      const started = performance.now();
      await a().fenced(tokenOpts(r, 31n), { resource: r, token: 31n, writer: 'newer' });
      const waited = performance.now() - started;
      assert.ok(waited < boundMs * 3, `the newer term went ahead once the server ended the frozen one, before its freeze was over (${waited.toFixed(0)}ms)`);
      const err = await frozen;
      assert.ok(err instanceof StoreUnavailableError, `the frozen writer was told: ${String(err)}`);
      assert.match(err.message, /nothing of it was committed/);
      assert.deepEqual(await rowsOf(r), ['newer']);
      assert.equal((await markOf(r))?.token, 31n);
    });
  }

  void it('with `term` the owner is the term\'s lease: a resource another lease fenced refuses it (FenceOwnedError), and a `lease` option that disagrees with the term is a ConfigError', async () => {
    const a = list[0]!;
    const lease = uniq('owner-term');
    const l = lh1.lease(lease, { ttl: '20s' });
    const term = await l.acquire({ wait: '5s' });
    const r = uniq('owned-by-billing');
    await a.fenced(tokenOpts(r, 1n, { lease: 'billing' }), { resource: r, token: 1n, writer: 'billing' });
    await assert.rejects(a.fenced({ resource: r, term }, { resource: r, token: term.token, writer: 'term' }), (err: unknown) => {
      assert.ok(err instanceof FenceOwnedError, String(err));
      assert.equal(err.lease, lease);
      assert.equal(err.owner, 'billing');
      return true;
    });
    assert.equal(term.signal.aborted, false, 'a resource owned by another lease does not end this term');
    await assert.rejects(a.fenced({ resource: r, term, lease: 'billing' }, { resource: r, token: term.token, writer: 'x' }), (err: unknown) => {
      assert.ok(err instanceof ConfigError, String(err));
      assert.equal(err.code, 'CONFIG');
      assert.match(err.message, /leave `lease` out/);
      return true;
    });
    assert.deepEqual(await rowsOf(r), ['billing']);
    await l.release();
  });

  void it('the raw `pg` fence follows the same rule: a mark with no lease is claimed by the first write that names one, and another lease is refused with FenceOwnedError whatever its token', async () => {
    const r = uniq('raw-owned');
    const writeAs = (token: bigint, lease: string | undefined, writer: string) =>
      rawPgFence(admin, { resource: r, token, table: `${schema}.fences`, ...(lease === undefined ? {} : { lease }) }, async (c) => {
        await c.query(`INSERT INTO "${schema}".writes (resource, token, writer) VALUES ($1, $2, $3)`, [r, token.toString(), writer]);
      });
    await writeAs(1n, undefined, 'unnamed'); // unclaimed, as every mark written before migration 9
    await writeAs(3n, 'billing', 'billing');
    for (const token of [2n, 99n]) {
      await assert.rejects(writeAs(token, 'reports', 'reports'), (err: unknown) => {
        assert.ok(err instanceof FenceOwnedError, String(err));
        assert.match(err.message, /lease "reports".*lease "billing"/);
        assert.doesNotMatch(err.message, /newer leader/);
        return true;
      });
    }
    assert.deepEqual(await rowsOf(r), ['unnamed', 'billing']);
    assert.deepEqual(await markOf(r), { token: 3n, lease: 'billing' });
  });

  void it('a fence table without the lease column: a write naming a lease is a SchemaError that says to run createPgFenceTable again; one naming none still works', async () => {
    const old = `${schema}.old_fences`;
    await admin.query(`CREATE TABLE "${schema}".old_fences (resource text PRIMARY KEY, token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`);
    const a = list[0]!;
    const r = uniq('old');
    await a.fenced({ resource: r, token: 1n, table: old }, { resource: r, token: 1n, writer: 'no-lease' });
    await assert.rejects(a.fenced({ resource: r, token: 2n, table: old, lease: 'x' }, { resource: r, token: 2n, writer: 'lease' }), (err: unknown) => {
      assert.ok(err instanceof SchemaError, String(err));
      assert.match(err.message, /createPgFenceTable\(db, "[^"]+old_fences"\)/);
      return true;
    });
    await kyselyFence.createPgFenceTable(admin, old);
    await a.fenced({ resource: r, token: 2n, table: old, lease: 'x' }, { resource: r, token: 2n, writer: 'lease' });
    assert.deepEqual(await rowsOf(r), ['no-lease', 'lease']);
  });
});

// --- Compiled, never called: `fn` is given each library's own transaction type, no casts. ---

interface Db {
  invoice: { id: number; total: number };
}

export async function kyselyUser(db: Kysely<Db>, term: Term): Promise<number> {
  const row = await kyselyFence.fencedTransaction(db, { resource: 'invoices', term }, async (trx) => {
    // Kysely's own Transaction<Db>: the table and column names are checked.
    await trx.insertInto('invoice').values({ id: 1, total: 2 }).execute();
    assert.equal(trx.isTransaction, true);
    return trx.selectFrom('invoice').select(['id', 'total']).where('id', '=', 1).executeTakeFirstOrThrow();
  });
  await db.transaction().execute(async (trx) => {
    await kyselyFence.fence(trx, { resource: 'invoices', token: term.token });
    await trx.updateTable('invoice').set({ total: 3 }).execute();
  });
  return row.total;
}

export async function knexUser(knex: knexFactory.Knex, term: Term): Promise<void> {
  await knexFence.fencedTransaction(knex, { resource: 'invoices', term }, async (trx) => {
    await trx('invoice').insert({ id: 1 });
    assert.equal(trx.isTransaction, true);
    await trx.savepoint(async (sp) => sp('invoice').del());
  });
  await knex.transaction(async (trx) => {
    await knexFence.fence(trx, { resource: 'invoices', token: term.token });
  });
}

export async function drizzleUser(pool: pg.Pool, client: postgres.Sql, term: Term): Promise<void> {
  const db = drizzleNodePg(pool);
  await drizzleFence.fencedTransaction(db, { resource: 'invoices', term }, async (tx) => {
    await tx.execute(dsql`SELECT 1`);
    // NodePgTransaction's own methods: nested transactions, rollback.
    await tx.transaction(async (inner) => inner.execute(dsql`SELECT 2`));
    if (Math.random() > 2) tx.rollback();
  });
  const js = drizzlePostgresJs(client);
  await drizzleFence.fencedTransaction(js, { resource: 'invoices', token: term.token }, async (tx) => {
    const rows = await tx.execute<{ one: number }>(dsql`SELECT 1 AS one`);
    return rows[0]?.one; // postgres.js's RowList: an array
  });
}

export async function postgresJsUser(sql: postgres.Sql, term: Term): Promise<void> {
  await postgresFence.fencedTransaction(sql, { resource: 'invoices', term }, async (tx) => {
    await tx`INSERT INTO invoice ${tx({ id: 1 })}`;
    await tx.savepoint(async (sp) => sp`DELETE FROM invoice`);
  });
  await sql.begin(async (tx) => {
    await postgresFence.fence(tx, { resource: 'invoices', token: term.token });
  });
}

export async function typeormUser(ds: DataSource, term: Term): Promise<number> {
  return typeormFence.fencedTransaction(ds, { resource: 'invoices', term }, async (manager) => {
    // TypeORM's own EntityManager: its query builder and its transaction state.
    const qr = manager.queryRunner;
    assert.equal(qr?.isTransactionActive, true);
    const r = await manager.createQueryBuilder().select('1', 'one').from('invoice', 'i').getRawOne<{ one: number }>();
    return r?.one ?? 0;
  });
}

export async function sequelizeUser(sequelize: Sequelize, term: Term): Promise<void> {
  await sequelizeFence.fencedTransaction(sequelize, { resource: 'invoices', term }, async (transaction) => {
    // Sequelize's own Transaction: its hooks and its LOCK constants.
    transaction.afterCommit(() => undefined);
    assert.equal(typeof transaction.LOCK.UPDATE, 'string');
    await sequelize.query('SELECT 1', { transaction });
  });
  await sequelize.transaction(async (transaction) => {
    await sequelizeFence.fence(transaction, { resource: 'invoices', token: term.token });
  });
}

void describe('an ORM fence handed a handle on another database', () => {
  // The fence's SQL is PostgreSQL's: on another database it would fail as a syntax error, or
  // worse, half-run. Each adapter asks the library which database it talks to, before any statement.
  const refused = (e: unknown, library: string, dialect: RegExp): boolean =>
    e instanceof ConfigError && e.message.includes(`leasehold/fence/${library}`) && dialect.test(e.message) && /fencedMysqlTransaction|fencedWriteSync/.test(e.message);
  const options = { resource: 'r', token: 1n };
  const never = async (): Promise<void> => assert.fail('the callback ran on a database the fence does not speak');

  void it('TypeORM on SQLite, Drizzle on SQLite: a ConfigError that names the fence to use, and nothing runs (Kysely and Knex on SQLite: orm-sqlite.test.ts; on MySQL: orm-mysql.test.ts)', async () => {
    const { createRequire } = await import('node:module');
    const require = createRequire(import.meta.url);
    const Database = require('better-sqlite3') as new (file: string) => { close(): void };
    const { drizzle: drizzleSqlite } = await import('drizzle-orm/better-sqlite3');
    const file = new Database(':memory:');
    const typeorm = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
    const drizzle = drizzleSqlite(file as never);
    try {
      await assert.rejects(typeormFence.fencedTransaction(typeorm, options, never), (e) => refused(e, 'typeorm', /on better-sqlite3/));
      await assert.rejects(drizzleFence.fencedTransaction(drizzle as never, options, never), (e) => refused(e, 'drizzle', /on sqlite/));
    } finally {
      file.close();
    }
  });
});
