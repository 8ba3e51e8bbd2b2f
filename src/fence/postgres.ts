import { ConfigError, FencedError, SchemaError } from '../core/errors.js';
import { mapPgError, type PgPoolLike, type PgQueryableLike } from '../stores/postgres/store.js';

export interface PgFenceOptions {
  /** What is being protected: one high-water mark per resource ("invoices", "tenant:42"). */
  resource: string;
  /** The token of the term doing this write. */
  token: bigint;
  /**
   * The high-water-mark table, `schema.table`. Default `leasehold.fences`, created by
   * `leasehold migrate` in the store's schema: with a store URL `?schema=x`, pass `x.fences`.
   */
  table?: string;
}

/** A pool to check a connection out of, or a client you already hold (not inside a transaction). */
export type PgFenceTarget = PgPoolLike | PgQueryableLike;

/**
 * A pool hands out clients; a client (pg.Client, or a PoolClient you checked out) is used as
 * is. Both have `connect`, so tell them apart by what only clients have.
 */
function isPool(target: PgFenceTarget): target is PgPoolLike {
  const t = target as unknown as Record<string, unknown>;
  const clientLike = typeof t['release'] === 'function' || 'processID' in t || 'connection' in t;
  return !clientLike && typeof t['connect'] === 'function';
}

export function fenceTableName(table = 'leasehold.fences'): string {
  const parts = table.split('.');
  if (parts.length > 2 || parts.some((p) => !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(p))) {
    throw new ConfigError(`fence table ${JSON.stringify(table)} is not [schema.]table made of letters, digits and _`);
  }
  return parts.map((p) => `"${p}"`).join('.');
}

/** Creates a fence table in the resource's own database, if the lease store lives elsewhere. */
export async function createPgFenceTable(db: PgQueryableLike, table = 'leasehold.fences'): Promise<void> {
  const t = fenceTableName(table);
  const parts = table.split('.');
  if (parts.length === 2) await db.query(`CREATE SCHEMA IF NOT EXISTS "${parts[0]}"`);
  await db.query(
    `CREATE TABLE IF NOT EXISTS ${t} (resource text PRIMARY KEY, token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
  );
}

/**
 * Runs `fn` inside one transaction that first advances the resource's high-water mark to
 * `token`, refusing if the mark is already higher. The mark's row stays locked until commit,
 * so an older term's transaction waits and then fails; it never interleaves with a newer one.
 *
 * @throws {FencedError} a newer term has written: the transaction was rolled back, zero rows changed.
 * @throws {SchemaError} the fence table is missing.
 */
export async function fencedTransaction<T>(
  target: PgFenceTarget,
  options: PgFenceOptions,
  fn: (tx: PgQueryableLike) => Promise<T>,
): Promise<T> {
  if (typeof options.token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token)');
  const table = fenceTableName(options.table);
  const pooled = isPool(target);
  const client: PgQueryableLike = pooled ? await target.connect().catch((err: unknown) => Promise.reject(mapPgError(err, 'fence'))) : target;
  let broken: Error | undefined;
  // A pooled client has no 'error' listener of its own while checked out: if the server drops
  // the connection mid-transaction, an unhandled 'error' event would crash the process. The
  // query in flight rejects anyway; remember the client is broken so the pool discards it.
  const onError = (err: Error): void => {
    broken = err;
  };
  const emitter = pooled ? (client as unknown as { on?(e: 'error', l: (err: Error) => void): unknown; off?(e: 'error', l: (err: Error) => void): unknown }) : undefined;
  emitter?.on?.('error', onError);
  try {
    await client.query('BEGIN');
    let advanced;
    try {
      advanced = await client.query(
        `INSERT INTO ${table} AS f (resource, token, updated_at) VALUES ($1, $2, now())
         ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
          WHERE f.token <= EXCLUDED.token
         RETURNING token`,
        [options.resource, options.token.toString()],
      );
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === '42P01' || code === '3F000') {
        throw new SchemaError(`fence table ${options.table ?? 'leasehold.fences'} does not exist; run \`leasehold migrate\` or createPgFenceTable()`, {
          cause: err,
        });
      }
      throw err;
    }
    if (advanced.rows.length === 0) {
      const hw = await client.query(`SELECT token FROM ${table} WHERE resource = $1`, [options.resource]);
      await client.query('ROLLBACK');
      const mark = hw.rows[0]?.['token'];
      throw new FencedError(options.resource, options.token, mark == null ? null : BigInt(mark as string));
    }
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    if (!(err instanceof FencedError)) {
      await client.query('ROLLBACK').catch((e: unknown) => {
        broken = e as Error;
      });
    }
    throw err;
  } finally {
    if (pooled) {
      emitter?.off?.('error', onError);
      (client as unknown as { release(err?: Error): void }).release(broken);
    }
  }
}
