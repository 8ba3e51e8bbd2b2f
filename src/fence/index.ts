/**
 * Resource-side fences. The leader can be wrong about being the leader (that is the premise);
 * the resource cannot be wrong about which token it last accepted.
 *
 * Two processes restored from one snapshot share one term, and so one token, until the store
 * ends it at the next renewal. A token fence accepts both (`>=`). When the resource is in the
 * lease store's own PostgreSQL database, SQLite file or MySQL/MariaDB server, pass `term` to
 * `fencedTransaction` / `fencedWriteSync` / `fencedMysqlTransaction`: the write then also checks
 * the lease row in the same transaction, and of two processes holding one term only one can ever
 * commit. Resources elsewhere (Redis, etcd, another database, an API) get the token fence only:
 * there, pair it with an idempotency key.
 *
 * The SQL fences hold the high-water mark's row lock until COMMIT. A writer frozen inside its
 * transaction is cut off after `idleTimeout`: PostgreSQL's idle_in_transaction_session_timeout,
 * MariaDB's idle_transaction_timeout, and on MySQL 8 (which has no per-transaction idle timeout)
 * the session's wait_timeout for the transaction's duration.
 *
 * What fencing cannot cover: a side effect outside a store that checks tokens, such as an
 * email, a webhook, or a payment API. There, derive an idempotency key from the lease name and
 * token ({@link idempotencyKey}) so the receiver drops the duplicate, and call
 * `lease.confirm()` right before the call.
 */
export { fencedTransaction, createPgFenceTable, type PgFenceOptions, type PgFenceTarget } from '../backends/postgres/fence.js';
export { fencedWriteSync, createSqliteFenceTable, type SqliteFenceOptions } from '../backends/sqlite/fence.js';
export {
  fencedMysqlTransaction,
  createMysqlFenceTable,
  type MysqlFenceOptions,
  type MysqlFenceTarget,
  type MysqlFenceConnection,
  type MysqlCallbackConnectionLike,
  type MysqlPromiseConnectionLike,
  type MysqlCallbackPoolLike,
  type MysqlPromisePoolLike,
} from '../backends/mysql/fence.js';
export { fencedSet, fencedHSet, type RedisFenceTarget, type RedisFenceClient } from '../backends/redis/fence.js';
export { FencedError, FenceOwnedError, LeaseLostError, type LeaseLostReason } from '../core/errors.js';
// Every type a fence's parameters and results mention, so callers can name them.
export type { Term } from '../core/lease.js';
export type { CallOptions } from '../backends/store.js';
/** The options of the ORM entries' `fencedTransaction` and `fence` (leasehold/fence/kysely, knex, drizzle, typeorm, sequelize). */
export type { TxFenceOptions } from '../backends/term-fence.js';
export type { PgQueryableLike, PgPoolLike, PgResultLike, PgListenClientLike } from '../backends/postgres/store.js';
export type { SqliteDatabaseLike, SqliteStatementLike } from '../backends/sqlite/store.js';
export type { RedisClientLike, IoredisLike, NodeRedisLike } from '../backends/redis/driver.js';
export type { RedisStore } from '../backends/redis/store.js';

/**
 * A key that is the same for every retry within one term and different in every other term:
 * `leasehold:<name>:<token>[:<step>]`. Give it to receivers that deduplicate by key.
 */
export function idempotencyKey(name: string, token: bigint, step?: string): string {
  return `leasehold:${name}:${token}${step === undefined ? '' : `:${step}`}`;
}
