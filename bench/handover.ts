/**
 * Clean handover: a holder releases while a follower waits on another connection; the time from
 * the release call to the follower holding it. Baselines, in the same run, interleaved: the
 * peer's waiter on that store (PostgreSQL: a backend blocked in pg_advisory_lock; MySQL: a
 * session blocked in GET_LOCK; Redis:
 * redis-semaphore's Mutex, which polls; etcd: etcd3's Election, which watches; SQLite, which has
 * no waiter to wake: one raw conditional UPDATE taking a free row, the least a handover costs).
 */
import { Leasehold } from '../src/core/leasehold.js';
import type { Lease } from '../src/core/lease.js';
import { makeTestStore, TEST_MYSQL_URL, type StoreKind } from '../test/helpers/stores.js';
import { interleave, sleep, stat, uniq, type Recorder } from './lib.js';
import { advisoryClient, etcdClient, namedLockClient, randomKey, redisClient, semaphoreMutex } from './peers.js';

const TTL = 30_000;
// The waiter is asleep (on its expiry timer or a notification) before the release is timed.
const SETTLE_MS = 30;

type Handover = () => Promise<number>;

async function leaseholdHandover(kind: StoreKind): Promise<{ run: Handover; close(): Promise<void> }> {
  const t = await makeTestStore(kind);
  const a = new Leasehold({ store: t.store });
  const b = new Leasehold({ store: await t.open() });
  const name = uniq('handover');
  let current: Lease = a.lease(name, { ttl: TTL });
  await current.acquire();
  let waiter = b;
  let holder = a;
  return {
    async run() {
      const next = waiter.lease(name, { ttl: TTL });
      const acquired = next.acquire({ wait: '60s' });
      await sleep(SETTLE_MS);
      const t0 = performance.now();
      await current.release();
      await acquired;
      const ms = performance.now() - t0;
      current.close().catch(() => undefined);
      current = next;
      [holder, waiter] = [waiter, holder];
      return ms;
    },
    async close() {
      await current.release().catch(() => false);
      await a.close();
      await b.close();
      await t.cleanup();
    },
  };
}

async function peerHandover(kind: StoreKind): Promise<{ name: string; run: Handover; close(): Promise<void> }> {
  switch (kind) {
    case 'postgres': {
      const [a, b] = [await advisoryClient(), await advisoryClient()];
      const key = Math.floor(Math.random() * 2 ** 31);
      await a.query('SELECT pg_advisory_lock($1)', [key]);
      let [holder, waiter] = [a, b];
      return {
        name: 'pg_advisory_lock waiter',
        async run() {
          const acquired = waiter.query('SELECT pg_advisory_lock($1)', [key]);
          await sleep(SETTLE_MS);
          const t0 = performance.now();
          await holder.query('SELECT pg_advisory_unlock($1)', [key]);
          await acquired;
          const ms = performance.now() - t0;
          [holder, waiter] = [waiter, holder];
          return ms;
        },
        async close() {
          await Promise.all([a.end(), b.end()]);
        },
      };
    }
    case 'redis': {
      const [ra, rb] = [redisClient(), redisClient()];
      const key = randomKey('mutex');
      let current = semaphoreMutex(ra, key, TTL);
      await current.acquire();
      let [holder, waiter] = [ra, rb];
      return {
        name: 'redis-semaphore Mutex',
        async run() {
          const next = semaphoreMutex(waiter, key, TTL);
          const acquired = next.acquire();
          await sleep(SETTLE_MS);
          const t0 = performance.now();
          await current.release();
          await acquired;
          const ms = performance.now() - t0;
          current = next;
          [holder, waiter] = [waiter, holder];
          return ms;
        },
        async close() {
          await current.release().catch(() => undefined);
          ra.disconnect();
          rb.disconnect();
        },
      };
    }
    case 'etcd': {
      const { Election } = await import('etcd3');
      const [ca, cb] = [await etcdClient(), await etcdClient()];
      const prefix = randomKey('election');
      const elect = (c: typeof ca, who: string): Promise<{ resign(): Promise<void> }> => {
        const campaign = new Election(c, prefix, 30).campaign(who);
        return new Promise((resolve, reject) => {
          campaign.once('elected', () => resolve(campaign));
          campaign.once('error', reject);
        });
      };
      let current = await elect(ca, 'a');
      let [holder, waiter] = [ca, cb];
      return {
        name: 'etcd3 Election',
        async run() {
          const next = elect(waiter, 'w');
          await sleep(SETTLE_MS);
          const t0 = performance.now();
          await current.resign();
          current = await next;
          const ms = performance.now() - t0;
          [holder, waiter] = [waiter, holder];
          return ms;
        },
        async close() {
          await current.resign().catch(() => undefined);
          await ca.delete().prefix(prefix);
          ca.close();
          cb.close();
        },
      };
    }
    case 'mysql': {
      const [a, b] = [await namedLockClient(), await namedLockClient()];
      const key = randomKey('getlock');
      const take = async (c: typeof a): Promise<void> => {
        const [rows] = (await c.query('SELECT GET_LOCK(?, 60) AS got', [key])) as unknown as [{ got: number | null }[]];
        // 0 is a timeout, NULL an error: either way the waiter never held it, so the sample is void.
        if (rows[0]?.got !== 1) throw new Error(`GET_LOCK returned ${String(rows[0]?.got)}`);
      };
      await take(a);
      let [holder, waiter] = [a, b];
      return {
        name: 'GET_LOCK waiter',
        async run() {
          const acquired = take(waiter);
          await sleep(SETTLE_MS);
          const t0 = performance.now();
          await holder.query('SELECT RELEASE_LOCK(?)', [key]);
          await acquired;
          const ms = performance.now() - t0;
          [holder, waiter] = [waiter, holder];
          return ms;
        },
        async close() {
          await Promise.all([a.end(), b.end()]);
        },
      };
    }
    case 'sqlite': {
      const { default: Database } = await import('better-sqlite3');
      const { mkdtempSync, rmSync } = await import('node:fs');
      const { join } = await import('node:path');
      const { tmpdir } = await import('node:os');
      const dir = mkdtempSync(join(tmpdir(), 'lh-bench-ho-'));
      const db = new Database(join(dir, 'raw.db'));
      db.pragma('journal_mode = WAL');
      db.exec("CREATE TABLE t (name TEXT PRIMARY KEY, holder TEXT, token INTEGER, expires_at INTEGER); INSERT INTO t VALUES ('x', NULL, 0, 0)");
      const take = db.prepare('UPDATE t SET holder = ?, token = token + 1, expires_at = ? WHERE name = ? AND (holder IS NULL OR expires_at <= ?)');
      const free = db.prepare('UPDATE t SET holder = NULL WHERE name = ?');
      return {
        name: 'raw UPDATE taking a free row',
        run() {
          free.run('x');
          const t0 = performance.now();
          if (take.run('b', Date.now() + TTL, 'x', Date.now()).changes !== 1) throw new Error('raw SQLite take failed');
          return Promise.resolve(performance.now() - t0);
        },
        close() {
          db.close();
          rmSync(dir, { recursive: true, force: true });
          return Promise.resolve();
        },
      };
    }
  }
}

/**
 * MySQL: the least a handover that moves the term in the store can cost with the raw driver,
 * the design's floor (src/backends/mysql/sql/006-handover.ts): the holder's connection commits
 * one durable one-row UPDATE and lets a named lock go right after the COMMIT, in the same round
 * trip (not before: InnoDB lets row locks go before the flush, src/backends/mysql/freed.ts); the
 * waiter, blocked in GET_LOCK, wakes and accepts the handed term with one durable conditional
 * UPDATE of the row (since MySQL schema version 10 the handed term is an offer its waiter
 * accepts by a write: src/backends/mysql/sql/010-handover-acceptance.ts; before, this floor
 * ended with a read under a shared lock).
 * Timed from the holder's first statement until both the commit and the read have answered,
 * as the handover is timed until both the release and the follower's acquisition have. The
 * GET_LOCK waiter commits nothing; the difference between the two is the commit's flush.
 */
async function mysqlFloor(): Promise<{ run: Handover; close(): Promise<void> }> {
  const { createConnection } = await import('mysql2/promise');
  // multipleStatements: the holder's transaction is one round trip, as leasehold's release is.
  const connect = (): ReturnType<typeof createConnection> => createConnection({ uri: TEST_MYSQL_URL.replace(/^mariadb:/, 'mysql:'), multipleStatements: true });
  const [a, b] = [await connect(), await connect()];
  const key = randomKey('floor');
  const table = key.replace(/-/g, '_');
  await a.query(`CREATE TABLE ${table} (id INT PRIMARY KEY, v BIGINT NOT NULL, acc BIGINT NOT NULL) ENGINE = InnoDB`);
  await a.query(`INSERT INTO ${table} VALUES (1, 0, 0)`);
  for (const c of [a, b]) await c.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
  const take = async (c: typeof a): Promise<void> => {
    const [rows] = (await c.query('SELECT GET_LOCK(?, 60) AS got', [key])) as unknown as [{ got: number | null }[]];
    if (rows[0]?.got !== 1) throw new Error(`GET_LOCK returned ${String(rows[0]?.got)}`);
  };
  await take(a);
  let [holder, waiter] = [a, b];
  return {
    async run() {
      const w = waiter;
      const read = take(w).then(async () => {
        const [r] = (await w.query(`UPDATE ${table} SET acc = v WHERE id = 1 AND acc <> v`)) as unknown as [{ affectedRows: number }];
        if (r.affectedRows !== 1) throw new Error('the waiter could not accept the handed term');
      });
      await sleep(SETTLE_MS);
      const t0 = performance.now();
      await holder.query(`START TRANSACTION; UPDATE ${table} SET v = v + 1 WHERE id = 1; COMMIT; DO RELEASE_LOCK(?)`, [key]);
      await read;
      const ms = performance.now() - t0;
      [holder, waiter] = [waiter, holder];
      return ms;
    },
    async close() {
      await a.query(`DROP TABLE IF EXISTS ${table}`).catch(() => undefined);
      await Promise.all([a.end(), b.end()]);
    },
  };
}

/**
 * PostgreSQL's floor for a handover that survives a crash: the releaser commits (durably) an
 * UPDATE of the row and a NOTIFY in one round trip; the waiter, listening, accepts the handed
 * term when the notification arrives, with one durable conditional UPDATE of the row (it holds
 * the term only if the row still says it was handed to it). A lease handover cannot cost less:
 * the new holder's token must be on disk before it acts, and since schema version 17 the handed
 * term is an offer its waiter must accept by a write (src/backends/postgres/sql/017-handover-
 * acceptance.ts: a dead waiter's kept registration held the lease for a whole TTL). Before 17
 * this floor ended with a read; the 2026-12-06 run measured leasehold against that one.
 */
async function pgCommitNotifyRead(): Promise<{ name: string; run: Handover; close(): Promise<void> }> {
  const [a, b] = [await advisoryClient(), await advisoryClient()];
  const schema = uniq('lh_bench_ho').replace(/[^A-Za-z0-9_]/g, '_');
  const channel = `${schema}_freed`;
  await a.query(
    `CREATE SCHEMA "${schema}"; CREATE TABLE "${schema}".t (name text PRIMARY KEY, holder text, token bigint NOT NULL, accepted boolean NOT NULL); INSERT INTO "${schema}".t VALUES ('x', 'a', 1, true)`,
  );
  await Promise.all([a.query(`LISTEN "${channel}"`), b.query(`LISTEN "${channel}"`)]);
  let [holder, waiter] = [a, b];
  let who = 'b';
  return {
    name: 'durable commit + NOTIFY + accepting commit',
    async run() {
      const w = waiter;
      const heard = new Promise<void>((resolve) => w.once('notification', () => resolve()));
      await sleep(SETTLE_MS);
      const t0 = performance.now();
      await holder.query(
        `BEGIN; UPDATE "${schema}".t SET holder = '${who}', token = token + 1, accepted = false WHERE name = 'x'; SELECT pg_notify('${channel}', 'x'); COMMIT`,
      );
      await heard;
      const r = await w.query(`UPDATE "${schema}".t SET accepted = true WHERE name = 'x' AND holder = '${who}' AND NOT accepted RETURNING token`);
      const ms = performance.now() - t0;
      if (r.rowCount !== 1) throw new Error('the waiter could not accept the handed term');
      [holder, waiter] = [waiter, holder];
      who = who === 'b' ? 'a' : 'b';
      return ms;
    },
    async close() {
      await a.query(`DROP SCHEMA "${schema}" CASCADE`).catch(() => undefined);
      await Promise.all([a.end(), b.end()]);
    },
  };
}

export async function handover(rec: Recorder, kind: StoreKind, count: number): Promise<void> {
  const lh = await leaseholdHandover(kind);
  const peer = await peerHandover(kind);
  const floor = kind === 'mysql' ? await mysqlFloor() : undefined;
  const pgFloor = kind === 'postgres' ? await pgCommitNotifyRead() : undefined;
  const floorMs: number[] = [];
  try {
    if (floor !== undefined) {
      // Sampled beside each handover, so the floor sees the same load (the disk's above all).
      const f: number[] = [];
      const [a, b] = await interleave(count, async () => (f.push(await floor.run()), lh.run()), peer.run);
      const floorStat = stat(f.slice(1)); // the first was interleave's unrecorded warm-up
      rec.add({
        figure: 'handover',
        store: kind,
        label: 'clean handover',
        unit: 'ms',
        leasehold: stat(a),
        baselineName: peer.name,
        baseline: stat(b),
        extra: { 'raw floor (commit, wake, accepting commit)': floorStat.median, 'floor p90': floorStat.p90, 'leasehold/floor': stat(a).median / floorStat.median },
      });
      return;
    }
    // The floor runs right after each peer handover, so it is interleaved with leasehold's too.
    const peerThenFloor = async (): Promise<number> => {
      const ms = await peer.run();
      if (pgFloor) floorMs.push(await pgFloor.run());
      return ms;
    };
    const [a, b] = await interleave(count, lh.run, peerThenFloor);
    rec.add({ figure: 'handover', store: kind, label: 'clean handover', unit: 'ms', leasehold: stat(a), baselineName: peer.name, baseline: stat(b) });
    if (pgFloor) {
      rec.add({ figure: 'handover', store: kind, label: 'clean handover vs its floor', unit: 'ms', leasehold: stat(a), baselineName: pgFloor.name, baseline: stat(floorMs.slice(1)) });
    }
  } finally {
    await floor?.close();
    await pgFloor?.close();
    await peer.close();
    await lh.close();
  }
}
