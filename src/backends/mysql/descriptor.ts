import type { BackendDescriptor } from '../descriptor.js';

/** MySQL and MariaDB (InnoDB): leases, fleet and slot ledger in the application's own database; every module loads on first use. */
export const mysql: BackendDescriptor = {
  kind: 'mysql',
  label: 'MySQL',
  schemes: ['mysql', 'mariadb'],
  exampleUrl: 'mysql://user@host:3306/db',
  async openStore(url) {
    const { MysqlStore } = await import('./store.js');
    return MysqlStore.create({ url });
  },
  async openFleet(store) {
    const { MysqlStore } = await import('./store.js');
    if (!(store instanceof MysqlStore)) return undefined;
    const { MysqlFleet } = await import('./fleet.js');
    return MysqlFleet.forStore(store);
  },
  async openSlotLedger(store) {
    const { MysqlStore } = await import('./store.js');
    if (!(store instanceof MysqlStore)) return undefined;
    const { MysqlSlotLedger } = await import('./slots.js');
    // The store's own connections: no ledger call holds one across a round trip (./slots.ts).
    return new MysqlSlotLedger(store);
  },
};
