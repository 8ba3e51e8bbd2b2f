import type { BackendDescriptor } from '../descriptor.js';

/** PostgreSQL: leases, fleet and slot ledger in one schema; every module loads on first use. */
export const postgres: BackendDescriptor = {
  kind: 'postgres',
  label: 'PostgreSQL',
  schemes: ['postgres', 'postgresql'],
  exampleUrl: 'postgres://user@host/db',
  async openStore(url, options) {
    const { PostgresStore } = await import('./store.js');
    return PostgresStore.create({ url, ...(options.schema === undefined ? {} : { schema: options.schema }) });
  },
  async openFleet(store) {
    const { PostgresStore } = await import('./store.js');
    if (!(store instanceof PostgresStore)) return undefined;
    const { PostgresFleet } = await import('./fleet.js');
    return PostgresFleet.forStore(store);
  },
  async openSlotLedger(store, url) {
    const { PostgresStore } = await import('./store.js');
    if (!(store instanceof PostgresStore)) return undefined;
    const { PostgresSlotLedger } = await import('./slots.js');
    // A small pool of its own: a claim holds its connection for a whole transaction.
    return PostgresSlotLedger.fromUrl(url, store.schema);
  },
};
