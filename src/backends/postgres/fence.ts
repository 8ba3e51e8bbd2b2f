import { ConfigError, FencedError, LeaseLostError, SchemaError, StoreUnavailableError } from '../../core/errors.js';
import { leaseOf, type Lease, type Term } from '../../core/lease.js';
import { parseDuration, type Duration } from '../../core/config.js';
import { mapPgError } from './errors.js';
import { PostgresStore, type PgPoolLike, type PgQueryableLike, type PgResultLike } from './store.js';
import { classifyFenceFailure, rotateFenceNonceAndCommit, sqlLiteral } from './term-fence.js';

export type PgFenceOptions = {
  /** What is being protected: one high-water mark per resource ("invoices", "tenant:42"). */
  resource: string;
  /**
   * The high-water-mark table, `schema.table`. Default `leasehold.fences`, created by
   * `leasehold migrate` in the store's schema: with a store URL `?schema=x`, pass `x.fences`
   * (with `term`, the default is the lease store's own schema).
   */
  table?: string;
  /**
   * How long this transaction may sit idle between statements before PostgreSQL rolls it back
   * (`idle_in_transaction_session_timeout`, set for this transaction only). The fence row stays
   * locked until commit, so a writer frozen mid-transaction (SIGSTOP, a paused VM, a long GC)
   * would make every newer term's write wait for as long as the freeze lasts; past this bound
   * the frozen transaction is ended, its connection closed, and the newer term goes ahead.
   * Default: with `term`, the lease's TTL (by then the frozen term has expired anyway); with
   * `token` only, no bound of ours. `false` for none. A duration string or milliseconds.
   */
  idleTimeout?: Duration | false;
} & (
  | {
      /** The token of the term doing this write. */
      token: bigint;
      term?: Term;
    }
  | {
      /**
       * The term doing this write, when the resource lives in the lease store's own PostgreSQL
       * database. The transaction then also checks, under the lease row's lock, that the term is
       * live in the store and that no other process has written with it (a snapshot restored
       * twice): of two processes holding one term, only one can ever commit. The other is
       * rolled back with `LeaseLostError` reason 'cloned' and its term ends.
       */
      term: Term;
      /** Optional with `term`; if given, it must be the term's. */
      token?: bigint;
    }
);

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

function fenceTableName(table = 'leasehold.fences'): string {
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

/** The lease a `term` option belongs to, and the schema its row lives in. */
function sameDatabase(term: Term): { lease: Lease; schema: string } {
  const lease = leaseOf(term);
  if (lease === undefined) throw new ConfigError('`term` must be a term this process acquired (from acquire(), onElected or runExclusive)');
  const store = lease.fenceStore;
  if (!(store instanceof PostgresStore)) {
    throw new ConfigError(
      `lease "${lease.name}" lives in a ${store.kind} store, not PostgreSQL: \`term\` checks the lease in the transaction's own database. ` +
        'For a resource outside the lease store, pass `token` only (and use idempotency keys).',
    );
  }
  return { lease, schema: store.schema };
}

/** idle_in_transaction_session_timeout's FATAL (SQLSTATE 25P03). */
function endedIdle(err: unknown): boolean {
  return (err as { code?: unknown } | undefined)?.code === '25P03';
}

/** The idle-in-transaction bound in ms, or undefined for none of ours (PostgreSQL's 0 would mean "none" too). */
function idleBound(option: Duration | false | undefined, term: Term | undefined): number | undefined {
  if (option === false) return undefined;
  if (option === undefined) return term === undefined ? undefined : leaseOf(term)?.timing.ttlMs;
  const ms = parseDuration(option, 'idleTimeout');
  if (ms < 1) throw new ConfigError('idleTimeout must be at least 1ms; pass false for no bound');
  return ms;
}

/**
 * Runs `fn` inside one transaction that first advances the resource's high-water mark to
 * `token`, refusing if the mark is already higher. The mark's row stays locked until commit,
 * so an older term's transaction waits and then fails; it never interleaves with a newer one.
 *
 * With `term` (the resource is in the lease store's database), the transaction's last step,
 * after `fn`, checks the lease row and swaps its fence nonce (see backends/postgres/term-fence.ts).
 *
 * @throws {FencedError} a newer term has written: the transaction was rolled back, zero rows changed.
 * @throws {LeaseLostError} (with `term`) the term is over, in this process or in the store; reason
 *   'cloned' when another process wrote with the same term. Rolled back; the term's signal aborts.
 * @throws {SchemaError} the fence table is missing.
 * @throws {StoreUnavailableError} the transaction sat idle past `idleTimeout` and PostgreSQL
 *   ended it (nothing committed).
 */
export async function fencedTransaction<T>(
  target: PgFenceTarget,
  options: PgFenceOptions,
  fn: (tx: PgQueryableLike) => Promise<T>,
): Promise<T> {
  const term = options.term;
  const token = options.token ?? term?.token;
  if (typeof token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token), or pass the term');
  if (term !== undefined && token !== term.token) throw new ConfigError(`token ${token} is not the token of the term passed with it (${term.token})`);
  const same = term === undefined ? undefined : sameDatabase(term);
  if (term?.signal.aborted) throw term.signal.reason as Error;
  const tableOption = options.table ?? (same === undefined ? undefined : `${same.schema}.fences`);
  const table = fenceTableName(tableOption);
  const idleMs = idleBound(options.idleTimeout, term);
  const pooled = isPool(target);
  const client: PgQueryableLike = pooled ? await target.connect().catch((err: unknown) => Promise.reject(mapPgError(err, 'fence'))) : target;
  let broken: Error | undefined;
  // A pooled client has no 'error' listener of its own while checked out: if the server drops
  // the connection mid-transaction, an unhandled 'error' event would crash the process. The
  // query in flight rejects anyway; remember the client is broken so the pool discards it.
  const onError = (err: Error): void => {
    broken ??= err; // the first says why (a FATAL with its SQLSTATE); "Connection terminated" follows
  };
  // With an idle bound the server may end the session itself (a process frozen mid-transaction,
  // resumed): listen on a client you hold too, for the transaction only, so that ending arrives
  // as this call's typed error and not as an unhandled 'error' event.
  const emitter =
    pooled || idleMs !== undefined
      ? (client as unknown as { on?(e: 'error', l: (err: Error) => void): unknown; off?(e: 'error', l: (err: Error) => void): unknown })
      : undefined;
  emitter?.on?.('error', onError);
  let open = false;
  try {
    // One round trip: BEGIN (and the idle bound) and the mark's advance, as one simple query,
    // which carries no parameters (the resource goes in as a literal). Open from here: if the
    // advance fails, BEGIN has run and the transaction is aborted, for the catch to roll back.
    const begin = idleMs === undefined ? 'BEGIN' : `BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${idleMs}`;
    open = true;
    let advanced: PgResultLike;
    try {
      const results = (await client.query(
        `${begin};
         INSERT INTO ${table} AS f (resource, token, updated_at) VALUES (${sqlLiteral(options.resource)}, ${token.toString()}, now())
         ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
          WHERE f.token <= EXCLUDED.token
         RETURNING token`,
      )) as PgResultLike | PgResultLike[];
      advanced = Array.isArray(results) ? results[results.length - 1]! : results;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === '42P01' || code === '3F000') {
        throw new SchemaError(`fence table ${tableOption ?? 'leasehold.fences'} does not exist; run \`leasehold migrate\` or createPgFenceTable()`, {
          cause: err,
        });
      }
      throw err;
    }
    if (advanced.rows.length === 0) {
      const hw = await client.query(`SELECT token FROM ${table} WHERE resource = $1`, [options.resource]);
      open = false;
      await client.query('ROLLBACK');
      const mark = hw.rows[0]?.['token'];
      throw new FencedError(options.resource, token, mark == null ? null : BigInt(mark as string));
    }
    const result = await fn(client);
    if (same !== undefined && term !== undefined) {
      await commitAsTerm(client, same, term, () => {
        open = false;
      });
    } else {
      await client.query('COMMIT');
    }
    return result;
  } catch (err) {
    if (open) {
      await client.query('ROLLBACK').catch((e: unknown) => {
        broken ??= e as Error;
      });
    }
    if (idleMs !== undefined && endedIdle(broken ?? err)) {
      throw new StoreUnavailableError(
        `PostgreSQL ended the fenced transaction on "${options.resource}" after it sat idle for ${idleMs}ms (idleTimeout), ` +
          'usually because this process was frozen mid-transaction: nothing was committed; retry with a live term',
        { cause: broken ?? err },
      );
    }
    throw err;
  } finally {
    emitter?.off?.('error', onError);
    if (pooled) (client as unknown as { release(err?: Error): void }).release(broken);
  }
}

/**
 * The last step of a fenced transaction with `term`: swap the lease row's fence nonce and
 * COMMIT, in one round trip (./term-fence.ts). The swap waits for this process's previous fenced write of the term to settle, so
 * this process's nonces reach the row in the order it issued them.
 */
async function commitAsTerm(client: PgQueryableLike, same: { lease: Lease; schema: string }, term: Term, closed: () => void): Promise<void> {
  const w = await same.lease.fenceWrite(term);
  try {
    let committed: boolean;
    try {
      committed = await rotateFenceNonceAndCommit(client, same.schema, w);
    } catch (err) {
      // The UPDATE or the COMMIT failed: which one, and so whether anything committed, is unknown.
      // The transaction may still be open (aborted): the caller's ROLLBACK ends it.
      w.settle('unknown');
      throw endedIdle(err) ? err : mapPgError(err, same.schema);
    }
    if (!committed) {
      await client.query('ROLLBACK');
      closed();
      w.settle('not-written');
      const now = same.lease.fenceExpected(term);
      const why = await classifyFenceFailure(client, same.schema, { ...w, expect: now.expect, first: now.first }).catch((err: unknown) =>
        Promise.reject(mapPgError(err, same.schema)),
      );
      if (why.kind === 'missing') {
        throw new ConfigError(
          `lease "${w.name}" has no row in schema "${same.schema}" of the database this transaction ran in; pass \`term\` only when the resource is in the lease store's own database`,
        );
      }
      if (why.kind === 'ours') {
        throw new StoreUnavailableError(`the fenced transaction for lease "${w.name}" was rolled back because the lease row moved under it; retry it`);
      }
      const detail =
        why.reason === 'cloned'
          ? 'another process holding this term (a restored snapshot or a fork) committed a fenced write with it; this transaction was rolled back'
          : `a fenced write found the term over in the store (${why.reason}); the transaction was rolled back`;
      same.lease.fenceLost(term, why.reason, detail);
      throw term.signal.aborted ? (term.signal.reason as Error) : new LeaseLostError(w.name, w.token, why.reason === 'released' ? 'superseded' : why.reason, detail);
    }
    closed();
    w.settle('written');
  } finally {
    w.settle('not-written'); // no-op once settled: an error before the COMMIT left nothing written
  }
}
