/**
 * `leasehold/fence/postgres`: the fence inside a postgres.js (`postgres` package) transaction.
 *
 * ```ts
 * await fencedTransaction(sql, { resource: 'invoices', term }, async (tx) => {
 *   await tx`INSERT INTO invoice ${tx(row)}`;
 * });
 * ```
 * postgres.js is a peer dependency; this module imports only its types.
 */
import type { Sql, TransactionSql } from 'postgres';
import { StoreUnavailableError } from '../core/errors.js';
import { pgFenceDialect, type PgTxFenceOptions } from '../backends/postgres/fence.js';
import { fenceIn, fencedIn, type FenceExecute } from './engine.js';

export type PostgresJsFenceOptions = PgTxFenceOptions;

/** What the fence uses of a postgres.js `sql` or transaction. */
interface PostgresJsLike {
  unsafe(query: string, parameters: unknown[]): PromiseLike<unknown>;
}

function execOn(db: PostgresJsLike): FenceExecute {
  return async (text, params) => [...((await db.unsafe(text, [...params])) as Record<string, unknown>[])];
}

/** The ways a postgres.js transaction starts a statement: `tx\`...\``, and these methods. */
const STATEMENTS = new Set<PropertyKey>(['unsafe', 'file', 'savepoint', 'prepare']);

/**
 * `tx` as is, except that once its transaction is over no new statement can start on it.
 *
 * Why: when the server ends the transaction's connection (the idle bound cutting off a frozen
 * writer), postgres.js rejects `sql.begin()` at once, but `fn` is still running, and its next
 * statement on `tx` either runs on a reconnected connection outside any transaction (committed
 * at once, unfenced: seen with postgres 3.4.9) or crashes the process with a TypeError thrown
 * from a timer. Here it is refused with StoreUnavailableError instead.
 */
function guarded<X extends object>(tx: X, over: () => string | undefined): X {
  const refuse = (): never => {
    throw new StoreUnavailableError(`this postgres.js transaction is over (${over()}); the statement was not run: stop this unit of work`);
  };
  return new Proxy(tx, {
    apply(target, self, args: unknown[]) {
      // A tagged template (tx`...`) is a statement; tx(value) is a helper, and stays allowed.
      if (over() !== undefined && Array.isArray(args[0]) && 'raw' in args[0]) refuse();
      return Reflect.apply(target as (...a: unknown[]) => unknown, self, args);
    },
    get(target, prop, receiver) {
      const v: unknown = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function' || !STATEMENTS.has(prop)) return v;
      return (...args: unknown[]) => {
        if (over() !== undefined) refuse();
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

/**
 * Fences a transaction you opened: call it first inside `sql.begin(async (tx) => ...)`.
 * @throws {FencedError} a newer term has written: let it leave the callback so postgres.js rolls back.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over or another process wrote with it.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function fence(tx: TransactionSql<any>, options: PostgresJsFenceOptions): Promise<void> {
  return fenceIn(pgFenceDialect, execOn(tx as unknown as PostgresJsLike), options);
}

/**
 * Runs `fn` in `sql.begin(...)`, fenced: the first statement advances the resource's high-water
 * mark, and with `term` the last checks the lease row. `fn` gets postgres.js's own `TransactionSql`.
 * @throws {FencedError} a newer term has written: rolled back, nothing committed.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over, or another process wrote with it ('cloned').
 * @throws {StoreUnavailableError} PostgreSQL ended the transaction after `idleTimeout`.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function fencedTransaction<TT extends Record<string, any>, T>(
  db: Sql<TT>,
  options: PostgresJsFenceOptions,
  fn: (tx: TransactionSql<TT>) => Promise<T>,
): Promise<T> {
  let over: string | undefined;
  const begin = async (body: (tx: TransactionSql<TT>) => Promise<T>): Promise<T> => {
    try {
      return (await db.begin((tx) => body(guarded(tx, () => over)))) as T;
    } catch (err) {
      over = `it ended with ${(err as { code?: unknown }).code === undefined ? 'an error' : String((err as { code?: unknown }).code)}`;
      throw err;
    } finally {
      over ??= 'it committed';
    }
  };
  return fencedIn(pgFenceDialect, options, begin, (tx) => execOn(tx as unknown as PostgresJsLike), execOn(db as unknown as PostgresJsLike), fn);
}

export { createPgFenceTable } from '../backends/postgres/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError } from '../core/errors.js';
