import { createRequire } from 'node:module';
import { ConfigError } from '../../core/errors.js';
import { NodeSqliteDatabase, isDatabaseSync, loadNodeSqlite, nodeSqliteLoadError, type DatabaseSyncLike } from './node-sqlite.js';
import type { SqliteDatabaseLike } from './store.js';

/** better-sqlite3's `Database` constructor, as far as leasehold uses it (node:sqlite's wrapper has the same). */
type SqliteDatabaseConstructor = new (
  path: string,
  options?: { readonly?: boolean; fileMustExist?: boolean; timeout?: number },
) => SqliteDatabaseLike;

/** The two SQLite drivers: Node's own (22.13+, 24) and the native package (any Node, needs a build). */
export type SqliteDriverName = 'node:sqlite' | 'better-sqlite3';
export const SQLITE_DRIVERS: readonly SqliteDriverName[] = ['node:sqlite', 'better-sqlite3'];
/** Forces a driver: `node:sqlite`, `better-sqlite3`, or `auto` (the default). */
export const SQLITE_DRIVER_ENV = 'LEASEHOLD_SQLITE_DRIVER';

export interface SqliteDriver {
  name: SqliteDriverName;
  Database: SqliteDatabaseConstructor;
  /** The SQLite library the driver runs, e.g. 3.54.1. */
  sqliteVersion: string;
  /** better-sqlite3's package version, or the Node version for node:sqlite. */
  version: string;
  /** What chose it: the store option, LEASEHOLD_SQLITE_DRIVER, or the default for this Node. */
  chosenBy: 'option' | 'env' | 'default';
}

/** The one line a user sees when SQLite is asked for and better-sqlite3 is needed but not usable. */
const SQLITE_DRIVER_MISSING =
  'the SQLite store needs the optional package better-sqlite3, which is not installed or failed to build: ' +
  'run `npm install better-sqlite3`, or use another store (--store / LEASEHOLD_STORE postgres://, redis:// or etcd://)';

const cache = new Map<SqliteDriverName, Omit<SqliteDriver, 'chosenBy'>>();

/**
 * The driver to open SQLite files with: `requested` (the store's `driver` option), else
 * LEASEHOLD_SQLITE_DRIVER, else node:sqlite where this Node has it (22.13+, 24: nothing to
 * build) and better-sqlite3 where it does not (Node 20).
 *
 * Loaded the first time a SQLite store (or doctor's SQLite check) needs it, so a PostgreSQL,
 * Redis or etcd user can install leasehold with `--omit=optional` and never build better-sqlite3.
 * An in-memory database is opened here: better-sqlite3 loads its native addon in its
 * constructor, not its `require`, so a package that installed but failed to build (or was built
 * for another Node version) only shows when a database is opened, and gets this message then
 * rather than "check the path and its permissions".
 *
 * @throws {ConfigError} an unknown driver name, or the chosen driver does not load.
 */
export function resolveSqliteDriver(requested?: SqliteDriverName | 'auto'): SqliteDriver {
  const env = process.env[SQLITE_DRIVER_ENV]?.trim();
  const chosenBy = requested !== undefined && requested !== 'auto' ? 'option' : env !== undefined && env !== '' && env !== 'auto' ? 'env' : 'default';
  const wanted = chosenBy === 'option' ? requested : chosenBy === 'env' ? env : 'auto';
  if (wanted !== 'auto' && !SQLITE_DRIVERS.includes(wanted as SqliteDriverName)) {
    const where = chosenBy === 'env' ? SQLITE_DRIVER_ENV : 'the SQLite store option `driver`';
    throw new ConfigError(`${where} is ${JSON.stringify(wanted)}; use node:sqlite, better-sqlite3 or auto (node:sqlite where this Node has it)`);
  }
  const name: SqliteDriverName = wanted === 'auto' ? (loadNodeSqlite() !== undefined ? 'node:sqlite' : 'better-sqlite3') : (wanted as SqliteDriverName);
  let driver = cache.get(name);
  if (driver === undefined) {
    driver = name === 'node:sqlite' ? openNodeSqlite(chosenBy) : openBetterSqlite3(chosenBy);
    cache.set(name, driver);
  }
  return { ...driver, chosenBy };
}

/** The chosen driver's `Database` constructor (see {@link resolveSqliteDriver}). */
export function loadSqliteDriver(requested?: SqliteDriverName | 'auto'): SqliteDatabaseConstructor {
  return resolveSqliteDriver(requested).Database;
}

function openNodeSqlite(chosenBy: SqliteDriver['chosenBy']): Omit<SqliteDriver, 'chosenBy'> {
  if (loadNodeSqlite() === undefined) {
    const how = chosenBy === 'env' ? `${SQLITE_DRIVER_ENV}=node:sqlite` : 'the SQLite store option driver: "node:sqlite"';
    throw new ConfigError(
      `${how} asks for Node's built-in SQLite, which Node ${process.version} does not have (it needs Node 22.13 or later): ` +
        `upgrade Node, or unset it to use better-sqlite3`,
      { cause: nodeSqliteLoadError() },
    );
  }
  const version = sqliteVersionOf(new NodeSqliteDatabase(':memory:'));
  return { name: 'node:sqlite', Database: NodeSqliteDatabase, sqliteVersion: version, version: process.version };
}

function openBetterSqlite3(chosenBy: SqliteDriver['chosenBy']): Omit<SqliteDriver, 'chosenBy'> {
  const require = createRequire(import.meta.url);
  let Database: SqliteDatabaseConstructor;
  let version: string;
  try {
    Database = require('better-sqlite3') as SqliteDatabaseConstructor;
    version = sqliteVersionOf(new Database(':memory:'));
  } catch (err) {
    const otherAbi = /NODE_MODULE_VERSION/.test((err as Error).message ?? '')
      ? `; the installed one was built for another Node version than ${process.version} (npm rebuild better-sqlite3)`
      : '';
    const builtIn =
      loadNodeSqlite() !== undefined
        ? chosenBy === 'default'
          ? ''
          : `; or unset ${chosenBy === 'env' ? SQLITE_DRIVER_ENV : 'the driver option'} to use node:sqlite, built into this Node`
        : '; Node 22.13 or later needs no package (it has SQLite built in)';
    throw new ConfigError(`${SQLITE_DRIVER_MISSING}${otherAbi}${builtIn}`, { cause: err });
  }
  let pkg = '';
  try {
    pkg = (require('better-sqlite3/package.json') as { version?: string }).version ?? '';
  } catch {
    // Only for doctor's report; a package without its package.json export still works.
  }
  return { name: 'better-sqlite3', Database, sqliteVersion: version, version: pkg };
}

function sqliteVersionOf(db: SqliteDatabaseLike): string {
  try {
    return String((db.prepare('SELECT sqlite_version() AS v').get() as { v: unknown }).v);
  } finally {
    db.close();
  }
}

/**
 * Your own handle, as the store and the fences take it: a better-sqlite3 Database (or anything
 * of its shape) as it is, a node:sqlite DatabaseSync wrapped (it stays yours to close).
 * @throws {ConfigError} neither.
 */
export function asSqliteDatabase(db: SqliteDatabaseLike | DatabaseSyncLike): SqliteDatabaseLike {
  if (typeof (db as Partial<SqliteDatabaseLike>).pragma === 'function' && typeof (db as Partial<SqliteDatabaseLike>).transaction === 'function') {
    return db as SqliteDatabaseLike;
  }
  if (isDatabaseSync(db)) return new NodeSqliteDatabase(db);
  throw new ConfigError('database must be a better-sqlite3 Database or a node:sqlite DatabaseSync');
}

/** Which driver a handle belongs to: node:sqlite's wrapper, or better-sqlite3 (or its shape). */
export function driverOf(db: SqliteDatabaseLike): SqliteDriverName {
  return db instanceof NodeSqliteDatabase ? 'node:sqlite' : 'better-sqlite3';
}
