export { RedisStore, createRedisStore, type RedisStoreOptions } from './store.js';
export type { IoredisLike, NodeRedisLike } from './driver.js';
export { parseRedisUrl } from './connect.js';
export { keysFor } from './keys.js';
