/**
 * `leasehold/fence/kysely`: the fence inside a Kysely transaction (PostgresDialect, SqliteDialect, MysqlDialect).
 *
 * ```ts
 * await fencedTransaction(db, { resource: 'invoices', term }, async (trx) => {
 *   await trx.insertInto('invoice').values(row).execute();
 * });
 * ```
 * Kysely is a peer dependency; this module imports only its types.
 */
import type { Kysely, Transaction } from 'kysely';
import { fenceIn, fencedIn, questionMarks, type FenceExecute, dialectFor, type TxFenceOptions } from './engine.js';
import { pgFenceDialect } from '../backends/postgres/fence.js';
import { sqliteFenceDialect } from '../backends/sqlite/tx-fence.js';
import { mysqlFenceDialect } from '../backends/mysql/tx-fence.js';

const SQL = { postgres: pgFenceDialect, sqlite: sqliteFenceDialect, mysql: mysqlFenceDialect };

/** The options of a Kysely fence: `{ resource, token }` or `{ resource, term }`, see {@link PgFenceOptions} (on SQLite `table` is a plain name and there is no `idleTimeout`). */
export type KyselyFenceOptions = TxFenceOptions;

/** What the fence uses of a Kysely instance or transaction. */
export interface KyselyLike {
  executeQuery(query: never): Promise<{ rows: unknown[] }>;
}

/**
 * A raw compiled query, built structurally (Kysely's own `CompiledQuery.raw` has this shape)
 * so that this module needs no runtime import of Kysely.
 */
function raw(sql: string, parameters: readonly unknown[]): unknown {
  const id = `lh${Math.random().toString(36).slice(2, 10)}`;
  return { sql, parameters, query: { kind: 'RawNode', sqlFragments: [sql], parameters: [] }, queryId: { queryId: id } };
}

function execOn(db: KyselyLike): FenceExecute {
  // PostgreSQL takes `$n`; SQLite's drivers bind an array only to `?` (to them `$1` is a name), MySQL's take only `?`.
  const positional = dialectOf(db) !== 'postgres';
  return async (text, params) => {
    const q = positional ? questionMarks(text, params) : { sql: text, params };
    return (await db.executeQuery(raw(q.sql, q.params) as never)).rows as Record<string, unknown>[];
  };
}

/** The database a Kysely handle talks to, from its dialect's adapter (PostgresAdapter, MysqlAdapter, SqliteAdapter). */
function dialectOf(h: unknown): string | undefined {
  const name = (h as { getExecutor?: () => { adapter?: object } }).getExecutor?.().adapter?.constructor.name;
  return name === undefined ? undefined : name.replace(/Adapter$/, '').toLowerCase();
}

/**
 * Fences a transaction you opened: call it first inside `db.transaction().execute(...)`.
 * @throws {FencedError} a newer term has written: let it leave the callback so Kysely rolls back.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over or another process wrote with it.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function fence(trx: Transaction<any>, options: KyselyFenceOptions): Promise<void> {
  return fenceIn(dialectFor('kysely', dialectOf(trx), SQL), execOn(trx as unknown as KyselyLike), options);
}

/**
 * Runs `fn` in a Kysely transaction whose first statement advances the resource's high-water
 * mark (and, with `term`, whose last checks the lease row), as the `pg` fencedTransaction does.
 * `fn` gets Kysely's own `Transaction<DB>`.
 * @throws {FencedError} a newer term has written: rolled back, nothing committed.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over, or another process wrote with it ('cloned').
 * @throws {StoreUnavailableError} PostgreSQL ended the transaction after `idleTimeout`; SQLite's write lock stayed busy.
 */
export async function fencedTransaction<DB, T>(db: Kysely<DB>, options: KyselyFenceOptions, fn: (trx: Transaction<DB>) => Promise<T>): Promise<T> {
  return fencedIn(
    dialectFor('kysely', dialectOf(db), SQL),
    options,
    (body: (trx: Transaction<DB>) => Promise<T>) => db.transaction().execute(body),
    (trx) => execOn(trx as unknown as KyselyLike),
    execOn(db as unknown as KyselyLike),
    fn,
  );
}

export { createPgFenceTable, type PgFenceOptions } from '../backends/postgres/fence.js';
export { createSqliteFenceTable } from '../backends/sqlite/fence.js';
export { createMysqlFenceTable } from '../backends/mysql/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError } from '../core/errors.js';
