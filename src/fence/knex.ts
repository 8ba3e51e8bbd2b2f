/**
 * `leasehold/fence/knex`: the fence inside a Knex transaction (clients `pg`, `better-sqlite3`, `mysql2`).
 *
 * ```ts
 * await fencedTransaction(knex, { resource: 'invoices', term }, async (trx) => {
 *   await trx('invoice').insert(row);
 * });
 * ```
 * Knex is a peer dependency; this module imports only its types.
 */
import type { Knex } from 'knex';
import { fenceIn, fencedIn, questionMarks, type FenceExecute, dialectFor, type TxFenceOptions } from './engine.js';
import { pgFenceDialect } from '../backends/postgres/fence.js';
import { sqliteFenceDialect } from '../backends/sqlite/tx-fence.js';
import { mysqlFenceDialect } from '../backends/mysql/tx-fence.js';

const SQL = { postgres: pgFenceDialect, sqlite: sqliteFenceDialect, mysql: mysqlFenceDialect };

export type KnexFenceOptions = TxFenceOptions;

/** What the fence uses of a Knex instance or transaction. */
export interface KnexLike {
  raw(sql: string, bindings: readonly unknown[]): PromiseLike<unknown>;
}

function execOn(db: KnexLike): FenceExecute {
  const mysql = /mysql|mariadb/i.test(dialectOf(db) ?? '');
  return async (text, values) => {
    // Knex takes `?` (and reads every `?` as one, even in a string literal): the values go as bindings.
    const q = questionMarks(text, values);
    const r = (await db.raw(q.sql, q.params)) as { rows?: unknown[] } | unknown[];
    // pg: a result with `rows`; better-sqlite3: the rows; mysql2: [rows or a result header, fields].
    if (mysql) return (Array.isArray(r) && Array.isArray(r[0]) ? r[0] : []) as Record<string, unknown>[];
    return (Array.isArray(r) ? r : (r.rows ?? [])) as Record<string, unknown>[];
  };
}

/** The database a Knex handle talks to: its client's dialect ('postgresql', 'mysql', 'sqlite3', ...). */
function dialectOf(h: unknown): string | undefined {
  const d = (h as { client?: { dialect?: unknown } }).client?.dialect;
  return typeof d === 'string' ? d : undefined;
}

/**
 * Fences a transaction you opened: call it first inside `knex.transaction(async (trx) => ...)`.
 * @throws {FencedError} a newer term has written: let it leave the callback so Knex rolls back.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over or another process wrote with it.
 */
export async function fence(trx: Knex.Transaction, options: KnexFenceOptions): Promise<void> {
  return fenceIn(dialectFor('knex', dialectOf(trx), SQL), execOn(trx as unknown as KnexLike), options);
}

/**
 * Runs `fn` in `knex.transaction(...)`, fenced: the first statement advances the resource's
 * high-water mark, and with `term` the last checks the lease row. `fn` gets Knex's own
 * `Knex.Transaction`. Do not commit or roll back inside `fn`.
 * @throws {FencedError} a newer term has written: rolled back, nothing committed.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over, or another process wrote with it ('cloned').
 * @throws {StoreUnavailableError} PostgreSQL ended the transaction after `idleTimeout`; SQLite's write lock stayed busy.
 */
export async function fencedTransaction<T>(db: Knex, options: KnexFenceOptions, fn: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  return fencedIn(
    dialectFor('knex', dialectOf(db), SQL),
    options,
    (body: (trx: Knex.Transaction) => Promise<T>) => db.transaction(body),
    (trx) => execOn(trx as unknown as KnexLike),
    execOn(db as unknown as KnexLike),
    fn,
  );
}

export { createPgFenceTable } from '../backends/postgres/fence.js';
export { createSqliteFenceTable } from '../backends/sqlite/fence.js';
export { createMysqlFenceTable } from '../backends/mysql/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError } from '../core/errors.js';
