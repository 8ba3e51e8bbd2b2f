/**
 * `leasehold/scheduler`: scheduled singletons. Every replica runs the same schedule; each slot
 * runs once across them, claimed in a slot ledger with the leader's fencing token.
 *
 *   const leasehold = new Leasehold({ store: await SqliteStore.create({ url }) });
 *   const ledger = new SqliteSlotLedger(store.database);
 *   const cron = startCron(leasehold, ledger, 'nightly-report', { schedule: cronSchedule('30 2 * * *', 'Europe/Berlin') },
 *     async ({ slot, token, idempotencyKey, signal }) => { ... });
 *
 * PostgreSQL: `new PostgresSlotLedger({ pool, schema })` on the lease store's database. Redis:
 * `new RedisSlotLedger(redisStore)`. etcd: `new EtcdSlotLedger({ client, prefix })` on the
 * lease store's cluster and prefix, with `clock: etcdClock({ hosts })` so that a slot is due by
 * etcd's clock (its gRPC API has none; without it, by this process's clock).
 *
 * Once per key (the library form of `leasehold run --once-per KEY`):
 *   const r = await runOncePer('migrate-2026-03', async ({ token, signal }) => { ... }, { leasehold, ledger, name: 'migrations' });
 *
 * A framework's own timer (node-cron, @nestjs/schedule): `SlotGate` decides per fire; see
 * leasehold/node-cron and leasehold/nestjs, and docs/schedules.md.
 */
export { startCron, CronHandle, type CronOptions, type CronRetention, type CronMode, type CatchUp, type SlotContext, type SlotJob, type SlotEvent, type CronEvents } from './cron.js';
export { cronSchedule, everySchedule, slotForFire, type Schedule } from './schedule.js';
export { runOncePer, type OncePerOptions, type OncePerContext, type OncePerResult } from './once-per.js';
export { SlotGate, type SlotGateOptions, type SlotRun, type Admission, type Declined } from './gate.js';
export { openScheduling, type SchedulingSource, type Scheduling } from './open.js';
export {
  slotIdempotencyKey,
  slotPruneCutoff,
  type SlotLedgerPort,
  type SlotPruneRequest,
  type SlotPruneResult,
  type SlotRecord,
  type SlotStatus,
  type SlotTerm,
  type SlotClaimRequest,
  type SlotClaimResult,
  type SlotSkipRequest,
  type SlotCompletion,
} from './ledger.js';
export { nextDueOf, type ScheduleRecord } from './schedule-record.js';
export { pruneLedger, DEFAULT_RETENTION, type PruneLedgerOptions, type PruneLedgerResult } from './retention.js';
export { PostgresSlotLedger, type PostgresSlotLedgerOptions } from '../backends/postgres/slots.js';
export { SqliteSlotLedger } from '../backends/sqlite/slots.js';
export { RedisSlotLedger } from '../backends/redis/slots.js';
export { EtcdSlotLedger, type EtcdSlotLedgerOptions } from '../backends/etcd/slots.js';
export { etcdClock, type EtcdClockOptions, type StoreClock } from '../backends/etcd/clock.js';
