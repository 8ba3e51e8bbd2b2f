import type { BackendDescriptor } from '../descriptor.js';

/** Redis (standalone or behind Sentinel): every module loads on first use. */
export const redis: BackendDescriptor = {
  kind: 'redis',
  label: 'Redis',
  schemes: ['redis', 'rediss', 'redis+sentinel', 'rediss+sentinel'],
  exampleUrl: 'redis://host:6379',
  async openStore(url) {
    const { RedisStore } = await import('./store.js');
    return RedisStore.create({ url });
  },
  async openFleet(store) {
    const { RedisStore } = await import('./store.js');
    if (!(store instanceof RedisStore)) return undefined;
    const { RedisFleet } = await import('./fleet.js');
    return new RedisFleet(store);
  },
  async openSlotLedger(store) {
    const { RedisStore } = await import('./store.js');
    if (!(store instanceof RedisStore)) return undefined;
    const { RedisSlotLedger } = await import('./slots.js');
    return new RedisSlotLedger(store);
  },
};
