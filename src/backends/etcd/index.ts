/**
 * The etcd store: `createEtcdStore({ url: 'etcd://127.0.0.1:2379' })`. Needs the optional peer
 * dependency `etcd3`, loaded on first use. Design notes: ./README.md.
 */
export { EtcdStore, createEtcdStore, type EtcdStoreOptions } from './store.js';
export { parseEtcdUrl, type Etcd3Like } from './client.js';
