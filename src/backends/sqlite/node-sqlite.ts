/**
 * node:sqlite (Node 22.13+ without a flag, and 24) behind the better-sqlite3-shaped
 * {@link SqliteDatabaseLike} the store, the fences and the demo are written against. The two
 * drivers differ in ways that matter to leasehold, each handled here once:
 * - no `pragma()` or `transaction()`: PRAGMA runs as a statement; a transaction is BEGIN
 *   IMMEDIATE / COMMIT, with a ROLLBACK when the function throws (and a savepoint when nested),
 *   as better-sqlite3 does;
 * - `safeIntegers()` is `setReadBigInts()`: token columns read as bigint, never as a rounded number;
 * - errors carry a numeric `errcode` and `code: 'ERR_SQLITE_ERROR'`: they are rethrown with
 *   better-sqlite3's string code (`SQLITE_BUSY`, `SQLITE_IOERR_WRITE` ...), which the store's
 *   busy retry and error mapping read;
 * - the busy timeout defaults to 0, not 5s: set here to better-sqlite3's default;
 * - a named parameter missing from the object binds NULL instead of throwing, and an unknown
 *   one throws: leasehold's statements pass exactly the names they use.
 * `open` is a method on DatabaseSync, not the boolean better-sqlite3 has; the wrapper keeps its own.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { SqliteDatabaseLike, SqliteStatementLike } from './store.js';

/** The subset of node:sqlite's `StatementSync` used here (@types/node 20 does not declare the module). */
interface StatementSyncLike {
  run(...params: unknown[]): { changes: number | bigint; lastInsertRowid: number | bigint };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  setReadBigInts(enabled: boolean): void;
  setAllowUnknownNamedParameters?(enabled: boolean): void;
}

/** The subset of node:sqlite's `DatabaseSync` used here. */
export interface DatabaseSyncLike {
  prepare(sql: string): StatementSyncLike;
  exec(sql: string): void;
  close(): void;
  /** Node 22.15+ / 24. */
  readonly isOpen?: boolean;
  /** Node 22.16+ / 24. */
  readonly isTransaction?: boolean;
  /** Node 22.16+ / 24. */
  location?(): string | null;
}

interface NodeSqliteModule {
  DatabaseSync: new (path: string, options?: { readOnly?: boolean; open?: boolean }) => DatabaseSyncLike;
}

let loaded: { module: NodeSqliteModule } | { error: unknown } | undefined;

/**
 * node:sqlite, or the reason it is not there (Node 20; Node 22 before 22.13 without
 * --experimental-sqlite). On Node 22 loading it emits "ExperimentalWarning: SQLite is an
 * experimental feature": that one warning, and only it, is kept off the user's stderr: leasehold
 * chose the driver, the user did not, and every CLI command would otherwise print it.
 */
export function loadNodeSqlite(): NodeSqliteModule | undefined {
  if (loaded === undefined) {
    const emit = process.emitWarning;
    process.emitWarning = function (this: unknown, warning: string | Error, ...rest: unknown[]): void {
      const type = typeof rest[0] === 'string' ? rest[0] : (rest[0] as { type?: unknown } | undefined)?.type;
      const text = typeof warning === 'string' ? warning : warning.message;
      const ofType = type === 'ExperimentalWarning' || (warning instanceof Error && warning.name === 'ExperimentalWarning');
      if (ofType && text.startsWith('SQLite is an experimental feature')) return;
      (emit as (...args: unknown[]) => void).call(process, warning, ...rest);
    } as typeof process.emitWarning;
    try {
      loaded = { module: createRequire(import.meta.url)('node:sqlite') as NodeSqliteModule };
    } catch (error) {
      loaded = { error };
    } finally {
      process.emitWarning = emit;
    }
  }
  return 'module' in loaded ? loaded.module : undefined;
}

/** Why node:sqlite did not load (undefined when it did, or was never tried). */
export function nodeSqliteLoadError(): unknown {
  return loaded !== undefined && 'error' in loaded ? loaded.error : undefined;
}

/** A raw node:sqlite DatabaseSync (as opposed to a better-sqlite3 Database or this wrapper). */
export function isDatabaseSync(db: unknown): db is DatabaseSyncLike {
  const m = loadNodeSqlite();
  return m !== undefined && db instanceof m.DatabaseSync;
}

const PRIMARY = [
  'OK', 'ERROR', 'INTERNAL', 'PERM', 'ABORT', 'BUSY', 'LOCKED', 'NOMEM', 'READONLY', 'INTERRUPT', 'IOERR', 'CORRUPT', 'NOTFOUND', 'FULL',
  'CANTOPEN', 'PROTOCOL', 'EMPTY', 'SCHEMA', 'TOOBIG', 'CONSTRAINT', 'MISMATCH', 'MISUSE', 'NOLFS', 'AUTH', 'FORMAT', 'RANGE', 'NOTADB',
  'NOTICE', 'WARNING',
];
/** Extended result codes: primary | (index << 8), as in sqlite3.h. */
const EXTENDED: Record<number, string[]> = {
  1: ['', 'MISSING_COLLSEQ', 'RETRY', 'SNAPSHOT'],
  4: ['', '', 'ROLLBACK'],
  5: ['', 'RECOVERY', 'SNAPSHOT', 'TIMEOUT'],
  6: ['', 'SHAREDCACHE', 'VTAB'],
  8: ['', 'RECOVERY', 'CANTLOCK', 'ROLLBACK', 'DBMOVED', 'CANTINIT', 'DIRECTORY'],
  10: [
    '', 'READ', 'SHORT_READ', 'WRITE', 'FSYNC', 'DIR_FSYNC', 'TRUNCATE', 'FSTAT', 'UNLOCK', 'RDLOCK', 'DELETE', 'BLOCKED', 'NOMEM', 'ACCESS',
    'CHECKRESERVEDLOCK', 'LOCK', 'CLOSE', 'DIR_CLOSE', 'SHMOPEN', 'SHMSIZE', 'SHMLOCK', 'SHMMAP', 'SEEK', 'DELETE_NOENT', 'MMAP', 'GETTEMPPATH',
    'CONVPATH', 'VNODE', 'AUTH', 'BEGIN_ATOMIC', 'COMMIT_ATOMIC', 'ROLLBACK_ATOMIC', 'DATA', 'CORRUPTFS', 'IN_PAGE',
  ],
  11: ['', 'VTAB', 'SEQUENCE', 'INDEX'],
  14: ['', 'NOTEMPDIR', 'ISDIR', 'FULLPATH', 'CONVPATH', 'DIRTYWAL', 'SYMLINK'],
  19: ['', 'CHECK', 'COMMITHOOK', 'FOREIGNKEY', 'FUNCTION', 'NOTNULL', 'PRIMARYKEY', 'TRIGGER', 'UNIQUE', 'VTAB', 'ROWID', 'PINNED', 'DATATYPE'],
  23: ['', 'USER'],
  27: ['', 'RECOVER_WAL', 'RECOVER_ROLLBACK', 'RBU'],
  28: ['', 'AUTOINDEX'],
};

/** better-sqlite3's name for an SQLite result code: 5 -> SQLITE_BUSY, 778 -> SQLITE_IOERR_WRITE. */
function sqliteCodeName(errcode: number): string {
  const primary = PRIMARY[errcode & 0xff] ?? String(errcode & 0xff);
  const ext = EXTENDED[errcode & 0xff]?.[errcode >> 8];
  return `SQLITE_${primary}${ext === undefined || ext === '' ? '' : `_${ext}`}`;
}

/** An SQLite error from node:sqlite, with better-sqlite3's `code`; the original is its `cause`. */
class NodeSqliteError extends Error {
  override readonly name = 'SqliteError';
  readonly code: string;
  readonly errcode: number;
  constructor(message: string, errcode: number, cause: unknown) {
    super(message, { cause });
    this.errcode = errcode;
    this.code = sqliteCodeName(errcode);
  }
}

function translate(err: unknown): unknown {
  const e = err as { code?: unknown; errcode?: unknown; message?: unknown } | null;
  if (e?.code === 'ERR_SQLITE_ERROR' && typeof e.errcode === 'number') return new NodeSqliteError(String(e.message), e.errcode, err);
  return err;
}

function call<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw translate(err);
  }
}

class NodeSqliteStatement implements SqliteStatementLike {
  constructor(private readonly stmt: StatementSyncLike) {}

  run(...params: unknown[]): { changes: number; lastInsertRowid: number | bigint } {
    const r = call(() => this.stmt.run(...params));
    return { changes: Number(r.changes), lastInsertRowid: r.lastInsertRowid };
  }

  get(...params: unknown[]): unknown {
    return call(() => this.stmt.get(...params));
  }

  all(...params: unknown[]): unknown[] {
    return call(() => this.stmt.all(...params));
  }

  safeIntegers(toggle = true): this {
    this.stmt.setReadBigInts(toggle);
    return this;
  }
}

interface NodeSqliteOpenOptions {
  readonly?: boolean;
  fileMustExist?: boolean;
  /** Busy timeout in ms; default 5000, as better-sqlite3's. */
  timeout?: number;
}

/**
 * A node:sqlite database with better-sqlite3's shape. `new NodeSqliteDatabase(path, options)`
 * opens one (the options are better-sqlite3's); `new NodeSqliteDatabase(db)` wraps your own
 * DatabaseSync, which then stays yours to close.
 */
export class NodeSqliteDatabase implements SqliteDatabaseLike {
  readonly name: string;
  readonly readonly: boolean;
  /** The node:sqlite handle underneath. */
  readonly raw: DatabaseSyncLike;
  private closed = false;
  private depth = 0;

  constructor(path: string | DatabaseSyncLike, options: NodeSqliteOpenOptions = {}) {
    if (typeof path !== 'string') {
      this.raw = path;
      // location() arrived in Node 22.16; PRAGMA database_list names the file on every version.
      const main = (call(() => path.prepare('PRAGMA database_list').all()) as { name: string; file: string }[]).find((d) => d.name === 'main');
      this.name = path.location?.() ?? main?.file ?? '';
      this.readonly = false;
      return;
    }
    const m = loadNodeSqlite();
    if (m === undefined) throw new Error(`node:sqlite is not available in Node ${process.version}`, { cause: nodeSqliteLoadError() });
    this.name = path;
    this.readonly = options.readonly === true;
    const memory = path === ':memory:' || path === '';
    if (options.fileMustExist === true && !memory && !existsSync(path)) {
      throw new NodeSqliteError(`unable to open database file: ${path} does not exist`, 14, undefined);
    }
    this.raw = call(() => new m.DatabaseSync(path, { readOnly: this.readonly }));
    try {
      call(() => this.raw.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.trunc(options.timeout ?? 5000))}`));
    } catch (err) {
      this.raw.close();
      throw err;
    }
  }

  get open(): boolean {
    return !this.closed && this.raw.isOpen !== false;
  }

  get inTransaction(): boolean {
    return this.raw.isTransaction ?? this.depth > 0;
  }

  prepare(sql: string): NodeSqliteStatement {
    const stmt = call(() => this.raw.prepare(sql));
    // better-sqlite3 ignores object keys a statement does not name; node:sqlite throws unless told.
    stmt.setAllowUnknownNamedParameters?.(true);
    return new NodeSqliteStatement(stmt);
  }

  exec(sql: string): this {
    call(() => this.raw.exec(sql));
    return this;
  }

  /** better-sqlite3's `pragma()`: the rows, or with `{ simple: true }` the first column of the first row. */
  pragma(sql: string, options?: { simple?: boolean }): unknown {
    const rows = this.prepare(`PRAGMA ${sql}`).all() as Record<string, unknown>[];
    if (options?.simple !== true) return rows;
    const first = rows[0];
    return first === undefined ? undefined : Object.values(first)[0];
  }

  /**
   * better-sqlite3's transaction semantics, IMMEDIATE only (the one leasehold uses): the write
   * lock is taken by BEGIN IMMEDIATE before `fn` reads anything; if `fn` or the COMMIT throws,
   * whatever is still open is rolled back and the error rethrown. Nested, it is a savepoint.
   */
  transaction<T>(fn: () => T): { immediate(): T } {
    return {
      immediate: (): T => {
        const nested = this.inTransaction;
        this.exec(nested ? 'SAVEPOINT leasehold' : 'BEGIN IMMEDIATE');
        this.depth++;
        try {
          const result = fn();
          if (typeof (result as { then?: unknown } | null)?.then === 'function') {
            throw new TypeError('a transaction function cannot return a promise: the transaction would commit before it settled');
          }
          this.exec(nested ? 'RELEASE leasehold' : 'COMMIT');
          return result;
        } catch (err) {
          if (this.open && this.inTransaction) {
            try {
              if (nested) this.exec('ROLLBACK TO leasehold').exec('RELEASE leasehold');
              else this.exec('ROLLBACK');
            } catch {
              // SQLite had already rolled back (a failed COMMIT, on a Node without isTransaction
              // to tell): the error worth reporting is the one that got us here.
            }
          }
          throw err;
        } finally {
          this.depth--;
        }
      },
    };
  }

  close(): this {
    if (!this.closed) {
      this.closed = true;
      this.raw.close();
    }
    return this;
  }
}
