export { RedisStore, createRedisStore, type RedisStoreOptions } from './store.js';
export type { IoredisLike, NodeRedisLike, RedisClientLike } from './driver.js';
export { parseRedisUrl } from './connect.js';
export { keysFor, type RedisKeys } from './keys.js';
