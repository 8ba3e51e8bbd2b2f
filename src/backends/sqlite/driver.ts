import { createRequire } from 'node:module';
import { ConfigError } from '../../core/errors.js';
import type { SqliteDatabaseLike } from './store.js';

/** better-sqlite3's `Database` constructor, as far as leasehold uses it. */
type SqliteDatabaseConstructor = new (
  path: string,
  options?: { readonly?: boolean; fileMustExist?: boolean; timeout?: number },
) => SqliteDatabaseLike;

/** The one line a user sees when SQLite is asked for and the driver is not usable. */
const SQLITE_DRIVER_MISSING =
  'the SQLite store needs the optional package better-sqlite3, which is not installed or failed to build: ' +
  'run `npm install better-sqlite3`, or use another store (--store / LEASEHOLD_STORE postgres://, redis:// or etcd://)';

let cached: SqliteDatabaseConstructor | undefined;

/**
 * Loads better-sqlite3 the first time a SQLite store (or doctor's SQLite check) needs it, so a
 * PostgreSQL, Redis or etcd user can install leasehold with `--omit=optional` and never build
 * it. `require`, not `import()`: the package is CommonJS and `new SqliteStore()` is synchronous.
 *
 * The native addon is loaded by better-sqlite3's constructor, not by its `require`, so a package
 * that installed but failed to build only shows when a database is opened: open an in-memory
 * one here, so that failure gets this message rather than "check the path and its permissions".
 *
 * @throws {ConfigError} the package is missing or its native addon does not load.
 */
export function loadSqliteDriver(): SqliteDatabaseConstructor {
  if (cached !== undefined) return cached;
  let Database: SqliteDatabaseConstructor;
  try {
    Database = createRequire(import.meta.url)('better-sqlite3') as SqliteDatabaseConstructor;
    new Database(':memory:').close();
  } catch (err) {
    throw new ConfigError(SQLITE_DRIVER_MISSING, { cause: err });
  }
  cached = Database;
  return Database;
}
