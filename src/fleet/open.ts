import { ConfigError } from '../core/errors.js';
import { redactUrl } from '../backends/url.js';
import type { LeaseStore } from '../backends/store.js';
import { Fleet } from './fleet.js';

/**
 * Opens the fleet registry living beside the leases of `store` (PostgreSQL, SQLite, Redis or etcd): the
 * agents' liveness is their leases in that same store, so the two must be one database.
 * @throws {ConfigError} for another kind of store.
 */
export async function openFleet(store: LeaseStore): Promise<Fleet> {
  switch (store.kind) {
    case 'postgres': {
      const { PostgresStore } = await import('../backends/postgres/store.js');
      const { PostgresFleet } = await import('../backends/postgres/fleet.js');
      if (!(store instanceof PostgresStore)) break;
      return new Fleet(await PostgresFleet.forStore(store));
    }
    case 'sqlite': {
      const { SqliteStore } = await import('../backends/sqlite/store.js');
      const { SqliteFleet } = await import('../backends/sqlite/fleet.js');
      if (!(store instanceof SqliteStore)) break;
      return new Fleet(new SqliteFleet(store));
    }
    case 'redis': {
      const { RedisStore } = await import('../backends/redis/store.js');
      const { RedisFleet } = await import('../backends/redis/fleet.js');
      if (!(store instanceof RedisStore)) break;
      return new Fleet(new RedisFleet(store));
    }
    case 'etcd': {
      const { EtcdStore } = await import('../backends/etcd/store.js');
      const { EtcdFleet } = await import('../backends/etcd/fleet.js');
      if (!(store instanceof EtcdStore)) break;
      return new Fleet(new EtcdFleet(store));
    }
  }
  throw new ConfigError(`the fleet registry runs on PostgreSQL, SQLite, Redis and etcd; ${redactUrl(store.description)} is a ${store.kind} store`);
}
