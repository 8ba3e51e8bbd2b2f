/**
 * A polling leader elector with Kubernetes' client-go defaults (LeaseDuration 15s, RenewDeadline
 * 10s, RetryPeriod 2s, JitterFactor 1.2), scaled to the bench's TTL so the ratios stay the same:
 * written for the bench only, as the baseline for idle follower load and crash failover. Like
 * client-go, a follower judges expiry by its own clock from when it last saw the record change.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { sleep } from './lib.js';

interface LeaderRecord {
  holder: string;
  version: number;
}

/** The record API client-go's resource lock needs: get, create, update if unchanged. */
export interface RecordStore {
  get(name: string): Promise<LeaderRecord | null>;
  /** Writes `holder` at version expected+1 if the record is at `expected` (0: absent). */
  put(name: string, holder: string, expected: number): Promise<boolean>;
  close(): Promise<void>;
}

export async function pgRecords(url: string, table = 'k8s_leader'): Promise<RecordStore> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(`CREATE TABLE IF NOT EXISTS ${table} (name text PRIMARY KEY, holder text NOT NULL, version bigint NOT NULL)`);
  // Every elector of a run shares this one connection: queue their queries here, in order, as pg
  // did by itself before it deprecated queueing on a busy client.
  let last: Promise<unknown> = Promise.resolve();
  const query = <R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<pg.QueryResult<R>> => {
    const next = last.then(() => c.query<R>(text, values));
    last = next.catch(() => undefined);
    return next;
  };
  // Every name this client read or wrote, deleted on close: the bench leaves nothing behind.
  const touched = new Set<string>();
  return {
    async get(name) {
      touched.add(name);
      const r = await query<{ holder: string; version: string }>(`SELECT holder, version FROM ${table} WHERE name = $1`, [name]);
      const row = r.rows[0];
      return row === undefined ? null : { holder: row.holder, version: Number(row.version) };
    },
    async put(name, holder, expected) {
      touched.add(name);
      const r =
        expected === 0
          ? await query(`INSERT INTO ${table} VALUES ($1, $2, 1) ON CONFLICT DO NOTHING`, [name, holder])
          : await query(`UPDATE ${table} SET holder = $2, version = version + 1 WHERE name = $1 AND version = $3`, [name, holder, expected]);
      return r.rowCount === 1;
    },
    close: async () => {
      if (touched.size > 0) await query(`DELETE FROM ${table} WHERE name = ANY ($1::text[])`, [[...touched]]).catch(() => undefined);
      await c.end();
    },
  };
}

export async function mysqlRecords(url: string, table = 'k8s_leader'): Promise<RecordStore> {
  const { createConnection } = await import('mysql2/promise');
  // One connection for every elector of a run, as pgRecords: mysql2 queues its queries itself.
  const c = await createConnection(url);
  await c.query(`CREATE TABLE IF NOT EXISTS ${table} (name VARCHAR(255) PRIMARY KEY, holder VARCHAR(255) NOT NULL, version BIGINT NOT NULL)`);
  const touched = new Set<string>();
  return {
    async get(name) {
      touched.add(name);
      const [rows] = (await c.query(`SELECT holder, version FROM ${table} WHERE name = ?`, [name])) as unknown as [{ holder: string; version: string | number }[]];
      const row = rows[0];
      return row === undefined ? null : { holder: row.holder, version: Number(row.version) };
    },
    async put(name, holder, expected) {
      touched.add(name);
      const [r] = (expected === 0
        ? await c.query(`INSERT IGNORE INTO ${table} VALUES (?, ?, 1)`, [name, holder])
        : await c.query(`UPDATE ${table} SET holder = ?, version = version + 1 WHERE name = ? AND version = ?`, [holder, name, expected])) as unknown as [{ affectedRows: number }];
      return r.affectedRows === 1;
    },
    close: async () => {
      if (touched.size > 0) await c.query(`DELETE FROM ${table} WHERE name IN (?)`, [[...touched]]).catch(() => undefined);
      await c.end();
    },
  };
}

const PUT_LUA = `
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'version', v + 1)
return 1`;

export function redisRecords(url: string): Promise<RecordStore> {
  const r = new Redis(url, { maxRetriesPerRequest: 1 });
  r.defineCommand('k8sput', { numberOfKeys: 1, lua: PUT_LUA });
  const put = (r as unknown as { k8sput(k: string, h: string, v: number): Promise<number> }).k8sput.bind(r);
  const touched = new Set<string>();
  // Set when close begins: an elector still in its loop (stopped between its read and its write)
  // would otherwise write its record after close deleted it, and the record has no TTL. A write
  // sent before this is set reaches Redis before the delete (one connection, in order).
  let closing = false;
  const open = (): void => {
    if (closing) throw new Error('the k8s record store is closed');
  };
  return Promise.resolve({
    async get(name) {
      open();
      touched.add(name);
      const [holder, version] = await r.hmget(`k8s:${name}`, 'holder', 'version');
      return holder == null || version == null ? null : { holder, version: Number(version) };
    },
    async put(name, holder, expected) {
      open();
      touched.add(name);
      return (await put(`k8s:${name}`, holder, expected)) === 1;
    },
    close: async () => {
      closing = true;
      // The records have no TTL (client-go's have none either): delete what this run used.
      if (touched.size > 0) await r.del(...[...touched].map((n) => `k8s:${n}`)).catch(() => undefined);
      await r.quit();
    },
  });
}

export class K8sElector {
  readonly id = randomBytes(6).toString('hex');
  private observed: LeaderRecord | null = null;
  private observedAt = 0;
  private stopped = false;
  leading = false;
  readonly leaseMs: number;
  readonly retryMs: number;

  constructor(
    private readonly records: RecordStore,
    private readonly name: string,
    ttlMs: number,
  ) {
    this.leaseMs = ttlMs;
    this.retryMs = (ttlMs * 2) / 15;
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = performance.now();
    const rec = await this.records.get(this.name);
    if (rec === null) return this.records.put(this.name, this.id, 0);
    if (this.observed?.version !== rec.version) {
      this.observed = rec;
      this.observedAt = now;
    }
    if (rec.holder !== this.id && this.observedAt + this.leaseMs > now) return false;
    return this.records.put(this.name, this.id, rec.version);
  }

  /** Resolves once leader; keeps renewing every RetryPeriod until stop(). */
  async run(onLeading: () => void = () => {}): Promise<void> {
    while (!this.stopped) {
      const ok = await this.tryAcquireOrRenew().catch(() => false);
      if (ok && !this.leading) {
        this.leading = true;
        onLeading();
      }
      // client-go: wait.JitterUntil(retryPeriod, 1.2) while acquiring; renewals every retryPeriod.
      await sleep(this.leading ? this.retryMs : this.retryMs * (1 + Math.random() * 1.2));
    }
  }

  stop(): void {
    this.stopped = true;
  }
}
