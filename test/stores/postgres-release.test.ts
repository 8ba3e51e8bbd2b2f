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

  void it('a release that matches nothing changes nothing', async () => {
    await client.query('BEGIN');
    assert.equal(await store.release({ name: 'r', holder: 'someone-else', expect: ['n1'] }), false);
    await client.query('COMMIT');
    assert.equal(await show(), 'on');
  });
});
