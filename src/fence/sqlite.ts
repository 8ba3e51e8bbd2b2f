import { ConfigError, FencedError, SchemaError } from '../core/errors.js';
import { immediate, type SqliteDatabaseLike } from '../stores/sqlite/store.js';

export interface SqliteFenceOptions {
  resource: string;
  token: bigint;
  /** Default `leasehold_fences` (created by the SQLite store's migration). */
  table?: string;
}

function tableName(table = 'leasehold_fences'): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(table)) throw new ConfigError(`fence table ${JSON.stringify(table)} is not a plain identifier`);
  return `"${table}"`;
}

export function createSqliteFenceTable(db: SqliteDatabaseLike, table?: string): void {
  db.exec(`CREATE TABLE IF NOT EXISTS ${tableName(table)} (resource TEXT PRIMARY KEY, token INTEGER NOT NULL, updated_at INTEGER NOT NULL)`);
}

/**
 * The SQLite fence: one IMMEDIATE transaction that advances the resource's high-water mark to
 * `token` (refusing a lower one), runs `fn`, and commits. better-sqlite3 is synchronous, so
 * `fn` is too: that is what keeps another process from slipping in between.
 *
 * @throws {FencedError} a newer term has written; nothing was changed.
 */
export function fencedWriteSync<T>(db: SqliteDatabaseLike, options: SqliteFenceOptions, fn: (db: SqliteDatabaseLike) => T): T {
  if (typeof options.token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token)');
  const t = tableName(options.table);
  return immediate(db, () => {
    let changed: number;
    try {
      changed = db
        .prepare(
          `INSERT INTO ${t} (resource, token, updated_at) VALUES (?, ?, ?)
           ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
            WHERE ${t}.token <= excluded.token`,
        )
        .run(options.resource, options.token, Date.now()).changes;
    } catch (err) {
      if (/no such table/.test((err as Error).message)) {
        throw new SchemaError(`fence table ${options.table ?? 'leasehold_fences'} does not exist; call createSqliteFenceTable(db)`, { cause: err });
      }
      throw err;
    }
    if (changed === 0) {
      const row = db.prepare(`SELECT token FROM ${t} WHERE resource = ?`).safeIntegers(true).get(options.resource) as { token: bigint } | undefined;
      throw new FencedError(options.resource, options.token, row?.token ?? null);
    }
    return fn(db);
  });
}
