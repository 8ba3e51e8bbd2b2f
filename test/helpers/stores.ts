import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { openStore } from '../../src/backends/index.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { TEST_REDIS_URL, deleteRedisKeys, freshRedisPrefix } from './redis-store.js';
import { TEST_ETCD_URL, deleteEtcdKeys, freshEtcdPrefix } from './etcd-store.js';

export const TEST_PG_URL = process.env['LEASEHOLD_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';

export const TEST_MYSQL_URL = process.env['LEASEHOLD_TEST_MYSQL_URL'] ?? 'mysql://root@127.0.0.1:3306/test';

export type StoreKind = 'postgres' | 'sqlite' | 'redis' | 'etcd' | 'mysql';
export const ALL_STORES: StoreKind[] = ['postgres', 'sqlite', 'redis', 'etcd', 'mysql'];

/** The stores this run covers: `LEASEHOLD_TEST_STORES=postgres,redis` narrows it. */
export function selectedStores(): StoreKind[] {
  const env = process.env['LEASEHOLD_TEST_STORES'];
  if (env === undefined || env.trim() === '') return ALL_STORES;
  const wanted = env.split(',').map((s) => s.trim()) as StoreKind[];
  for (const w of wanted) if (!ALL_STORES.includes(w)) throw new Error(`LEASEHOLD_TEST_STORES names unknown store "${w}"`);
  return wanted;
}

/**
 * How many stores' suites a file runs at once (LEASEHOLD_TEST_STORES_AT_ONCE, default 1). The
 * files that loop over stores spend much of their time waiting on real time (a TTL running out,
 * a slot coming due, a process starting), one store after another, in one of the runner's slots.
 * Each store's suite has a namespace of its own (a schema, a key prefix, a file), so side by side
 * they do not see each other; but on a 2-core host with other work beside the suite, 2 made every
 * such file slower and broke cases bound by real time (docs/testing.md). For more cores.
 */
export const STORES_AT_ONCE = Math.max(1, Number(process.env['LEASEHOLD_TEST_STORES_AT_ONCE'] ?? 1) || 1);

/**
 * The options of a suite whose suites, one per store, run STORES_AT_ONCE at a time:
 * `describe(title, SIDE_BY_SIDE, () => { for (const kind of ...) describe(..., { concurrency: 1 }, ...) })`.
 * Each store's suite must say `{ concurrency: 1 }`: node's runner hands a suite's concurrency down
 * to the suites and tests inside it, and the cases of one store share its agents, replicas and
 * files. The describe is the test file's own call, so the runner names that file in its reports.
 */
export const SIDE_BY_SIDE = { concurrency: STORES_AT_ONCE } as const;

/** One isolated namespace on a real store: a fresh schema, file, or key prefix. */
export interface TestStore {
  kind: StoreKind;
  /** A URL other processes can open to reach the same namespace. */
  url: string;
  store: LeaseStore;
  /** Another independent connection to the same namespace (another "process"). */
  open(): Promise<LeaseStore>;
  cleanup(): Promise<void>;
}

export async function makeTestStore(kind: StoreKind): Promise<TestStore> {
  const id = randomBytes(5).toString('hex');
  let url: string;
  let drop: () => Promise<void>;
  switch (kind) {
    case 'postgres': {
      const schema = `lh_t_${id}`;
      url = `${TEST_PG_URL}${TEST_PG_URL.includes('?') ? '&' : '?'}schema=${schema}`;
      drop = async () => {
        const c = new pg.Client({ connectionString: TEST_PG_URL });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await c.end();
      };
      break;
    }
    case 'sqlite': {
      const dir = mkdtempSync(join(tmpdir(), 'lh-sqlite-'));
      url = `sqlite:${join(dir, 'leases.db')}`;
      drop = () => {
        rmSync(dir, { recursive: true, force: true });
        return Promise.resolve();
      };
      break;
    }
    case 'redis': {
      const prefix = freshRedisPrefix();
      url = `${TEST_REDIS_URL}${TEST_REDIS_URL.includes('?') ? '&' : '?'}prefix=${prefix}`;
      drop = () => deleteRedisKeys(prefix);
      break;
    }
    case 'mysql': {
      // A database of its own: MySQL's schemas are databases.
      const db = `lh_t_${id}`;
      await mysqlAdmin(`CREATE DATABASE ${db}`);
      url = TEST_MYSQL_URL.replace(/\/[^/?]*(\?|$)/, `/${db}$1`);
      drop = () => mysqlAdmin(`DROP DATABASE IF EXISTS ${db}`);
      break;
    }
    case 'etcd': {
      const prefix = freshEtcdPrefix();
      url = `${TEST_ETCD_URL}${TEST_ETCD_URL.includes('?') ? '&' : '?'}prefix=${prefix}`;
      drop = () => deleteEtcdKeys(prefix);
      break;
    }
  }
  const opened: LeaseStore[] = [];
  const open = async (): Promise<LeaseStore> => {
    const s = await openStore(url);
    opened.push(s);
    return s;
  };
  const store = await open();
  await store.migrate();
  return {
    kind,
    url,
    store,
    open,
    async cleanup() {
      await Promise.allSettled(opened.map((s) => s.close()));
      await drop();
    },
  };
}

/** A URL for each kind that points at nothing listening (a store that is down). */
export function downUrl(kind: StoreKind): string | undefined {
  switch (kind) {
    case 'postgres':
      return 'postgres://postgres@127.0.0.1:1/test';
    case 'redis':
      return 'redis://127.0.0.1:1/0';
    case 'etcd':
      return 'etcd://127.0.0.1:1';
    case 'mysql':
      return 'mysql://root@127.0.0.1:1/test';
    case 'sqlite':
      return undefined;
  }
}

/** A connection of its own to a test store's database (mysql2's promise API): lockers, lookers, old schemas. */
export interface MysqlConnection {
  query(sql: string, v?: unknown[]): Promise<[Record<string, unknown>[]]>;
  end(): Promise<void>;
}

/** Opens a {@link MysqlConnection} to the database a test store's `url` names (its query string left out). */
export async function mysqlConnection(url: string): Promise<MysqlConnection> {
  const { createRequire } = await import('node:module');
  const mysql = createRequire(import.meta.url)('mysql2/promise') as { createConnection(uri: string): Promise<MysqlConnection> };
  return mysql.createConnection(url.replace(/^mariadb:/, 'mysql:').replace(/\?.*$/, ''));
}

/** Runs one statement as the test server's administrator (on the URL's own database). */
export async function mysqlAdmin(sql: string): Promise<void> {
  const { createRequire } = await import('node:module');
  const mysql = createRequire(import.meta.url)('mysql2') as { createConnection(uri: string): { query(sql: string, cb: (err: Error | null) => void): void; end(): void } };
  const c = mysql.createConnection(TEST_MYSQL_URL.replace(/^mariadb:/, 'mysql:'));
  try {
    await new Promise<void>((resolve, reject) => c.query(sql, (err) => (err === null ? resolve() : reject(err))));
  } finally {
    c.end();
  }
}

/** Wraps a store and counts claim calls and requests (the follower-load budget): the exported suite's. */
export { countingStore } from '../../src/conformance/suite.js';
