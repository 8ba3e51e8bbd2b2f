import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PostgresStore, type PgPoolLike } from '../../src/backends/postgres/store.js';
import { makeTestStore, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

/**
 * What the release and the acquisition commit with. A release may skip the WAL flush (a lost
 * release costs a wait for expiry, see src/backends/postgres/release.ts); an acquisition, which
 * issues a token, may not. Each call runs inside a transaction on one connection here, so the
 * setting it leaves for its commit can be read before that commit.
 */
void describe('postgres: release commits without waiting for the WAL flush, acquisition durably', () => {
  let t: TestStore;
  let client: pg.Client;
  let store: PostgresStore;

  before(async () => {
    t = await makeTestStore('postgres');
    client = new pg.Client({ connectionString: TEST_PG_URL });
    await client.connect();
    const pool: PgPoolLike = {
      query: (text: string, values?: unknown[]) => client.query(text, values),
      connect: () => Promise.reject(new Error('not used by this test')),
    } as PgPoolLike;
    store = await PostgresStore.create({ pool, schema: (t.store as PostgresStore).schema, notifyUrl: 'none' });
  });

  after(async () => {
    await store.close();
    await client.end();
    await t.cleanup();
  });

  const show = async (): Promise<string> => (await client.query('SHOW synchronous_commit')).rows[0]!['synchronous_commit'] as string;

  void it('the claim that issues a token commits with the server setting; the release that ends it does not wait for the flush', async () => {
    assert.equal(await show(), 'on', 'the test server runs with synchronous_commit on');
    await client.query('BEGIN');
    const [acq] = await store.claim([{ name: 'r', holder: 'h', ttlMs: 30_000, expect: null, nextNonce: 'n1' }]);
    assert.equal(acq?.outcome, 'acquired');
    assert.equal(await show(), 'on', 'an acquisition must stay durable: its token must never be issued twice');
    await client.query('COMMIT');

    await client.query('BEGIN');
    assert.equal(await store.release({ name: 'r', holder: 'h', expect: ['n1'] }), true);
    assert.equal(await show(), 'off', 'the release should commit without waiting for the WAL flush');
    await client.query('COMMIT');
    assert.equal(await show(), 'on', 'the setting is the release transaction’s only, never the connection’s');

    // Committed all the same: the row is free and the history says released.
    const [row] = await store.list({ name: 'r' });
    assert.equal(row?.holder, null);
    const events = (await store.history({ name: 'r' })).map((h) => h.event);
    assert.deepEqual(events, ['acquired', 'released']);
  });

  void it('renewals and revocations stay durable', async () => {
    const [acq] = await store.claim([{ name: 'd', holder: 'h', ttlMs: 30_000, expect: null, nextNonce: 'd1' }]);
    assert.equal(acq?.outcome, 'acquired');

    // A renewal lost in a crash would leave the holder believing in an expiry the store never
    // kept: another holder could be granted the lease inside the first one's believed term.
    await client.query('BEGIN');
    const [ren] = await store.claim([{ name: 'd', holder: 'h', ttlMs: 30_000, expect: ['d1'], nextNonce: 'd2' }]);
    assert.equal(ren?.outcome, 'renewed');
    assert.equal(await show(), 'on', 'a renewal must stay durable');
    await client.query('COMMIT');

    // An operator told "revoked" must not see the holder come back after a crash.
    await client.query('BEGIN');
    const r = await store.revoke('d', 'test');
    assert.equal(r.revoked, true);
    assert.equal(await show(), 'on', 'a revocation must stay durable');
    await client.query('COMMIT');
  });

  void it('a batch of plain releases is one statement that skips the flush; a batch with a handover in it commits durably', async () => {
    const names = ['b1', 'b2', 'b3'];
    const got = await store.claim(names.map((name) => ({ name, holder: 'h', ttlMs: 30_000, expect: null, nextNonce: `${name}-n` })));
    assert.ok(got.every((g) => g.outcome === 'acquired'));
    await client.query('BEGIN');
    assert.deepEqual(await store.releaseMany(names.map((name) => ({ name, holder: 'h', expect: [`${name}-n`] }))), [true, true, true]);
    assert.equal(await show(), 'off', 'plain releases only: no token issued, the flush may be skipped');
    await client.query('COMMIT');

    // A waiter registered on h1: the batch hands it the term, which issues a token.
    const again = await store.claim(['h1', 'h2'].map((name) => ({ name, holder: 'h', ttlMs: 30_000, expect: null, nextNonce: `${name}-n` })));
    assert.ok(again.every((g) => g.outcome === 'acquired'));
    const [busy] = await store.claim([{ name: 'h1', holder: 'w', ttlMs: 30_000, expect: null, nextNonce: 'w-n', handoff: [] }]);
    assert.equal(busy?.outcome, 'busy');
    await client.query('BEGIN');
    assert.deepEqual(await store.releaseMany(['h2', 'h1'].map((name) => ({ name, holder: 'h', expect: [`${name}-n`] }))), [true, true]);
    assert.equal(await show(), 'on', 'a batch that handed a term over must commit durably, like an acquisition');
    await client.query('COMMIT');
    const [h1] = await store.list({ name: 'h1' });
    assert.equal(h1?.holder, 'w', 'h1 was handed to its waiter');
    assert.equal((await store.list({ name: 'h2' }))[0]?.holder, null, 'h2 was released');
  });

  void it('a release that matches nothing changes nothing', async () => {
    await client.query('BEGIN');
    assert.equal(await store.release({ name: 'r', holder: 'someone-else', expect: ['n1'] }), false);
    await client.query('COMMIT');
    assert.equal(await show(), 'on');
  });
});

void describe('postgres: closing a process with many leases', () => {
  let t: TestStore;
  before(async () => {
    t = await makeTestStore('postgres');
  });
  after(async () => {
    await t.cleanup();
  });

  void it('1,000 held leases are released in one statement, and every one is free after', async () => {
    const store = t.store as PostgresStore;
    const { Leasehold } = await import('../../src/core/leasehold.js');
    const lh = new Leasehold({ store });
    const names = Array.from({ length: 1000 }, (_, i) => `close-${i}`);
    await Promise.all(names.map((n) => lh.lease(n, { ttl: 30_000 }).acquire()));
    let single = 0;
    const batches: number[] = [];
    const release = store.release.bind(store);
    const releaseMany = store.releaseMany.bind(store);
    store.release = (req, o) => (single++, release(req, o));
    store.releaseMany = (reqs, o) => (batches.push(reqs.length), releaseMany(reqs, o));
    try {
      await lh.close();
    } finally {
      store.release = release;
      store.releaseMany = releaseMany;
    }
    assert.deepEqual(batches, [1000], 'one batch of 1,000');
    assert.equal(single, 0, 'no release one by one');
    const rows = await store.list();
    assert.equal(rows.filter((r) => names.includes(r.name) && r.holder !== null).length, 0, 'every lease is free');
  });

  void it('a batch release in reverse name order races a batch claim of the same rows: no deadlock (both lock in name order)', async () => {
    // A follower's busy claim locks each row to register as its waiter, in name order
    // (migration 6); release_many must lock in the same order whatever order it is sent, or the
    // two statements wait on each other until PostgreSQL aborts one (40P01, after deadlock_timeout).
    const store = t.store as PostgresStore;
    const names = Array.from({ length: 40 }, (_, i) => `order-${String(i).padStart(2, '0')}`);
    for (let round = 0; round < 10; round++) {
      const held = await store.claim(names.map((name) => ({ name, holder: 'A', ttlMs: 30_000, expect: null, nextNonce: `a${round}-${name}` })));
      assert.ok(held.every((h) => h.outcome === 'acquired'), `round ${round}: A holds every lease`);
      const [released, claimed] = await Promise.all([
        store.releaseMany([...names].reverse().map((name) => ({ name, holder: 'A', expect: [`a${round}-${name}`] }))),
        store.claim(names.map((name) => ({ name, holder: 'B', ttlMs: 30_000, expect: null, nextNonce: `b${round}-${name}`, handoff: [] }))),
      ]);
      assert.ok(released.every((r) => r), `round ${round}: every release landed`);
      assert.equal(claimed.length, names.length);
      // Whatever B got (busy before the release, acquired after, or handed the term), free the rows for the next round.
      for (const c of claimed) if (c.outcome === 'acquired') await store.release({ name: c.name, holder: 'B', expect: [c.nonce ?? `b${round}-${c.name}`] });
      for (const name of names) {
        const [row] = await store.list({ name });
        if (row?.holder !== null && row?.holder !== undefined) await store.revoke(name, 'test: next round');
      }
    }
  });

  void it('a schema still at version 6 (the process was upgraded before migrate): releases fall back to one by one', async () => {
    const store = t.store as PostgresStore;
    const got = await store.claim([{ name: 'old-1', holder: 'h', ttlMs: 30_000, expect: null, nextNonce: 'o1' }, { name: 'old-2', holder: 'h', ttlMs: 30_000, expect: null, nextNonce: 'o2' }]);
    assert.ok(got.every((g) => g.outcome === 'acquired'));
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    try {
      await c.query(`ALTER FUNCTION "${store.schema}".release_many(text[], text[], text[]) RENAME TO release_many_hidden`);
      // release() of version 7 calls release_many: put version 6's behaviour back with the same body, one row.
      await c.query(`ALTER FUNCTION "${store.schema}".release(text, text, text[]) RENAME TO release_v7`);
      await c.query(`CREATE FUNCTION "${store.schema}".release(p_name text, p_holder text, p_expect text[]) RETURNS boolean LANGUAGE sql AS
        $$ SELECT coalesce((SELECT m.released FROM "${store.schema}".release_many_hidden(ARRAY[p_name], ARRAY[p_holder], ARRAY[array_to_string(p_expect, ',')]) AS m), false) $$`);
      assert.deepEqual(await store.releaseMany([{ name: 'old-1', holder: 'h', expect: ['o1'] }, { name: 'old-2', holder: 'h', expect: ['o2'] }]), [true, true]);
      assert.equal((await store.list({ name: 'old-1' }))[0]?.holder, null);
    } finally {
      await c.end();
    }
  });
});
