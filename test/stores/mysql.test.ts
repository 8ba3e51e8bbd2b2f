/**
 * What only the MySQL store has to show, on the real MariaDB (the conformance suite covers the
 * contract): contention that InnoDB turns into deadlocks and lock waits elsewhere, tokens that
 * outlive an emptied table, names compared byte for byte, and the named-lock doorbell waking a
 * follower when a holder's process dies.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { newNonce } from '../../src/core/identity.js';
import { SchemaError } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import type { MysqlStore } from '../../src/backends/mysql/store.js';
import { MYSQL_SCHEMA_VERSION } from '../../src/backends/mysql/schema.js';
import type { ClaimRequest, ClaimResult, LeaseStore } from '../../src/backends/store.js';
import { makeTestStore, mysqlAdmin, selectedStores, type TestStore } from '../helpers/stores.js';

const skip = selectedStores().includes('mysql') ? false : 'mysql not selected (LEASEHOLD_TEST_STORES)';
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const storeJs = fileURLToPath(new URL('../../src/backends/index.js', import.meta.url));

function contend(name: string, holder: string, ttlMs = 60_000): ClaimRequest & { nextNonce: string } {
  return { name, holder, ttlMs, expect: null, nextNonce: newNonce() };
}

void describe('MySQL store', { skip }, () => {
  let t: TestStore;
  before(async () => {
    t = await makeTestStore('mysql');
  });
  after(async () => {
    await t?.cleanup();
  });

  void it('100 contenders on one lease: one acquires each round, and no deadlock or lock wait reaches a caller', async () => {
    const stores = [t.store, ...(await Promise.all(Array.from({ length: 9 }, () => t.open())))];
    const name = uniq('hot');
    let retries = 0;
    for (let round = 0; round < 5; round++) {
      const results = await Promise.all(
        Array.from({ length: 100 }, async (_, i) => {
          const req = contend(name, `h${round}-${i}`);
          const [r] = await stores[i % stores.length]!.claim([req]);
          return { r: r!, req, store: stores[i % stores.length]! };
        }),
      );
      const won = results.filter((x) => x.r.outcome === 'acquired');
      assert.equal(won.length, 1, `round ${round}: ${won.length} acquired`);
      assert.equal(results.filter((x) => x.r.outcome === 'busy').length, 99);
      const w = won[0]!;
      assert.equal(await w.store.release({ name, holder: w.req.holder, expect: [w.req.nextNonce] }), true);
    }
    for (const s of stores) retries += (s as MysqlStore).lockRetries;
    console.log(`# mysql: 5 rounds of 100 contenders: lock conflicts retried inside the call: ${retries}`);
  });

  void it('10,000 leases renew in batches while contenders hit them: every renewal renews, every contender is busy', async () => {
    const holder = t.store;
    const others = await Promise.all(Array.from({ length: 3 }, () => t.open()));
    const prefix = uniq('many');
    const names = Array.from({ length: 10_000 }, (_, i) => `${prefix}-${i}`);
    const nonce = new Map<string, string>();
    const batch = (holder as MysqlStore).maxClaimBatch;
    for (let i = 0; i < names.length; i += batch) {
      const reqs = names.slice(i, i + batch).map((n) => contend(n, 'holder-many'));
      const rs = await holder.claim(reqs);
      rs.forEach((r, j) => {
        assert.equal(r.outcome, 'acquired', r.name);
        nonce.set(r.name, reqs[j]!.nextNonce);
      });
    }
    for (let tick = 0; tick < 3; tick++) {
      const renewals = (async () => {
        for (let i = 0; i < names.length; i += batch) {
          const reqs: ClaimRequest[] = names.slice(i, i + batch).map((n) => ({ name: n, holder: 'holder-many', ttlMs: 60_000, expect: [nonce.get(n)!], nextNonce: newNonce() }));
          const rs = await holder.claim(reqs);
          rs.forEach((r, j) => {
            assert.equal(r.outcome, 'renewed', `${r.name}: ${JSON.stringify(r, (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}`);
            nonce.set(r.name, reqs[j]!.nextNonce);
          });
        }
      })();
      const contenders = others.map(async (s, k) => {
        for (let j = 0; j < 20; j++) {
          const pick = Array.from({ length: 50 }, () => names[Math.floor(Math.random() * names.length)]!);
          const rs = await s.claim([...new Set(pick)].map((n) => contend(n, `other-${k}`)));
          for (const r of rs) assert.equal(r.outcome, 'busy', r.name);
        }
      });
      await Promise.all([renewals, ...contenders]);
    }
    const retries = [holder, ...others].reduce((n, s) => n + (s as MysqlStore).lockRetries, 0);
    console.log(`# mysql: 3 ticks of 10,000 renewals beside 3 x 20 contending batches: lock conflicts retried: ${retries}`);
  });

  void it("a full batch of leases with the longest names and holder ids fits the server's max_allowed_packet: claims and releases are cut into parts, each answered", async () => {
    // 2,000 contenders with 200-character names and 512-character holder ids of 3-byte characters
    // are 35 MB of SQL once inlined, over MariaDB's default max_allowed_packet (16 MiB): sent
    // whole, the server refused the batch (1153, "Got a packet bigger than max_allowed_packet").
    const store = (await t.open()) as MysqlStore;
    try {
      const prefix = uniq('wide');
      const holder = '€'.repeat(512);
      const reqs = Array.from({ length: store.maxClaimBatch }, (_, i) => contend(`${prefix}-${i}-${'€'.repeat(200)}`.slice(0, 200), holder));
      const sent: number[] = [];
      const mysqlConnector = store.connector as unknown as { connection(): Promise<{ query(o: { sql: string }, cb: unknown): unknown }> };
      const connection = mysqlConnector.connection.bind(mysqlConnector);
      mysqlConnector.connection = async () => {
        const c = await connection();
        const query = c.query.bind(c);
        c.query = (o, cb) => (/INSERT IGNORE INTO leasehold_leases/.test(o.sql) && sent.push(o.sql.split(';\n').length), query(o, cb));
        return c;
      };
      const got = await store.claim(reqs);
      assert.deepEqual(got.map((r) => r.name), reqs.map((r) => r.name), 'answered in request order');
      assert.ok(got.every((r) => r.outcome === 'acquired'), 'every lease acquired');
      assert.ok(sent.length > 1, `cut into parts (${sent.length} round trips)`);
      const released = await store.releaseMany(reqs.map((r) => ({ name: r.name, holder, expect: [r.nextNonce] })));
      assert.ok(released.every((r) => r), 'every lease released');
      assert.equal((await t.store.list()).filter((r) => r.name.startsWith(prefix) && r.holder !== null).length, 0);
    } finally {
      await store.close();
    }
  });

  void it('a lock-wait timeout inside a claim is retried within the call and counted, not handed to the caller', async () => {
    const name = uniq('locked');
    const [first] = await t.store.claim([contend(name, 'a', 500)]);
    assert.equal(first!.outcome, 'acquired');
    // Another session holds the row's lock for longer than the store's lock wait (2s), as a
    // writer slow inside a fenced transaction on that row would; it lets go at 3s.
    const { createRequire } = await import('node:module');
    const mysql = createRequire(import.meta.url)('mysql2/promise') as {
      createConnection(uri: string): Promise<{ query(sql: string, v?: unknown[]): Promise<unknown>; end(): Promise<void> }>;
    };
    const admin = await mysql.createConnection(t.url);
    try {
      await admin.query('START TRANSACTION');
      await admin.query('SELECT name FROM leasehold_leases WHERE name = ? FOR UPDATE', [name]);
      const s = (await t.open()) as MysqlStore;
      const letGo = setTimeout(() => void admin.query('COMMIT'), 3000);
      try {
        const [r] = await s.claim([contend(name, 'b', 500)]);
        assert.equal(r!.outcome, 'acquired', 'the first term (500ms) expired while the claim waited');
        assert.ok(s.lockRetries >= 1, `lockRetries ${s.lockRetries}`);
      } finally {
        clearTimeout(letGo);
      }
    } finally {
      await admin.query('ROLLBACK').catch(() => {});
      await admin.end();
    }
  });

  void it('tokens keep growing after the leases table, and then the counter table too, are emptied', async () => {
    const name = uniq('trunc');
    const first = contend(name, 'a', 1000);
    const [a] = await t.store.claim([first]);
    assert.equal(a!.outcome, 'acquired');
    const db = new URL(t.url).pathname.slice(1);
    await mysqlAdmin(`TRUNCATE TABLE ${db}.leasehold_leases`);
    const [b] = await t.store.claim([contend(name, 'b', 1000)]);
    assert.equal(b!.outcome, 'acquired');
    assert.ok((b as { token: bigint }).token > (a as { token: bigint }).token, `${String((b as { token: bigint }).token)} after ${String((a as { token: bigint }).token)}`);
    await mysqlAdmin(`TRUNCATE TABLE ${db}.leasehold_leases`);
    await mysqlAdmin(`TRUNCATE TABLE ${db}.leasehold_tokens`);
    const [c] = await t.store.claim([contend(name, 'c', 1000)]);
    assert.equal(c!.outcome, 'acquired');
    assert.ok((c as { token: bigint }).token > (b as { token: bigint }).token, 'the server clock still puts the token above');
  });

  void it('lease names compare byte for byte: "Billing" and "billing" are two leases', async () => {
    const base = uniq('case');
    const [x] = await t.store.claim([contend(`Billing-${base}`, 'a')]);
    const [y] = await t.store.claim([contend(`billing-${base}`, 'b')]);
    assert.equal(x!.outcome, 'acquired');
    assert.equal(y!.outcome, 'acquired');
  });

  void it('a claim on a database without leasehold tables is a SchemaError that says to migrate', async () => {
    const db = `lh_t_${randomBytes(5).toString('hex')}`;
    await mysqlAdmin(`CREATE DATABASE ${db}`);
    const s = await openStore(t.url.replace(/\/lh_t_[0-9a-f]+/, `/${db}`));
    try {
      await assert.rejects(s.claim([contend('x', 'a')]), (e: unknown) => e instanceof SchemaError && /leasehold migrate/.test(e.message));
      assert.deepEqual(await s.schemaStatus(), { current: 0, expected: (await t.store.schemaStatus()).expected });
    } finally {
      await s.close();
      await mysqlAdmin(`DROP DATABASE ${db}`);
    }
  });

  void it('placement on a database still at schema version 3 (no placement index) places without the index, and migrate adds it', async () => {
    const own = await makeTestStore('mysql');
    const db = new URL(own.url).pathname.slice(1);
    try {
      await mysqlAdmin(`DROP INDEX leasehold_fleet_agents_placement ON ${db}.leasehold_fleet_agents`);
      await mysqlAdmin(`UPDATE ${db}.leasehold_schema_version SET version = 3`);
      const { openFleet } = await import('../../src/fleet/open.js');
      const { Leasehold } = await import('../../src/core/leasehold.js');
      const { Agent } = await import('../../src/fleet/agent.js');
      const fleet = await openFleet(own.store);
      const lh = new Leasehold({ store: own.store });
      const agent = await Agent.start(lh, fleet, { id: uniq('v3'), heartbeat: '1s', staleAfter: '5s' });
      try {
        const placed = await fleet.place(uniq('res'));
        assert.equal(placed.agent, agent.id, 'placed without the index');
        // A second migrate of the same database, cut short after the index was made, is done too.
        assert.deepEqual(await own.store.migrate(), { current: MYSQL_SCHEMA_VERSION, expected: MYSQL_SCHEMA_VERSION });
        await mysqlAdmin(`UPDATE ${db}.leasehold_schema_version SET version = 3`);
        assert.equal((await own.store.migrate()).current, MYSQL_SCHEMA_VERSION, 'rerun over an index (and a fences.lease column) that exists: taken as done');
        assert.equal((await fleet.place(uniq('res2'))).agent, agent.id);
      } finally {
        await agent.stop();
        await lh.close();
      }
    } finally {
      await own.cleanup();
    }
  });

  void it('the named-lock connection closes when the last lease is released, not a year later', async () => {
    // The holding connection's wait_timeout is a year (it idles for a whole term): kept after the
    // last release, it is a server session per idle process for as long as the process lives.
    const own = await makeTestStore('mysql');
    const db = new URL(own.url).pathname.slice(1);
    const { createRequire } = await import('node:module');
    const mysql = createRequire(import.meta.url)('mysql2/promise') as {
      createConnection(uri: string): Promise<{ query(sql: string, v?: unknown[]): Promise<[{ v: number | string | null }[]]>; end(): Promise<void> }>;
    };
    const admin = await mysql.createConnection(own.url.replace(/^mariadb:/, 'mysql:').replace(/\?.*$/, ''));
    const one = async (sql: string, v: unknown[]): Promise<number | null> => {
      const [rows] = await admin.query(sql, v);
      return rows[0]?.v == null ? null : Number(rows[0].v);
    };
    const until = async <T>(what: string, get: () => Promise<T>, want: (x: T) => boolean): Promise<T> => {
      let x = await get();
      for (const end = performance.now() + 5000; !want(x) && performance.now() < end; x = await get()) await new Promise((r) => setTimeout(r, 50));
      assert.ok(want(x), `${what} (5 s: the connection lingers 1 s after the last lease)`);
      return x;
    };
    try {
      const name = uniq('idle');
      // The lease's named lock, as src/backends/mysql/freed.ts names it. The server says which
      // connection holds it (IS_USED_LOCK): this test counted the database's connections before,
      // and lost the race when the lock's connection opened before the count.
      const lock = `leasehold:${createHash('sha256').update(db).update('\0').update(name).digest('base64url').slice(0, 40)}`;
      const req = contend(name, 'h');
      const [r] = await own.store.claim([req]);
      assert.equal(r!.outcome, 'acquired');
      const holder = (await until('the holder took the named lock', () => one('SELECT IS_USED_LOCK(?) AS v', [lock]), (id) => id !== null))!;
      const alive = (): Promise<number | null> => one('SELECT COUNT(*) AS v FROM information_schema.PROCESSLIST WHERE ID = ?', [holder]);
      assert.equal(await alive(), 1);
      assert.equal(await own.store.release({ name, holder: 'h', expect: [req.nextNonce] }), true);
      // Closed, not only unlocked: a pool connection would have let the lock go and stayed.
      await until('the lock connection closed with the last lease released', alive, (n) => n === 0);
    } finally {
      await admin.end();
      await own.cleanup();
    }
  });

  void it("a holder's process killed with SIGKILL wakes a waiting follower at once, through its named lock; the claim still says busy until expiry", async () => {
    const name = uniq('dies');
    const ttlMs = 20_000;
    // The holder: another process, so that its death closes its connections as a crash does.
    const script = `
      const { openStore } = await import(${JSON.stringify(storeJs)});
      const s = await openStore(${JSON.stringify(t.url)});
      const [r] = await s.claim([{ name: ${JSON.stringify(name)}, holder: 'doomed', ttlMs: ${ttlMs}, expect: null, nextNonce: 'n-doomed' }]);
      // Give the named lock a moment after the acquisition, then say so.
      await new Promise((res) => setTimeout(res, 300));
      console.log(r.outcome);
      setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const out = await new Promise<string>((resolve, reject) => {
      child.stdout.once('data', (d: Buffer) => resolve(d.toString().trim()));
      child.once('exit', (code) => reject(new Error(`holder exited ${code}`)));
    });
    assert.equal(out, 'acquired');
    const follower: LeaseStore = await t.open();
    const heard: { name: string; at: number }[] = [];
    const stop = await follower.watchFreed!((n) => heard.push({ name: n, at: performance.now() }));
    try {
      const [busy] = await follower.claim([contend(name, 'follower')]);
      assert.equal(busy!.outcome, 'busy');
      await new Promise((r) => setTimeout(r, 200)); // the follower is blocked in GET_LOCK
      const killedAt = performance.now();
      child.kill('SIGKILL');
      // Bound: a tenth of the TTL. The kernel closes the dead process's socket at once and the
      // server frees its locks when it reads the close; only then does the follower's GET_LOCK return.
      const deadline = killedAt + ttlMs / 10;
      while (!heard.some((h) => h.name === name) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      const h = heard.find((x) => x.name === name);
      assert.ok(h !== undefined, `no wake-up within ${ttlMs / 10}ms of the kill`);
      console.log(`# mysql: follower woken ${(h.at - killedAt).toFixed(0)}ms after the holder's SIGKILL (TTL ${ttlMs}ms)`);
      // The doorbell is not a lease: the dead holder's term runs to its expiry.
      const [still] = await follower.claim([contend(name, 'follower')]);
      assert.equal(still!.outcome, 'busy');
      assert.equal((still as Extract<ClaimResult, { outcome: 'busy' }>).holder, 'doomed');
    } finally {
      child.kill('SIGKILL');
      await stop();
    }
  });
});
