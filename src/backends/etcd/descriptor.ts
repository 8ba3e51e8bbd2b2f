import type { BackendDescriptor } from '../descriptor.js';

/** etcd v3: every module loads on first use. */
export const etcd: BackendDescriptor = {
  kind: 'etcd',
  label: 'etcd',
  schemes: ['etcd', 'etcds'],
  exampleUrl: 'etcd://host:2379',
  async openStore(url) {
    const { EtcdStore } = await import('./store.js');
    return EtcdStore.create({ url });
  },
  async openFleet(store) {
    const { EtcdStore } = await import('./store.js');
    if (!(store instanceof EtcdStore)) return undefined;
    const { EtcdFleet } = await import('./fleet.js');
    return new EtcdFleet(store);
  },
  async openSlotLedger(store, url) {
    const { EtcdStore } = await import('./store.js');
    if (!(store instanceof EtcdStore)) return undefined;
    const { EtcdSlotLedger } = await import('./slots.js');
    return EtcdSlotLedger.fromUrl(url, store.prefix);
  },
};
