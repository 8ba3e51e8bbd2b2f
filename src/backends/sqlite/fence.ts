import { realpathSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError, FencedError, SchemaError } from '../../core/errors.js';
import { leaseOf, type Lease, type Term, type TermFenceWrite } from '../../core/lease.js';
import { asSqliteDatabase } from './driver.js';
import type { DatabaseSyncLike } from './node-sqlite.js';
import { SqliteStore, immediate, type SqliteDatabaseLike } from './store.js';
import { refusedTermFence } from '../term-fence.js';
import { classifyFenceFailureSync, rotateFenceNonceSync } from './term-fence.js';

export type SqliteFenceOptions = {
  resource: string;
  /** Default `leasehold_fences` (created by the SQLite store's migration). */
  table?: string;
} & (
  | {
      /** The token of the term doing this write. */
      token: bigint;
      term?: Term;
    }
  | {
      /**
       * The term doing this write, when `db` is the lease store's own SQLite file. The
       * transaction then also checks the lease row and swaps its fence nonce: of two processes
       * holding one term (a snapshot restored twice), only one can ever commit; the other is
       * rolled back with `LeaseLostError` reason 'cloned' and its term ends.
       */
      term: Term;
      /** Optional with `term`; if given, it must be the term's. */
      token?: bigint;
    }
);

function tableName(table = 'leasehold_fences'): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(table)) throw new ConfigError(`fence table ${JSON.stringify(table)} is not a plain identifier`);
  return `"${table}"`;
}

export function createSqliteFenceTable(db: SqliteDatabaseLike | DatabaseSyncLike, table?: string): void {
  asSqliteDatabase(db).exec(`CREATE TABLE IF NOT EXISTS ${tableName(table)} (resource TEXT PRIMARY KEY, token INTEGER NOT NULL, updated_at INTEGER NOT NULL)`);
}

function canonical(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

/** The lease a `term` option belongs to, checked to live in `db`'s file. */
function sameFile(db: SqliteDatabaseLike, term: Term): Lease {
  const lease = leaseOf(term);
  if (lease === undefined) throw new ConfigError('`term` must be a term this process acquired (from acquire(), onElected or runExclusive)');
  const store = lease.fenceStore;
  if (!(store instanceof SqliteStore)) {
    throw new ConfigError(
      `lease "${lease.name}" lives in a ${store.kind} store, not SQLite: \`term\` checks the lease in the transaction's own database. ` +
        'For a resource outside the lease store, pass `token` only (and use idempotency keys).',
    );
  }
  if (store.database !== db && (db.name === '' || db.name === ':memory:' || canonical(db.name) !== canonical(store.path))) {
    throw new ConfigError(`\`term\` needs the lease store's own SQLite file (${store.path}), not ${db.name || 'an in-memory database'}`);
  }
  return lease;
}

/** Thrown inside the transaction to roll it back when the lease row was not this process's. */
class NotOurs extends Error {}

/**
 * The SQLite fence: one IMMEDIATE transaction that advances the resource's high-water mark to
 * `token` (refusing a lower one), runs `fn`, and commits. `db` is a better-sqlite3 Database or a
 * node:sqlite DatabaseSync; both are synchronous, so `fn` is too: that is what keeps another
 * process from slipping in between.
 *
 * With `term` (db is the lease store's file), the transaction's last step, after `fn`, checks
 * the lease row and swaps its fence nonce (see backends/sqlite/term-fence.ts).
 *
 * @throws {FencedError} a newer term has written; nothing was changed.
 * @throws {LeaseLostError} (with `term`) the term is over, in this process or in the store; reason
 *   'cloned' when another process wrote with the same term. Nothing was changed; the term's signal aborts.
 */
export function fencedWriteSync<T>(handle: SqliteDatabaseLike | DatabaseSyncLike, options: SqliteFenceOptions, fn: (db: SqliteDatabaseLike) => T): T {
  // A node:sqlite DatabaseSync gets better-sqlite3's shape; `fn` is given that wrapper.
  const db = asSqliteDatabase(handle);
  const term = options.term;
  const token = options.token ?? term?.token;
  if (typeof token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token), or pass the term');
  if (term !== undefined && token !== term.token) throw new ConfigError(`token ${token} is not the token of the term passed with it (${term.token})`);
  const lease = term === undefined ? undefined : sameFile(db, term);
  if (term?.signal.aborted) throw term.signal.reason as Error;
  const t = tableName(options.table);
  let w: TermFenceWrite | undefined;
  let inside = false;
  let result: T;
  try {
    result = immediate(db, () => {
      inside = true;
      let changed: number;
      try {
        changed = db
          .prepare(
            `INSERT INTO ${t} (resource, token, updated_at) VALUES (?, ?, ?)
             ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
              WHERE ${t}.token <= excluded.token`,
          )
          .run(options.resource, token, Date.now()).changes;
      } catch (err) {
        if (/no such table/.test((err as Error).message)) {
          throw new SchemaError(`fence table ${options.table ?? 'leasehold_fences'} does not exist; call createSqliteFenceTable(db)`, { cause: err });
        }
        throw err;
      }
      if (changed === 0) {
        const row = db.prepare(`SELECT token FROM ${t} WHERE resource = ?`).safeIntegers(true).get(options.resource) as { token: bigint } | undefined;
        throw new FencedError(options.resource, token, row?.token ?? null);
      }
      const r = fn(db);
      if (lease !== undefined && term !== undefined) {
        w = lease.fenceWriteSync(term);
        if (!rotateFenceNonceSync(db, w)) throw new NotOurs();
      }
      inside = false;
      return r;
    });
  } catch (err) {
    // Thrown inside the transaction: rolled back, nothing written. Thrown by the COMMIT: unknown.
    w?.settle(inside ? 'not-written' : 'unknown');
    if (err instanceof NotOurs && lease !== undefined && term !== undefined && w !== undefined) throw notOurs(db, lease, term, w);
    throw err;
  }
  w?.settle('written');
  return result;
}

function notOurs(db: SqliteDatabaseLike, lease: Lease, term: Term, w: TermFenceWrite): Error {
  const now = lease.fenceExpected(term);
  const why = classifyFenceFailureSync(db, { ...w, expect: now.expect, first: now.first });
  return refusedTermFence(why, lease, term, { missing: `${db.name}; pass \`term\` only when db is the lease store's own file`, what: 'write' });
}
