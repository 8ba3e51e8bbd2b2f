import { randomBytes } from 'node:crypto';
import { createEtcdStore, parseEtcdUrl, type Etcd3Like } from '../../src/backends/etcd/index.js';
import type { LeaseStore } from '../../src/backends/store.js';

export const TEST_ETCD_URL = process.env['LEASEHOLD_TEST_ETCD_URL'] ?? 'etcd://127.0.0.1:2379';

/** A key prefix no other test (or test run) shares. */
export function freshEtcdPrefix(): string {
  return `lhtest-${randomBytes(6).toString('hex')}`;
}

/** A plain etcd3 client on the test etcd, for setup and cleanup behind the store's back. */
export async function etcdAdmin(): Promise<Etcd3Like & { delete(): { prefix(p: string): Promise<unknown> } }> {
  const { Etcd3 } = (await import('etcd3')) as unknown as {
    Etcd3: new (o: { hosts: string[] }) => Etcd3Like & { delete(): { prefix(p: string): Promise<unknown> } };
  };
  return new Etcd3({ hosts: parseEtcdUrl(TEST_ETCD_URL).hosts });
}

/** Deletes every key under `{prefix}/`. Never the whole keyspace: the etcd may be shared. */
export async function deleteEtcdKeys(prefix: string): Promise<void> {
  const admin = await etcdAdmin();
  try {
    await admin.delete().prefix(`${prefix}/`);
  } finally {
    admin.close();
  }
}

/**
 * A migrated etcd store on its own random prefix. `cleanup` closes it and deletes its keys (the
 * etcd leases it granted carry no keys by then and run out on their own).
 */
export async function makeEtcdTestStore(options: { migrate?: boolean } = {}): Promise<{ store: LeaseStore; cleanup(): Promise<void> }> {
  const prefix = freshEtcdPrefix();
  const store = await createEtcdStore({ url: TEST_ETCD_URL, prefix });
  if (options.migrate !== false) await store.migrate();
  return {
    store,
    async cleanup() {
      try {
        await store.close();
      } finally {
        await deleteEtcdKeys(prefix);
      }
    },
  };
}
