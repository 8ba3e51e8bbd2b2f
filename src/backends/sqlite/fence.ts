import { realpathSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError, FenceOwnedError, FencedError, SchemaError } from '../../core/errors.js';
import { leaseOf, type Lease, type Term, type TermFenceWrite } from '../../core/lease.js';
import { asSqliteDatabase } from './driver.js';
import type { DatabaseSyncLike } from './node-sqlite.js';
import { SqliteStore, immediate, type SqliteDatabaseLike } from './store.js';
import { ownerOf, refusedTermFence } from '../term-fence.js';
import { classifyFenceFailureSync, rotateFenceNonceSync } from './term-fence.js';

export type SqliteFenceOptions = {
  resource: string;
  /** Default `leasehold_fences` (created by the SQLite store's migration). */
  table?: string;
  /**
   * The lease name this resource's mark belongs to (tokens of two lease names are not
   * comparable). With `term` it is the term's lease (and, if given, must match). The first write
   * naming a lease claims an unclaimed mark; a write under another name is refused with
   * FenceOwnedError. A write naming no lease (`token` only) is not checked: it cannot be.
   */
  lease?: string;
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

/** Creates a fence table (or adds the `lease` column to one an older leasehold created). */
export function createSqliteFenceTable(db: SqliteDatabaseLike | DatabaseSyncLike, table?: string): void {
  const d = asSqliteDatabase(db);
  const t = tableName(table);
  d.exec(`CREATE TABLE IF NOT EXISTS ${t} (resource TEXT PRIMARY KEY, token INTEGER NOT NULL, updated_at INTEGER NOT NULL, lease TEXT)`);
  const cols = d.prepare(`SELECT name FROM pragma_table_info(?)`).all(table ?? 'leasehold_fences') as { name: string }[];
  if (!cols.some((c) => c.name === 'lease')) d.exec(`ALTER TABLE ${t} ADD COLUMN lease TEXT`);
}

/**
 * The mark's advance (SQLite's UPSERT), unless the mark is higher or, with an owner, another
 * lease's; claims an unclaimed mark for the owner. `$n` placeholders in order, each once: the
 * resource, the time, and the owner when there is one. Answers the new token, no row when refused.
 */
export function sqliteAdvanceSql(t: string, token: bigint, owned: boolean): string {
  const tok = token.toString();
  return owned
    ? `INSERT INTO ${t} (resource, token, updated_at, lease) VALUES ($1, ${tok}, $2, $3)
       ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at, lease = coalesce(${t}.lease, excluded.lease)
        WHERE ${t}.token <= excluded.token AND (${t}.lease IS NULL OR ${t}.lease = excluded.lease)
       RETURNING CAST(token AS TEXT) AS token`
    : `INSERT INTO ${t} (resource, token, updated_at) VALUES ($1, ${tok}, $2)
       ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
        WHERE ${t}.token <= excluded.token
       RETURNING CAST(token AS TEXT) AS token`;
}

/** Why the advance changed nothing, from the mark's row (`token` as text, `lease` if asked for). */
export function sqliteRefusal(resource: string, token: bigint, owner: string | undefined, row: Record<string, unknown> | undefined): Error {
  const markOwner = row?.['lease'];
  if (owner !== undefined && typeof markOwner === 'string' && markOwner !== owner) return new FenceOwnedError(resource, owner, markOwner);
  const mark = row?.['token'];
  return new FencedError(resource, token, mark == null ? null : BigInt(mark as string));
}

/** A missing table, or one without the `lease` column (created before schema version 5), as a SchemaError saying what to run. */
export function sqliteSchemaError(err: unknown, label: string, owner: string | undefined): unknown {
  const m = (err as Error | undefined)?.message ?? '';
  if (/no such table/.test(m)) return new SchemaError(`fence table ${label} does not exist; run \`leasehold migrate\` or call createSqliteFenceTable(db)`, { cause: err });
  if (owner !== undefined && /no column named lease|no such column: .*lease/.test(m)) {
    return new SchemaError(
      `fence table ${label} has no \`lease\` column (created by an older leasehold): run \`leasehold migrate\` (the store's own file) or createSqliteFenceTable(db${label === 'leasehold_fences' ? '' : `, ${JSON.stringify(label)}`}) once`,
      { cause: err },
    );
  }
  return err;
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
  const owner = ownerOf(options.lease, lease?.name);
  if (term?.signal.aborted) throw term.signal.reason as Error;
  const t = tableName(options.table);
  let w: TermFenceWrite | undefined;
  let inside = false;
  let result: T;
  try {
    result = immediate(db, () => {
      inside = true;
      let advanced: unknown[];
      try {
        const params = owner === undefined ? [options.resource, Date.now()] : [options.resource, Date.now(), owner];
        advanced = db.prepare(sqliteAdvanceSql(t, token, owner !== undefined).replace(/\$\d+/g, '?')).all(...params);
      } catch (err) {
        throw sqliteSchemaError(err, options.table ?? 'leasehold_fences', owner);
      }
      if (advanced.length === 0) {
        const row = db.prepare(`SELECT CAST(token AS TEXT) AS token${owner === undefined ? '' : ', lease'} FROM ${t} WHERE resource = ?`).get(options.resource) as
          | Record<string, unknown>
          | undefined;
        throw sqliteRefusal(options.resource, token, owner, row);
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
