/**
 * `leasehold/fence/sequelize`: the fence inside a Sequelize managed transaction (the `postgres`
 * dialect).
 *
 * ```ts
 * await fencedTransaction(sequelize, { resource: 'invoices', term }, async (transaction) => {
 *   await Invoice.create(row, { transaction });
 * });
 * ```
 * Sequelize is a peer dependency; this module imports only its types.
 */
import type { Sequelize, Transaction } from 'sequelize';
import { ConfigError } from '../core/errors.js';
import { pgFenceDialect } from '../backends/postgres/fence.js';
import { mysqlFenceDialect } from '../backends/mysql/tx-fence.js';
import { dialectFor, fenceIn, fencedIn, type FenceExecute, type TxFenceOptions } from './engine.js';

export type SequelizeFenceOptions = TxFenceOptions;

const DIALECTS = { postgres: pgFenceDialect, mysql: mysqlFenceDialect };

/** What the fence uses of a Sequelize instance. */
interface SequelizeLike {
  query(sql: string, options: { bind: unknown[]; type: string; transaction?: Transaction }): Promise<unknown>;
}

function execOn(sequelize: SequelizeLike, transaction: Transaction | undefined): FenceExecute {
  const mysql = /mysql|mariadb/i.test(dialectOf(sequelize) ?? '');
  const tx = transaction === undefined ? {} : { transaction };
  return async (sql, params) => {
    // bind: `$1` parameters, on every dialect. PostgreSQL: every statement is a SELECT, and type
    // 'SELECT' answers with the rows. MySQL: a write answers a result header, so 'RAW' ([rows, meta]).
    if (!mysql) return (await sequelize.query(sql, { bind: [...params], type: 'SELECT', ...tx })) as Record<string, unknown>[];
    const r = (await sequelize.query(sql, { bind: [...params], type: 'RAW', ...tx })) as unknown[];
    return (Array.isArray(r[0]) ? r[0] : []) as Record<string, unknown>[];
  };
}

/** A transaction knows its Sequelize instance (Sequelize's types do not say so). */
function ownerOf(transaction: Transaction): SequelizeLike {
  const s = (transaction as unknown as { sequelize?: SequelizeLike }).sequelize;
  if (s === undefined || typeof s.query !== 'function') throw new ConfigError('fence(transaction) needs a Sequelize transaction (from sequelize.transaction())');
  return s;
}

/** The database a Sequelize instance or transaction talks to: its getDialect(). */
function dialectOf(h: unknown): string | undefined {
  const o = h as { getDialect?: () => unknown; sequelize?: { getDialect?: () => unknown } };
  const d = o.getDialect?.() ?? o.sequelize?.getDialect?.();
  return typeof d === 'string' ? d : undefined;
}

/**
 * Fences a transaction you opened: call it first inside `sequelize.transaction(async (t) => ...)`.
 * @throws {FencedError} a newer term has written: let it leave the callback so Sequelize rolls back.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over or another process wrote with it.
 */
export async function fence(transaction: Transaction, options: SequelizeFenceOptions): Promise<void> {
  return fenceIn(dialectFor('sequelize', dialectOf(transaction), DIALECTS), execOn(ownerOf(transaction), transaction), options);
}

/**
 * Runs `fn` in a managed `sequelize.transaction(...)`, fenced: the first statement advances the
 * resource's high-water mark, and with `term` the last checks the lease row. `fn` gets
 * Sequelize's own `Transaction`: pass it as `{ transaction }` to every query.
 * @throws {FencedError} a newer term has written: rolled back, nothing committed.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over, or another process wrote with it ('cloned').
 * @throws {StoreUnavailableError} PostgreSQL ended the transaction after `idleTimeout`.
 */
export async function fencedTransaction<T>(sequelize: Sequelize, options: SequelizeFenceOptions, fn: (transaction: Transaction) => Promise<T>): Promise<T> {
  const s = sequelize as unknown as SequelizeLike;
  return fencedIn(
    dialectFor('sequelize', dialectOf(sequelize), DIALECTS),
    options,
    (body: (transaction: Transaction) => Promise<T>) => sequelize.transaction(body),
    (transaction) => execOn(s, transaction),
    execOn(s, undefined),
    fn,
  );
}

export { createPgFenceTable } from '../backends/postgres/fence.js';
export { createMysqlFenceTable } from '../backends/mysql/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError } from '../core/errors.js';
