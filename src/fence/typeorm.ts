/**
 * `leasehold/fence/typeorm`: the fence inside a TypeORM transaction (the `postgres` driver).
 *
 * ```ts
 * await fencedTransaction(dataSource, { resource: 'invoices', term }, async (manager) => {
 *   await manager.save(Invoice, row);
 * });
 * ```
 * TypeORM is a peer dependency; this module imports only its types.
 */
import type { DataSource, EntityManager } from 'typeorm';
import { pgFenceDialect } from '../backends/postgres/fence.js';
import { mysqlFenceDialect } from '../backends/mysql/tx-fence.js';
import { dialectFor, fenceIn, fencedIn, questionMarks, type FenceExecute, type TxFenceOptions } from './engine.js';

export type TypeormFenceOptions = TxFenceOptions;

const DIALECTS = { postgres: pgFenceDialect, mysql: mysqlFenceDialect };

/** What the fence uses of a DataSource or an EntityManager. */
interface TypeormLike {
  query(sql: string, parameters: unknown[]): Promise<unknown>;
}

function execOn(db: TypeormLike): FenceExecute {
  const mysql = /mysql|mariadb/i.test(dialectOf(db) ?? '');
  return async (sql, params) => {
    if (!mysql) return (await db.query(sql, [...params])) as Record<string, unknown>[]; // PostgreSQL: every statement a SELECT, answered with rows
    // mysql2 takes `?`, and answers a write with a result header, not rows.
    const q = questionMarks(sql, params);
    const r = await db.query(q.sql, q.params);
    return (Array.isArray(r) ? r : []) as Record<string, unknown>[];
  };
}

/** The database a TypeORM data source or entity manager talks to: its options' `type`. */
function dialectOf(h: unknown): string | undefined {
  const o = h as { options?: { type?: unknown }; connection?: { options?: { type?: unknown } } };
  const t = o.options?.type ?? o.connection?.options?.type;
  return typeof t === 'string' ? t : undefined;
}

/**
 * Fences a transaction you opened: call it first inside `dataSource.transaction(async (manager) => ...)`.
 * @throws {FencedError} a newer term has written: let it leave the callback so TypeORM rolls back.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over or another process wrote with it.
 */
export async function fence(manager: EntityManager, options: TypeormFenceOptions): Promise<void> {
  return fenceIn(dialectFor('typeorm', dialectOf(manager), DIALECTS), execOn(manager as unknown as TypeormLike), options);
}

/**
 * Runs `fn` in `dataSource.transaction(...)`, fenced: the first statement advances the
 * resource's high-water mark, and with `term` the last checks the lease row. `fn` gets TypeORM's
 * own transactional `EntityManager`.
 * @throws {FencedError} a newer term has written: rolled back, nothing committed.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over, or another process wrote with it ('cloned').
 * @throws {StoreUnavailableError} PostgreSQL ended the transaction after `idleTimeout`.
 */
export async function fencedTransaction<T>(dataSource: DataSource, options: TypeormFenceOptions, fn: (manager: EntityManager) => Promise<T>): Promise<T> {
  return fencedIn(
    dialectFor('typeorm', dialectOf(dataSource), DIALECTS),
    options,
    (body: (manager: EntityManager) => Promise<T>) => dataSource.transaction(body),
    (manager) => execOn(manager as unknown as TypeormLike),
    execOn(dataSource as unknown as TypeormLike),
    fn,
  );
}

export { createPgFenceTable } from '../backends/postgres/fence.js';
export { createMysqlFenceTable } from '../backends/mysql/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError } from '../core/errors.js';
