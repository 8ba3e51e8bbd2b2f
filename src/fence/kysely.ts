/**
 * `leasehold/fence/kysely`: the fence inside a Kysely transaction (PostgreSQL dialect).
 *
 * ```ts
 * await fencedTransaction(db, { resource: 'invoices', term }, async (trx) => {
 *   await trx.insertInto('invoice').values(row).execute();
 * });
 * ```
 * Kysely is a peer dependency; this module imports only its types.
 */
import type { Kysely, Transaction } from 'kysely';
import { pgFenceDialect, type PgTxFenceOptions } from '../backends/postgres/fence.js';
import { fenceIn, fencedIn, type FenceExecute, requirePostgres } from './engine.js';

/** The options of a Kysely fence: `{ resource, token }` or `{ resource, term }`, see {@link PgTxFenceOptions}. */
export type KyselyFenceOptions = PgTxFenceOptions;

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
  return async (sql, params) => (await db.executeQuery(raw(sql, params) as never)).rows as Record<string, unknown>[];
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
  requirePostgres('kysely', dialectOf(trx));
  return fenceIn(pgFenceDialect, execOn(trx as unknown as KyselyLike), options);
}

/**
 * Runs `fn` in a Kysely transaction whose first statement advances the resource's high-water
 * mark (and, with `term`, whose last checks the lease row), as the `pg` fencedTransaction does.
 * `fn` gets Kysely's own `Transaction<DB>`.
 * @throws {FencedError} a newer term has written: rolled back, nothing committed.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease.
 * @throws {LeaseLostError} (with `term`) the term is over, or another process wrote with it ('cloned').
 * @throws {StoreUnavailableError} PostgreSQL ended the transaction after `idleTimeout`.
 */
export async function fencedTransaction<DB, T>(db: Kysely<DB>, options: KyselyFenceOptions, fn: (trx: Transaction<DB>) => Promise<T>): Promise<T> {
  requirePostgres('kysely', dialectOf(db));
  return fencedIn(
    pgFenceDialect,
    options,
    (body: (trx: Transaction<DB>) => Promise<T>) => db.transaction().execute(body),
    (trx) => execOn(trx as unknown as KyselyLike),
    execOn(db as unknown as KyselyLike),
    fn,
  );
}

export { createPgFenceTable } from '../backends/postgres/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError } from '../core/errors.js';
