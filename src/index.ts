/**
 * leasehold: leases with fencing tokens, for singleton work on compute that can be paused,
 * snapshot-restored, forked and rolled.
 *
 * Glossary
 * - lease: a named right to do singleton work, held until it EXPIRES (not until released).
 * - store: where leases live and whose clock judges expiry (PostgreSQL, SQLite, Redis, etcd).
 * - holder: the identity of one process instance (host:pid + 128 kernel-random bits). Never
 *   persisted: a clone of an image must not inherit it.
 * - term: one continuous tenure of a lease by one holder, from acquisition to loss. A term has
 *   exactly one fencing token; renewals keep it, every new term gets a larger one.
 * - fencing token: a bigint that only goes up per lease name. Work carries it; the resource
 *   rejects any write with a token lower than the highest it has accepted.
 * - nonce: a per-renewal random value the store compare-and-swaps, so two clones of one term
 *   (same holder, same token) cannot both keep renewing.
 * - TTL: how long the store grants a term for from its own "now". Renew interval: how often the
 *   holder renews (default TTL/3).
 * - local deadline: send time of the last successful renewal + (expiry - store now) - safety
 *   margin, on the monotonic clock. Past it, this process stops believing it leads.
 * - jeopardy: a renewal failed (outcome unknown). The token is not handed out for new work until
 *   a renewal lands; at the deadline the term is lost. Unknown is not yes.
 * - fence: the resource-side check (a high-water mark per resource) that rejects stale tokens.
 * - follower: a process waiting for a lease; it sleeps until the store-reported expiry or a
 *   "freed" notification, never in a tight loop.
 */
export { Leasehold, type LeaseholdOptions, type RunContext, type RunExclusiveOptions, type SuspensionOptions, type SuspicionDetector, type LeaseholdEvents } from './core/leasehold.js';
export { Lease, type Term, type LeaseState, type LeaseOptions, type AcquireOptions, type LeaseEvents } from './core/lease.js';
export type { Liveness } from './core/liveness.js';
export { Elector, type ElectorHandlers, type ElectorEvents } from './core/elector.js';
export { realClock, type Clock, type ClockTimer } from './core/clock.js';
export { parseDuration, validateLeaseName, resolveTiming, type Duration, type TimingOptions, type Timing } from './core/config.js';
export { newHolderId } from './core/identity.js';
export type { LoggerLike } from './core/logger.js';
export * from './core/errors.js';
export { AlreadyOwnedError, NoLiveAgentError, NoOwnerError, OwnerChangedError, OwnerDeadError } from './fleet/errors.js';
export type * from './backends/store.js';
export { openStore, resolveStoreUrl, defaultStoreUrl, type OpenStoreOptions } from './backends/index.js';
export { PostgresStore, type PostgresStoreOptions, type PgPoolLike, type PgQueryableLike } from './backends/postgres/store.js';
export { SqliteStore, type SqliteStoreOptions, type SqliteDatabaseLike } from './backends/sqlite/store.js';
export type { SqliteDriverName } from './backends/sqlite/driver.js';
export { RedisStore, createRedisStore, type RedisStoreOptions, type IoredisLike, type NodeRedisLike } from './backends/redis/index.js';
export { EtcdStore, createEtcdStore, type EtcdStoreOptions } from './backends/etcd/index.js';
export { MysqlStore, type MysqlStoreOptions } from './backends/mysql/store.js';
export { observe, LeaseObserver, LeaseWatcher, type LeaseView, type LeaseChange, type ChangeKind, type WatchOptions } from './observe/index.js';
