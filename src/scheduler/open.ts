/**
 * Where an integration gets its Leasehold and slot ledger: the caller's own (closed by the
 * caller), or opened from a store URL (closed by `close()`).
 */
import { Leasehold } from '../core/leasehold.js';
import type { LoggerLike } from '../core/logger.js';
import { ConfigError } from '../core/errors.js';
import { openSlotLedger, openStore } from '../backends/index.js';
import type { SlotLedgerPort } from './ledger.js';

export type SchedulingSource =
  /** Yours: the ledger in the same store as the leases (PostgresSlotLedger, SqliteSlotLedger, ...). You close both. */
  | { leasehold: Leasehold; ledger: SlotLedgerPort }
  /** A store URL (`postgres://...?schema=...`, `sqlite:/var/lib/app/leases.db`, ...): opened here, closed by close(). */
  | { store: string; logger?: LoggerLike };

export interface Scheduling {
  leasehold: Leasehold;
  ledger: SlotLedgerPort;
  close(): Promise<void>;
}

/**
 * Opens (or wraps) the Leasehold and slot ledger of `source`.
 * @throws {ConfigError} a source that is neither, or a store with no slot ledger.
 */
export async function openScheduling(source: SchedulingSource): Promise<Scheduling> {
  if ('leasehold' in source && source.leasehold instanceof Leasehold) {
    if (source.ledger === undefined) throw new ConfigError('give the slot ledger beside the Leasehold ({ leasehold, ledger }), or a store URL ({ store })');
    return { leasehold: source.leasehold, ledger: source.ledger, close: () => Promise.resolve() };
  }
  if (!('store' in source) || typeof source.store !== 'string' || source.store === '') {
    throw new ConfigError('give a store URL ({ store: "postgres://..." }) or your own { leasehold, ledger }');
  }
  const store = await openStore(source.store);
  let ledger: SlotLedgerPort;
  try {
    ledger = await openSlotLedger(store, source.store);
  } catch (e) {
    await store.close();
    throw e;
  }
  const leasehold = new Leasehold({ store, closeStore: true, ...(source.logger === undefined ? {} : { logger: source.logger }) });
  return {
    leasehold,
    ledger,
    async close() {
      await ledger.close();
      await leasehold.close();
    },
  };
}
