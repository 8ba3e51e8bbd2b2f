/**
 * `leasehold/fence/drizzle`: the fence inside a Drizzle transaction: PostgreSQL drivers
 * (node-postgres `drizzle-orm/node-postgres` and postgres.js `drizzle-orm/postgres-js`) and
 * MySQL's `drizzle-orm/mysql2`. SQLite's better-sqlite3 driver has synchronous transactions: fence
 * those with `fencedWriteSync(db.$client, ...)` from leasehold/fence.
 *
 * ```ts
 * await fencedTransaction(db, { resource: 'invoices', term }, async (tx) => {
 *   await tx.insert(invoice).values(row);
 * });
 * ```
 * drizzle-orm is a peer dependency: this module loads its `sql` tag, which is how Drizzle runs a
 * statement in a transaction.
 */
import { sql, type SQL } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type { MySqlDatabase, MySqlQueryResultHKT, PreparedQueryHKTBase } from 'drizzle-orm/mysql-core';
import { pgFenceDialect } from '../backends/postgres/fence.js';
import { mysqlFenceDialect } from '../backends/mysql/tx-fence.js';
import { dialectFor, fenceIn, fencedIn, type FenceExecute, type TxFenceOptions } from './engine.js';

export type DrizzleFenceOptions = TxFenceOptions;

const DIALECTS = { postgres: pgFenceDialect, mysql: mysqlFenceDialect };

/** A Drizzle PostgreSQL database (any driver), or a transaction of one. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type DrizzlePgDatabase = PgDatabase<PgQueryResultHKT, any, any>;
/** A Drizzle MySQL database (drizzle-orm/mysql2), or a transaction of one. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type DrizzleMysqlDatabase = MySqlDatabase<MySqlQueryResultHKT, PreparedQueryHKTBase, any, any>;
/** The databases the fence speaks: PostgreSQL (node-postgres, postgres.js) and MySQL (mysql2). */
export type DrizzleDatabase = DrizzlePgDatabase | DrizzleMysqlDatabase;

/** What `fn` is given: the database's own transaction type (NodePgTransaction, PostgresJsTransaction...). */
export type DrizzleTransactionOf<D extends DrizzleDatabase> = Parameters<Parameters<D['transaction']>[0]>[0];

/** What the fence uses of a database or transaction. */
interface DrizzleLike {
  execute(query: SQL): PromiseLike<unknown>;
}

/** `$n` placeholders as Drizzle parameters, the rest as raw SQL. */
function toSql(text: string, params: readonly unknown[]): SQL {
  const parts = text.split(/\$(\d+)/);
  const chunks: SQL[] = [];
  parts.forEach((part, i) => chunks.push(i % 2 === 0 ? sql.raw(part) : sql`${params[Number(part) - 1]}`));
  return sql.join(chunks);
}

function execOn(db: DrizzleLike): FenceExecute {
  const mysql = dialectOf(db) === 'mysql';
  return async (text, params) => {
    // node-postgres answers a QueryResult, postgres.js the rows themselves, mysql2 [rows or a result header, fields].
    const r = (await db.execute(toSql(text, params))) as { rows?: unknown[] } | unknown[];
    if (mysql) return (Array.isArray(r) && Array.isArray(r[0]) ? r[0] : []) as Record<string, unknown>[];
    return (Array.isArray(r) ? r : (r.rows ?? [])) as Record<string, unknown>[];
  };
}

/** The database a Drizzle handle talks to, from its dialect's entity kind (PgDialect, MySqlDialect, SQLiteSyncDialect). */
function dialectOf(h: unknown): string | undefined {
  const ctor = (h as { dialect?: object }).dialect?.constructor as Record<symbol, unknown> | undefined;
  const kind = ctor?.[Symbol.for('drizzle:entityKind')];
  if (typeof kind !== 'string') return undefined;
  return /^Pg/.test(kind) ? 'postgres' : /^MySql/.test(kind) ? 'mysql' : /^SQLite/.test(kind) ? 'sqlite' : kind;
}

/**
 * Fences a transaction you opened: call it first inside `db.transaction(async (tx) => ...)`.
 * @throws {FencedError} a newer term has written: let it leave the callback so Drizzle rolls back.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over or another process wrote with it.
 */
export async function fence(tx: DrizzleDatabase, options: DrizzleFenceOptions): Promise<void> {
  return fenceIn(dialectFor('drizzle', dialectOf(tx), DIALECTS), execOn(tx as unknown as DrizzleLike), options);
}

/**
 * Runs `fn` in `db.transaction(...)`, fenced: the first statement advances the resource's
 * high-water mark, and with `term` the last checks the lease row. `fn` gets the driver's own
 * transaction type.
 * @throws {FencedError} a newer term has written: rolled back, nothing committed.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over, or another process wrote with it ('cloned').
 * @throws {StoreUnavailableError} PostgreSQL ended the transaction after `idleTimeout`.
 */
export async function fencedTransaction<D extends DrizzleDatabase, T>(db: D, options: DrizzleFenceOptions, fn: (tx: DrizzleTransactionOf<D>) => Promise<T>): Promise<T> {
  return fencedIn(
    dialectFor('drizzle', dialectOf(db), DIALECTS),
    options,
    (body: (tx: DrizzleTransactionOf<D>) => Promise<T>) => db.transaction(body as never) as Promise<T>,
    (tx) => execOn(tx as unknown as DrizzleLike),
    execOn(db as unknown as DrizzleLike),
    fn,
  );
}

export { createPgFenceTable } from '../backends/postgres/fence.js';
export { createMysqlFenceTable } from '../backends/mysql/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError } from '../core/errors.js';
