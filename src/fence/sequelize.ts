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
import { pgFenceDialect, type PgTxFenceOptions } from '../backends/postgres/fence.js';
import { fenceIn, fencedIn, type FenceExecute, requirePostgres } from './engine.js';

export type SequelizeFenceOptions = PgTxFenceOptions;

/** What the fence uses of a Sequelize instance. */
interface SequelizeLike {
  query(sql: string, options: { bind: unknown[]; type: string; transaction?: Transaction }): Promise<unknown>;
}

function execOn(sequelize: SequelizeLike, transaction: Transaction | undefined): FenceExecute {
  // type 'SELECT' (QueryTypes.SELECT): Sequelize answers with the rows. bind: `$1` parameters.
  return async (sql, params) =>
    (await sequelize.query(sql, { bind: [...params], type: 'SELECT', ...(transaction === undefined ? {} : { transaction }) })) as Record<string, unknown>[];
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
  requirePostgres('sequelize', dialectOf(transaction));
  return fenceIn(pgFenceDialect, execOn(ownerOf(transaction), transaction), options);
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
  requirePostgres('sequelize', dialectOf(sequelize));
  return fencedIn(
    pgFenceDialect,
    options,
    (body: (transaction: Transaction) => Promise<T>) => sequelize.transaction(body),
    (transaction) => execOn(s, transaction),
    execOn(s, undefined),
    fn,
  );
}

export { createPgFenceTable } from '../backends/postgres/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError } from '../core/errors.js';
