/**
 * One-write handover on MySQL (src/backends/mysql/sql/006-handover.ts), on the real MariaDB: a
 * waiting follower's 'busy' claim registers it in the lease row, the holder's release hands it
 * the term in the release's own transaction (and lets the named lock go in the same round trip),
 * and the woken follower accepts the term with one UPDATE (until then it is an offer that lapses
 * a third of the waiter's TTL after the release: sql/010-handover-acceptance.ts).
 *
 * What the store sends is observed on its own connections: the pool's (claims, and releases
 * that fall back to it) and the named-lock connections (./freed.ts), by wrapping `query` on
 * each connection mysql2 hands out.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import { newNonce } from '../../src/core/identity.js';
import { SchemaError } from '../../src/core/errors.js';
import { MysqlStore } from '../../src/backends/mysql/store.js';
import { MIGRATIONS, MYSQL_SCHEMA_VERSION, NOW_US } from '../../src/backends/mysql/schema.js';
import { planAccept } from '../../src/backends/mysql/claim.js';
import type { ClaimResult } from '../../src/core/port.js';
import { makeTestStore, mysqlAdmin, mysqlConnection, selectedStores, type MysqlConnection, type TestStore } from '../helpers/stores.js';

const skip = selectedStores().includes('mysql') ? false : 'mysql not selected (LEASEHOLD_TEST_STORES)';
const uniq = (p: string): string => `h25-${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

type Admin = MysqlConnection;

function granted(r: ClaimResult | undefined): Extract<ClaimResult, { outcome: 'acquired' | 'renewed' }> {
  assert.ok(r !== undefined && (r.outcome === 'acquired' || r.outcome === 'renewed'), `expected a granted claim, got ${r?.outcome}`);
  return r;
}

/** Every SQL text `store` sends from now on, on any of its connections. */
function observe(store: MysqlStore): string[] {
  const sent: string[] = [];
  const wrap = (conn: { query: (o: { sql: string }, cb: unknown) => unknown; __h25?: true }): void => {
    if (conn.__h25 === true) return;
    conn.__h25 = true;
    const query = conn.query.bind(conn);
    conn.query = (o, cb) => (sent.push(o.sql), query(o, cb));
  };
  const connector = store.connector as unknown as { connection(): Promise<never> };
  const connection = connector.connection.bind(connector);
  connector.connection = async () => {
    const c = await connection();
    wrap(c);
    return c;
  };
  const freed = (store as unknown as { freed: { connect(): never } }).freed;
  const connect = freed.connect.bind(freed);
  freed.connect = () => {
    const c = connect();
    wrap(c);
    return c;
  };
  return sent;
}

void describe('MySQL store: one-write handover', { skip }, () => {
  let t: TestStore;
  let admin: Admin;
  let store: MysqlStore;
  before(async () => {
    t = await makeTestStore('mysql');
    store = (await t.open()) as MysqlStore;
    admin = await mysqlConnection(t.url);
  });
  after(async () => {
    await store?.close();
    await admin?.end();
    await t?.cleanup();
  });

  const waiterOf = async (name: string): Promise<string | null> =>
    ((await admin.query('SELECT waiter FROM leasehold_leases WHERE name = ?', [name]))[0][0]?.['waiter'] as string | null | undefined) ?? null;
  const contend = async (s: MysqlStore | TestStore['store'], name: string, holder: string, ttlMs: number, handoff?: string[]): Promise<ClaimResult & { sent: string }> => {
    const sent = newNonce();
    const [r] = await s.claim([{ name, holder, ttlMs, expect: null, nextNonce: sent, ...(handoff === undefined ? {} : { handoff }) }]);
    return { ...r!, sent };
  };

  void it('the release hands the term to the registered waiter: a larger token, history released then acquired, and its claim accepts it under its own nonce', async () => {
    const name = uniq('hand');
    const a = await contend(t.store, name, 'A', 30_000);
    const tokenA = granted(a).token;
    const b = await contend(store, name, 'B', 20_000, []);
    assert.equal(b.outcome, 'busy');
    assert.equal(await waiterOf(name), 'B', "a waiting contender's busy claim registers it");

    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    const [row] = await t.store.list({ name });
    assert.equal(row?.holder, 'B', 'the release handed the term to the waiter');
    assert.ok(row!.token > tokenA, `the handed term's token ${row!.token} is above ${tokenA}`);
    const offered = row!.expiresAtMs! - row!.storeNowMs;
    assert.ok(offered > 0 && offered <= 20_000 / 3, `an offer of a third of B's TTL until B accepts it (migration 10), not ${Math.round(offered)} ms`);
    assert.deepEqual(
      (await t.store.history({ name })).map((h) => [h.event, h.holder ?? h.previousHolder, h.token]),
      [
        ['acquired', 'A', tokenA],
        ['released', 'A', tokenA],
        ['acquired', 'B', row!.token],
      ],
    );
    assert.equal(await waiterOf(name), null, 'the handover used up the registration');

    const accepting = await contend(store, name, 'B', 20_000, [b.sent]);
    const c = granted(accepting);
    assert.equal(c.outcome, 'acquired');
    assert.equal(c.nonce, undefined, 'held under the nonce this claim sent: the acceptance swapped it for the registered one');
    assert.equal(c.token, row!.token);
    assert.ok(c.expiresAtMs - c.storeNowMs > 20_000 / 3 && c.expiresAtMs - c.storeNowMs <= 20_000, "accepted: the waiter's own TTL, from its claim");

    // B holds it as any acquirer would: it renews with the nonce its accepting claim sent, and A is out.
    const [renewed] = await store.claim([{ name, holder: 'B', ttlMs: 20_000, expect: [accepting.sent], nextNonce: newNonce() }]);
    assert.equal(renewed?.outcome, 'renewed');
    const [stale] = await t.store.claim([{ name, holder: 'A', ttlMs: 30_000, expect: [a.sent], nextNonce: newNonce() }]);
    assert.equal(stale?.outcome, 'lost');
    if (stale?.outcome === 'lost') assert.equal(stale.reason, 'superseded');
  });

  /** The registration a process of the previous version (schema 9's client) sends, word for word. */
  const registerAsPreviousVersion = (name: string, holder: string, nonce: string, ttlMs: number): Promise<unknown> =>
    admin.query(
      `UPDATE leasehold_leases SET waiter = ?, waiter_nonce = ?, waiter_ttl_us = ?, waiter_until_us = ${NOW_US} + 2 * ? WHERE name = ?`,
      [holder, nonce, ttlMs * 1000, ttlMs * 1000, name],
    );
  /** The previous version's confirming read (its CONFIRM_SQL): what it took for its term. */
  const confirmAsPreviousVersion = async (name: string): Promise<{ holder: string; nonce: string; grantedMs: number }> => {
    const [rows] = await admin.query(`SELECT holder, nonce, expires_at_us, ${NOW_US} AS now_us FROM leasehold_leases WHERE name = ?`, [name]);
    const row = rows[0]!;
    return { holder: row['holder'] as string, nonce: row['nonce'] as string, grantedMs: (Number(row['expires_at_us']) - Number(row['now_us'])) / 1000 };
  };

  void it('a waiter registered by the previous version, which confirms with a read, is handed a whole term, not an offer (rolling upgrade)', async () => {
    const TTL = 9000;
    for (const replacedNew of [false, true]) {
      const name = uniq(replacedNew ? 'old-after-new' : 'old-waiter');
      const a = await contend(t.store, name, 'A', 30_000);
      if (replacedNew) {
        // This version registered first (the row says it accepts), then an old process replaced it.
        assert.equal((await contend(store, name, 'N', TTL, [])).outcome, 'busy');
        assert.equal(await waiterOf(name), 'N');
      }
      const oldNonce = newNonce();
      await registerAsPreviousVersion(name, 'OLD', oldNonce, TTL);
      assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
      const seen = await confirmAsPreviousVersion(name);
      assert.deepEqual([seen.holder, seen.nonce], ['OLD', oldNonce], 'handed to the old waiter under its nonce');
      // An offer would show at most a third of the TTL; the old process would take it for its
      // term, pass its deadline before its first renewal and stand down every lease it holds.
      assert.ok(seen.grantedMs > TTL / 3 + 1000, `${replacedNew ? 'after a new registration was replaced: ' : ''}a whole term of the old waiter's TTL (${Math.round(seen.grantedMs)} ms of ${TTL})`);
      const [renewed] = await store.claim([{ name, holder: 'OLD', ttlMs: TTL, expect: [oldNonce], nextNonce: newNonce() }]);
      assert.equal(renewed?.outcome, 'renewed', 'and it renews it as its own');
    }
  });

  void it("the acceptance reads the clock after the row lock: an offer that lapses while it waits for the lock is not accepted, and it swaps the nonce (planAccept)", async () => {
    const name = uniq('accept-lock');
    const a = await contend(t.store, name, 'A', 30_000);
    // A 1 s window, the lock held just past it: under the 2 s innodb_lock_wait_timeout of the store's sessions.
    const b = await contend(store, name, 'B', 3000, []);
    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    const [offer] = await t.store.list({ name });
    const locker = await mysqlConnection(t.url);
    const req = { name, holder: 'B', ttlMs: 3000, expect: null, nextNonce: newNonce(), handoff: [b.sent] };
    let pending: Promise<unknown> | undefined;
    let queuedAt = Infinity;
    // The acceptance goes out on a store of its own: `store` follows the name since B's 'busy'
    // answer, and its connections may be busy with that (a loaded run saw the acceptance not yet
    // at the server 1.5 s after it was sent), which is not what this test is about.
    const acceptor = (await t.open()) as MysqlStore;
    try {
      await locker.query('START TRANSACTION');
      await locker.query('SELECT 1 FROM leasehold_leases WHERE name = ? FOR UPDATE', [name]);
      const plan = planAccept([req]);
      pending = acceptor.q(plan.sql, plan.values);
      void pending.catch(() => {});
      // Seen waiting for the lock (this database's sessions only), then the server's clock: the
      // acceptance began its wait before that reading, on the same clock, so no margin is needed.
      // Seen only after the offer lapsed, the test would prove nothing: it says so. Waiting shows
      // as the acceptance's locking read still executing while the locker holds the row
      // (MariaDB 10.11 runs it in the optimizer's "Statistics" phase, a primary-key lookup, where
      // INNODB_TRX does not list its transaction as LOCK WAIT).
      const waiting = async (): Promise<number> =>
        Number(
          (
            await admin.query(
              `SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST
                WHERE DB = DATABASE() AND COMMAND = 'Query' AND INFO LIKE 'SELECT COUNT(*) INTO @lh\\_seen%'`,
            )
          )[0][0]!['n'],
        );
      for (let i = 0; i < 150 && (await waiting()) === 0; i++) await sleep(10);
      if ((await waiting()) > 0) queuedAt = await t.store.now();
      if (queuedAt < offer!.expiresAtMs!) {
        for (let now = await t.store.now(); now <= offer!.expiresAtMs! + 50; now = await t.store.now()) await sleep(offer!.expiresAtMs! + 70 - now);
      }
      await locker.query('COMMIT');
      await pending;
    } finally {
      await locker.end();
      await acceptor.close();
    }
    assert.ok(queuedAt < offer!.expiresAtMs!, `precondition: the acceptance was seen waiting for the row lock while the offer was live (seen at ${queuedAt}, the offer lapsed at ${offer!.expiresAtMs})`);
    const [[row]] = await admin.query('SELECT nonce, expires_at_us FROM leasehold_leases WHERE name = ?', [name]);
    assert.equal(Number(row!['expires_at_us']) / 1000, offer!.expiresAtMs, 'the lapsed offer was left as it was, not given a TTL');
    assert.equal(row!['nonce'], b.sent);

    // Accepted in time, the row holds the accepting claim's nonce: a clone presenting the registered one finds nothing to accept.
    const live = uniq('accept-swap');
    const a2 = await contend(t.store, live, 'A', 30_000);
    const b2 = await contend(store, live, 'B', 30_000, []);
    assert.equal(await t.store.release({ name: live, holder: 'A', expect: [a2.sent] }), true);
    const one = { name: live, holder: 'B', ttlMs: 30_000, expect: null, nextNonce: newNonce(), handoff: [b2.sent] };
    const two = { ...one, nextNonce: newNonce() };
    for (const r of [one, two]) {
      const plan = planAccept([r]);
      await store.q(plan.sql, plan.values);
    }
    const [[swapped]] = await admin.query('SELECT nonce FROM leasehold_leases WHERE name = ?', [live]);
    assert.equal(swapped!['nonce'], one.nextNonce, 'the first acceptance swapped the nonce; the second found nothing to accept');
  });

  void it("the handed term's token is above every token issued for any name (the counter row), not only this name's", async () => {
    const name = uniq('counter');
    const a = await contend(t.store, name, 'A', 30_000);
    await contend(store, name, 'B', 30_000, []);
    // Another name's acquisition after A's raises the counter above A's token.
    const other = granted(await contend(t.store, uniq('other'), 'X', 30_000));
    assert.ok(other.token > granted(a).token);
    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    const [row] = await t.store.list({ name });
    assert.equal(row?.holder, 'B');
    assert.ok(row!.token > other.token, `handed token ${row!.token} above the last token issued (${other.token})`);
  });

  void it('a registration that has lapsed (two TTLs with no re-check) is not handed the term', async () => {
    const name = uniq('lapsed');
    const a = await contend(t.store, name, 'A', 30_000);
    assert.equal((await contend(store, name, 'B', 150, [])).outcome, 'busy');
    assert.equal(await waiterOf(name), 'B');
    await sleep(450); // three of B's TTLs: past the two its registration lasts
    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    const [row] = await t.store.list({ name });
    assert.equal(row?.holder, null, 'released, not handed to a waiter that stopped checking');
    assert.equal((await t.store.history({ name })).at(-1)?.event, 'released');
  });

  void it('a contender that will not wait (no handoff) does not register', async () => {
    const name = uniq('nowait');
    const a = await contend(t.store, name, 'A', 30_000);
    assert.equal((await contend(store, name, 'B', 30_000)).outcome, 'busy');
    assert.equal(await waiterOf(name), null);
    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    assert.equal((await t.store.list({ name }))[0]?.holder, null);
  });

  void it("a waiter's release of its registered nonce withdraws it; a holder never hands the term to itself", async () => {
    const name = uniq('withdraw');
    const a = await contend(t.store, name, 'A', 30_000);
    const b = await contend(store, name, 'B', 30_000, []);
    assert.equal(await store.release({ name, holder: 'B', expect: [b.sent] }), false, 'B held nothing to release');
    assert.equal(await waiterOf(name), null, 'withdrawn');
    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    assert.equal((await t.store.list({ name }))[0]?.holder, null);

    const own = uniq('own');
    const o = await contend(store, own, 'A', 30_000);
    assert.equal((await contend(store, own, 'A', 30_000, [])).outcome, 'busy');
    assert.equal(await waiterOf(own), null, 'a holder is never the waiter of its own term');
    assert.equal(await store.release({ name: own, holder: 'A', expect: [o.sent] }), true);
    assert.equal((await t.store.list({ name: own }))[0]?.holder, null);
  });

  void it('a waiter withdraws from a revoked term (the row has no holder), and a revoked handed term is not confirmed', async () => {
    const name = uniq('revoked');
    await contend(t.store, name, 'A', 30_000);
    const b = await contend(store, name, 'B', 30_000, []);
    assert.equal((await t.store.revoke(name, 'test')).revoked, true);
    assert.equal(await store.release({ name, holder: 'B', expect: [b.sent] }), false);
    assert.equal(await waiterOf(name), null, 'withdrawn from the free row');

    const handed = uniq('handed-revoked');
    const a = await contend(t.store, handed, 'A', 30_000);
    const w = await contend(store, handed, 'B', 30_000, []);
    assert.equal(await t.store.release({ name: handed, holder: 'A', expect: [a.sent] }), true);
    const [offer] = await t.store.list({ name: handed });
    assert.equal(offer?.holder, 'B', 'offered to B');
    const offerToken = offer!.token;
    assert.equal((await t.store.revoke(handed, 'test')).revoked, true);
    const c = await contend(store, handed, 'B', 30_000, [w.sent]);
    // An accepted offer and a new acquisition both answer under the nonce the claim sent: the
    // token tells them apart (the revoked offer's is not taken again).
    const fresh = granted(c);
    assert.equal(fresh.outcome, 'acquired');
    assert.ok(fresh.token > offerToken, `a new acquisition (token ${fresh.token}), not the revoked offer (token ${offerToken})`);
    assert.deepEqual(
      (await t.store.history({ name: handed })).slice(-2).map((h) => [h.event, h.token]),
      [['revoked', offerToken], ['acquired', fresh.token]],
    );
  });

  void it('a batch release (releaseMany) hands over as a single release does', async () => {
    const names = [uniq('many-a'), uniq('many-b')].sort();
    const held = await Promise.all(names.map((n) => contend(t.store, n, 'A', 30_000)));
    await contend(store, names[0]!, 'B', 30_000, []);
    const answers = await (t.store as MysqlStore).releaseMany(names.map((n, i) => ({ name: n, holder: 'A', expect: [held[i]!.sent] })));
    assert.deepEqual(answers, [true, true]);
    const rows = await t.store.list();
    assert.equal(rows.find((r) => r.name === names[0])?.holder, 'B', 'the waited-for lease was handed over');
    assert.equal(rows.find((r) => r.name === names[1])?.holder, null, 'the other was released');
  });

  void it('the engine: the woken follower accepts the handed term with one UPDATE, holds a larger token within the store expiry, and the release let the lock go in its own round trip', async () => {
    const name = uniq('engine');
    const holderStore = (await t.open()) as MysqlStore;
    const followerStore = (await t.open()) as MysqlStore;
    const a = new Leasehold({ store: holderStore });
    const b = new Leasehold({ store: followerStore });
    const holderSent = observe(holderStore);
    const followerSent = observe(followerStore);
    try {
      const la = a.lease(name, { ttl: 30_000 });
      const lb = b.lease(name, { ttl: 20_000 });
      const first = await la.acquire();
      const following = lb.acquire({ wait: '20s' });
      // The follower registered and is blocked on the named lock.
      for (let i = 0; i < 100 && (await waiterOf(name)) === null; i++) await sleep(20);
      assert.notEqual(await waiterOf(name), null, 'the follower registered');
      await sleep(200);
      const h0 = holderSent.length;
      const f0 = followerSent.length;
      await la.release();
      const second = await following;
      const remaining = lb.msUntilDeadline!;
      const [row] = await t.store.list({ name });
      assert.equal(row?.holder, second.holder);
      assert.ok(second.token > first.token, `${second.token} > ${first.token}`);
      assert.ok(remaining <= row!.expiresAtMs! - row!.storeNowMs, `the local deadline (${remaining}ms away) is within the store's expiry`);

      const releases = holderSent.slice(h0).filter((s) => /leasehold_release/.test(s));
      assert.equal(releases.length, 1, 'one release');
      assert.match(
        releases[0]!,
        /^START TRANSACTION;\s*CALL leasehold_release\(\?, \?, \?\);\s*COMMIT;\s*DO RELEASE_LOCK\(\?\);\s*SELECT @lh_prev AS prev$/,
        'one procedure call, and the lock goes in the release round trip, once the commit is durable (InnoDB lets row locks go before the flush)',
      );
      const claims = followerSent.slice(f0).filter((s) => /leasehold_leases/.test(s));
      assert.equal(claims.length, 1, `one claim by the follower: ${claims.join(' | ')}`);
      assert.match(
        claims[0]!,
        /^START TRANSACTION;\s*SELECT COUNT\(\*\) INTO @lh_seen FROM \(SELECT name FROM leasehold_leases WHERE name IN \(\?\) ORDER BY name FOR UPDATE\) x;\s*SET @lh_now = [^;]+;\s*UPDATE leasehold_leases l JOIN JSON_TABLE/,
        'an acceptance: the rows locked in name order (the lock waits for the release to commit), the clock read after, one UPDATE',
      );
      assert.doesNotMatch(claims[0]!, /INSERT|leasehold_tokens/, 'and no acquisition');
      assert.ok(remaining > 20_000 / 3, `the term runs the follower's own TTL once accepted, not the offer's third (${remaining}ms left)`);
      assert.equal(await lb.confirm(), second.token, 'it renews as any holder does');
      await lb.release();
    } finally {
      await a.close();
      await b.close();
    }
  });

  void it('the engine: a follower that stopped waiting is not handed the term', async () => {
    const name = uniq('stopped');
    const a = new Leasehold({ store: await t.open() });
    const b = new Leasehold({ store: await t.open() });
    try {
      const la = a.lease(name, { ttl: 30_000 });
      const lb = b.lease(name, { ttl: 30_000 });
      await la.acquire();
      const following = lb.acquire({ wait: '20s' }).catch((e: unknown) => e);
      for (let i = 0; i < 100 && (await waiterOf(name)) === null; i++) await sleep(20);
      assert.notEqual(await waiterOf(name), null, 'the follower registered');
      await lb.close();
      assert.equal(await waiterOf(name), null, 'close() withdrew it before resolving');
      await following;
      await la.release();
      assert.equal((await t.store.list({ name }))[0]?.holder, null, 'released, not handed to the stopped follower');
    } finally {
      await a.close();
      await b.close();
    }
  });

  void it('a database migrated before the release procedure (migration 9) refuses a release with the SchemaError that says to migrate; migrate creates it, and a rerun is harmless', async () => {
    const own = await makeTestStore('mysql');
    const db = new URL(own.url).pathname.slice(1);
    try {
      const s = own.store as MysqlStore;
      const a = await contend(s, 'n', 'A', 30_000);
      await mysqlAdmin(`DROP PROCEDURE ${db}.leasehold_release`);
      await mysqlAdmin(`UPDATE ${db}.leasehold_schema_version SET version = ${MYSQL_SCHEMA_VERSION - 1}`);
      await assert.rejects(s.release({ name: 'n', holder: 'A', expect: [a.sent] }), (err: unknown) => err instanceof SchemaError && /leasehold migrate/.test(err.message));
      assert.deepEqual(await s.migrate(), { current: MYSQL_SCHEMA_VERSION, expected: MYSQL_SCHEMA_VERSION });
      await mysqlAdmin(`UPDATE ${db}.leasehold_schema_version SET version = ${MYSQL_SCHEMA_VERSION - 1}`);
      assert.equal((await s.migrate()).current, MYSQL_SCHEMA_VERSION, 'rerun over a procedure that exists: no error');
      assert.equal(await s.release({ name: 'n', holder: 'A', expect: [a.sent] }), true);
    } finally {
      await own.cleanup();
    }
  });

  void it('on a database before migration 10 (no waiter_accepts) this version registers as the previous one did, is handed whole terms, and accepts them', async () => {
    const own = await makeTestStore('mysql');
    const db = new URL(own.url).pathname.slice(1);
    try {
      await mysqlAdmin(`ALTER TABLE ${db}.leasehold_leases DROP COLUMN waiter_accepts`);
      // Migration 9's release procedure back, on the database's own connection (its statements name no database).
      const conn = await mysqlConnection(own.url);
      try {
        for (const stmt of MIGRATIONS[8]!) await conn.query(stmt);
      } finally {
        await conn.end();
      }
      await mysqlAdmin(`UPDATE ${db}.leasehold_schema_version SET version = 9`);
      const s9 = own.store as MysqlStore;
      const waiter = (await own.open()) as MysqlStore;
      const a = await contend(s9, 'n', 'A', 30_000);
      const b = await contend(waiter, 'n', 'B', 9000, []);
      assert.equal(b.outcome, 'busy', 'registered without the column, not refused');
      assert.equal(await s9.release({ name: 'n', holder: 'A', expect: [a.sent] }), true);
      const [row] = await s9.list({ name: 'n' });
      assert.equal(row?.holder, 'B');
      assert.ok(row!.expiresAtMs! - row!.storeNowMs > 3000 + 1000, 'schema 9 hands a whole term');
      const cr = await contend(waiter, 'n', 'B', 9000, [b.sent]);
      const c = granted(cr);
      assert.equal(c.token, row!.token, 'accepted, under its own nonce');
      assert.deepEqual(await s9.migrate(), { current: MYSQL_SCHEMA_VERSION, expected: MYSQL_SCHEMA_VERSION });
      // Its own migrate() (the schema is current now: a no-op) ends the fallback at once: the next
      // registration names the column again, so a release offers rather than hands a whole term.
      await waiter.migrate();
      assert.equal(await waiter.release({ name: 'n', holder: 'B', expect: [c.nonce ?? cr.sent] }), true);
      const a2 = await contend(s9, 'n', 'A', 30_000);
      assert.equal(a2.outcome, 'acquired');
      const b2 = await contend(waiter, 'n', 'B', 9000, []);
      assert.equal(b2.outcome, 'busy');
      const look = await mysqlConnection(own.url);
      try {
        const [[reg]] = await look.query(`SELECT waiter_nonce, waiter_accepts FROM leasehold_leases WHERE name = 'n'`);
        assert.ok(reg?.['waiter_nonce'] !== null && reg?.['waiter_nonce'] !== undefined, 'B registered as the waiter');
        assert.equal(reg['waiter_accepts'], reg['waiter_nonce'], 'registered to accept offers again after migrate()');
      } finally {
        await look.end();
      }
    } finally {
      await own.cleanup();
    }
  });

  void it('a database at schema version 5 is refused with the SchemaError that says to migrate; migrate adds the columns, and a rerun is harmless', async () => {
    const own = await makeTestStore('mysql');
    const db = new URL(own.url).pathname.slice(1);
    try {
      await mysqlAdmin(`ALTER TABLE ${db}.leasehold_leases DROP COLUMN waiter, DROP COLUMN waiter_nonce, DROP COLUMN waiter_ttl_us, DROP COLUMN waiter_until_us`);
      await mysqlAdmin(`UPDATE ${db}.leasehold_schema_version SET version = 5`);
      const s5 = own.store as MysqlStore;
      assert.deepEqual(await s5.schemaStatus(), { current: 5, expected: MYSQL_SCHEMA_VERSION });
      await assert.rejects(contend(s5, 'n', 'H', 10_000, []), (err: unknown) => err instanceof SchemaError && /leasehold migrate/.test(err.message));
      assert.deepEqual(await s5.migrate(), { current: MYSQL_SCHEMA_VERSION, expected: MYSQL_SCHEMA_VERSION });
      // Cut short after the ALTER: the version still says 5, and migration 6 runs again.
      await mysqlAdmin(`UPDATE ${db}.leasehold_schema_version SET version = 5`);
      assert.equal((await s5.migrate()).current, MYSQL_SCHEMA_VERSION, 'rerun over columns that exist: no error');
      const a = await contend(s5, 'n', 'A', 30_000);
      assert.equal(a.outcome, 'acquired');
      assert.equal((await contend(s5, 'n', 'B', 30_000, [])).outcome, 'busy');
      assert.equal(await s5.release({ name: 'n', holder: 'A', expect: [a.sent] }), true);
      assert.equal((await s5.list({ name: 'n' }))[0]?.holder, 'B');
    } finally {
      await own.cleanup();
    }
  });
});
