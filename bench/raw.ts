/**
 * The baselines: the raw driver doing the same atomic thing leasehold does, with none of its
 * rules (no history, no tokens across releases, no clone detection). What leasehold costs on
 * top of this is the figure; the baseline is the floor a lease on that store can reach.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { TEST_PG_URL } from '../test/helpers/stores.js';
import { TEST_REDIS_URL } from '../test/helpers/redis-store.js';
import { TEST_ETCD_URL } from '../test/helpers/etcd-store.js';
import { parseEtcdUrl } from '../src/backends/etcd/index.js';
import { TEST_MYSQL_URL, type StoreKind } from '../test/helpers/stores.js';

const nonce = (): string => randomBytes(12).toString('base64url');

/** N leases held by one holder, renewed in one call to the store. */
export interface RawRenewer {
  name: string;
  renew(): Promise<void>;
  /**
   * etcd only: the two round trips of a session tick done raw (src/backends/etcd/session.ts),
   * a compare-and-put of a key on the lease with a prefix read in one Txn, then the keepalive.
   */
  sessionTick?(): Promise<void>;
  close(): Promise<void>;
}

export async function rawRenewer(kind: StoreKind, n: number, ttlMs: number): Promise<RawRenewer | undefined> {
  switch (kind) {
    case 'postgres':
      return pgRenewer(n, ttlMs);
    case 'redis':
      return redisRenewer(n, ttlMs);
    case 'etcd':
      return etcdKeepalive(ttlMs);
    case 'sqlite':
      return sqliteRenewer(n, ttlMs);
    case 'mysql':
      return mysqlRenewer(n, ttlMs);
  }
}

/** One conditional UPDATE ... FROM unnest(...) RETURNING for the whole batch. */
async function pgRenewer(n: number, ttlMs: number): Promise<RawRenewer> {
  const pool = new pg.Pool({ connectionString: TEST_PG_URL, max: 2 });
  const table = `lh_bench_raw_${randomBytes(4).toString('hex')}`;
  await pool.query(`CREATE TABLE ${table} (name text PRIMARY KEY, holder text, nonce text, token bigint, expires_at timestamptz)`);
  const names = Array.from({ length: n }, (_, i) => `raw-${i}`);
  let nonces = names.map(() => nonce());
  await pool.query(
    `INSERT INTO ${table} SELECT u.name, 'bench', u.nonce, 1, now() + $3 * interval '1 millisecond' FROM unnest($1::text[], $2::text[]) AS u(name, nonce)`,
    [names, nonces, ttlMs],
  );
  return {
    name: n === 1 ? 'raw UPDATE..RETURNING' : 'raw UPDATE..FROM unnest',
    async renew() {
      const next = names.map(() => nonce());
      const r = await pool.query(
        n === 1
          ? `UPDATE ${table} AS t SET nonce = $3, expires_at = now() + $4 * interval '1 millisecond'
              WHERE t.name = $1 AND t.holder = 'bench' AND t.nonce = $2 AND t.expires_at > now() RETURNING t.token, t.expires_at`
          : `UPDATE ${table} AS t SET nonce = u.nxt, expires_at = now() + $4 * interval '1 millisecond'
               FROM unnest($1::text[], $2::text[], $3::text[]) AS u(name, cur, nxt)
              WHERE t.name = u.name AND t.holder = 'bench' AND t.nonce = u.cur AND t.expires_at > now() RETURNING t.name, t.token, t.expires_at`,
        n === 1 ? [names[0], nonces[0], next[0], ttlMs] : [names, nonces, next, ttlMs],
      );
      if (r.rowCount !== n) throw new Error(`raw PG renewal renewed ${r.rowCount} of ${n}`);
      nonces = next;
    },
    async close() {
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await pool.end();
    },
  };
}

/** One conditional UPDATE joined to JSON_TABLE for the whole batch (n = 1: a plain UPDATE), as the store's renewal is shaped. */
async function mysqlRenewer(n: number, ttlMs: number): Promise<RawRenewer> {
  const { createPool } = await import('mysql2/promise');
  const pool = createPool({ uri: TEST_MYSQL_URL.replace(/^mariadb:/, 'mysql:'), connectionLimit: 2 });
  const table = `lh_bench_raw_${randomBytes(4).toString('hex')}`;
  await pool.query(`CREATE TABLE ${table} (name VARCHAR(255) PRIMARY KEY, holder VARCHAR(255), nonce VARCHAR(64), token BIGINT, expires_at DATETIME(6))`);
  const names = Array.from({ length: n }, (_, i) => `raw-${i}`);
  let nonces = names.map(() => nonce());
  await pool.query(`INSERT INTO ${table} VALUES ?`, [names.map((name, i) => [name, 'bench', nonces[i], 1, new Date(Date.now() + ttlMs)])]);
  return {
    name: n === 1 ? 'raw UPDATE' : 'raw UPDATE JOIN JSON_TABLE',
    async renew() {
      const next = names.map(() => nonce());
      const [r] = (await pool.query(
        n === 1
          ? `UPDATE ${table} SET nonce = ?, expires_at = NOW(6) + INTERVAL ? * 1000 MICROSECOND
              WHERE name = ? AND holder = 'bench' AND nonce = ? AND expires_at > NOW(6)`
          : `UPDATE ${table} t JOIN JSON_TABLE(?, '$[*]' COLUMNS (name VARCHAR(255) PATH '$[0]', cur VARCHAR(64) PATH '$[1]', nxt VARCHAR(64) PATH '$[2]')) u
                ON t.name = u.name
               SET t.nonce = u.nxt, t.expires_at = NOW(6) + INTERVAL ? * 1000 MICROSECOND
             WHERE t.holder = 'bench' AND t.nonce = u.cur AND t.expires_at > NOW(6)`,
        n === 1 ? [next[0], ttlMs, names[0], nonces[0]] : [JSON.stringify(names.map((name, i) => [name, nonces[i], next[i]])), ttlMs],
      )) as unknown as [{ affectedRows: number }];
      if (r.affectedRows !== n) throw new Error(`raw MySQL renewal renewed ${r.affectedRows} of ${n}`);
      nonces = next;
    },
    async close() {
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await pool.end();
    },
  };
}

// Every key: "holder nonce"; renew when it still holds ours, in one script.
const RENEW_LUA = `
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] .. ' ' .. ARGV[2 + i] then
    redis.call('SET', KEYS[i], ARGV[1] .. ' ' .. ARGV[2 + #KEYS + i], 'PX', ARGV[2])
    n = n + 1
  end
end
return n`;

async function redisRenewer(n: number, ttlMs: number): Promise<RawRenewer> {
  const r = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
  const tag = randomBytes(4).toString('hex');
  const keys = Array.from({ length: n }, (_, i) => `{lhbench-${tag}}:raw-${i}`);
  let nonces = keys.map(() => nonce());
  const m = r.multi();
  keys.forEach((k, i) => m.set(k, `bench ${nonces[i]}`, 'PX', ttlMs));
  await m.exec();
  return {
    name: 'raw Lua script',
    async renew() {
      const next = keys.map(() => nonce());
      const got = (await r.eval(RENEW_LUA, keys.length, ...keys, 'bench', ttlMs, ...nonces, ...next)) as number;
      if (got !== n) throw new Error(`raw Redis renewal renewed ${got} of ${n}`);
      nonces = next;
    },
    async close() {
      for (let i = 0; i < keys.length; i += 1000) await r.unlink(...keys.slice(i, i + 1000));
      r.disconnect();
    },
  };
}

/** etcd keeps any number of keys alive on one lease: one keepalive, whatever N is. */
async function etcdKeepalive(ttlMs: number): Promise<RawRenewer> {
  const { Etcd3 } = await import('etcd3');
  const client = new Etcd3({ hosts: parseEtcdUrl(TEST_ETCD_URL).hosts });
  const lease = client.lease(Math.ceil(ttlMs / 1000), { autoKeepAlive: false });
  const leaseId = await lease.grant();
  const key = Buffer.from(`lh-bench-raw/${leaseId}/session`);
  const markers = Buffer.from(`lh-bench-raw/${leaseId}/ended/`);
  const markersEnd = Buffer.from(markers);
  markersEnd[markersEnd.length - 1]! += 1;
  let value = Buffer.from(nonce());
  await client.kv.txn({ compare: [], success: [{ request_put: { key, value, lease: leaseId } }], failure: [] });
  return {
    name: 'one etcd lease keepalive',
    async renew() {
      await lease.keepaliveOnce();
    },
    async sessionTick() {
      const next = Buffer.from(nonce());
      const r = await client.kv.txn({
        compare: [{ key, target: 'Value', result: 'Equal', value }],
        success: [{ request_put: { key, value: next, lease: leaseId } }, { request_range: { key: markers, range_end: markersEnd } }],
        failure: [],
      });
      if (!r.succeeded) throw new Error('the raw session swap was refused');
      value = next;
      await lease.keepaliveOnce();
    },
    async close() {
      await lease.revoke().catch(() => undefined);
      client.close();
    },
  };
}

async function sqliteRenewer(n: number, ttlMs: number): Promise<RawRenewer> {
  const { default: Database } = await import('better-sqlite3');
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(join(tmpdir(), 'lh-bench-raw-'));
  const db = new Database(join(dir, 'raw.db'));
  db.pragma('journal_mode = WAL');
  // The store's durability (src/backends/sqlite/store.ts: a lost token bump must not survive a
  // power cut), so both sides pay the same commit: better-sqlite3 builds WAL mode with NORMAL,
  // which skips the sync and would make the floor a different, weaker transaction.
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE t (name TEXT PRIMARY KEY, holder TEXT, nonce TEXT, token INTEGER, expires_at INTEGER)');
  const names = Array.from({ length: n }, (_, i) => `raw-${i}`);
  let nonces = names.map(() => nonce());
  const ins = db.prepare('INSERT INTO t VALUES (?, ?, ?, 1, ?)');
  db.transaction(() => names.forEach((name, i) => ins.run(name, 'bench', nonces[i], Date.now() + ttlMs)))();
  const upd = db.prepare('UPDATE t SET nonce = ?, expires_at = ? WHERE name = ? AND holder = ? AND nonce = ? AND expires_at > ?');
  const renewAll = db.transaction((next: string[]) => {
    const now = Date.now();
    let c = 0;
    names.forEach((name, i) => (c += upd.run(next[i], now + ttlMs, name, 'bench', nonces[i], now).changes));
    return c;
  });
  return {
    name: 'raw UPDATE in one tx',
    renew() {
      const next = names.map(() => nonce());
      const got = renewAll.immediate(next);
      if (got !== n) return Promise.reject(new Error(`raw SQLite renewal renewed ${got} of ${n}`));
      nonces = next;
      return Promise.resolve();
    },
    close() {
      db.close();
      rmSync(dir, { recursive: true, force: true });
      return Promise.resolve();
    },
  };
}
