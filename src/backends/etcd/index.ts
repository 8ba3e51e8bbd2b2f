/**
 * The etcd store: `createEtcdStore({ url: 'etcd://127.0.0.1:2379' })`. Needs the optional peer
 * dependency `etcd3`, loaded on first use. Design notes: ./README.md.
 */
import { EtcdStore, type EtcdStoreOptions } from './store.js';

export { EtcdStore, type EtcdStoreOptions } from './store.js';
export { parseEtcdUrl, type Etcd3Like } from './client.js';

/**
 * Opens an etcd store: `createEtcdStore({ url: 'etcd://127.0.0.1:2379' })` or
 * `createEtcdStore({ client: new Etcd3(...) })`. Run `migrate()` once before the first claim.
 * @throws {ConfigError} for a malformed URL or when `etcd3` is not installed.
 */
export function createEtcdStore(options: EtcdStoreOptions): Promise<EtcdStore> {
  return EtcdStore.create(options);
}
