/**
 * One-write handover on PostgreSQL (src/backends/postgres/handover.ts): a waiting follower's
 * 'busy' claim registers it, the holder's release hands it the term in the same statement, and
 * the follower accepts the term with its next claim. Until then the handed term is an offer that
 * lapses a third of the waiter's TTL after the release (migration 17: a waiter that died between
 * its registration and the release keeps nobody out for a whole TTL); the acceptance gives it the
 * waiter's own TTL, and that write is the one migration 6 had saved.
 *
 * "No write" is observed directly: the store under test runs on a pool that wraps every
 * statement in its own transaction on one connection and reads `pg_current_xact_id_if_assigned()`
 * before committing. PostgreSQL assigns a transaction id at a transaction's first write (a row
 * insert, update or lock), and a commit without one writes and flushes no WAL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { PostgresStore, type PgPoolLike, type PgResultLike } from '../../src/backends/postgres/store.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { newNonce } from '../../src/core/identity.js';
import { FencedError, SchemaError } from '../../src/core/errors.js';
import { migrations, SCHEMA_VERSION } from '../../src/backends/postgres/schema.js';
import { fencedTransaction } from '../../src/fence/index.js';
import type { ClaimResult } from '../../src/core/port.js';
import { makeTestStore, selectedStores, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Observed {
  text: string;
  xid: string | null;
  synchronousCommit: string;
}

/**
 * A pool whose every query is one transaction on one connection, observed before its commit;
 * `connect()` (LISTEN) goes to an ordinary pool.
 */
async function observingPool(): Promise<{ pool: PgPoolLike; seen: Observed[]; end(): Promise<void> }> {
  const client = new pg.Client({ connectionString: TEST_PG_URL });
  await client.connect();
  const listen = new pg.Pool({ connectionString: TEST_PG_URL, max: 2 });
  const seen: Observed[] = [];
  let tail: Promise<unknown> = Promise.resolve();
  const run = async (text: string, values?: unknown[]): Promise<PgResultLike> => {
    await client.query('BEGIN');
    try {
      const r = await client.query(text, values);
      const x = await client.query(`SELECT pg_current_xact_id_if_assigned()::text AS xid, current_setting('synchronous_commit') AS sc`);
      seen.push({ text, xid: (x.rows[0]!['xid'] as string | null) ?? null, synchronousCommit: x.rows[0]!['sc'] as string });
      await client.query('COMMIT');
      return r;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    }
  };
  const pool = {
    query: (text: string, values?: unknown[]) => {
      const p = tail.then(() => run(text, values));
      tail = p.catch(() => {});
      return p;
    },
    connect: () => listen.connect(),
  } as unknown as PgPoolLike;
  return {
    pool,
    seen,
    async end() {
      await client.end();
      await listen.end();
    },
  };
}

function granted(r: ClaimResult | undefined): Extract<ClaimResult, { outcome: 'acquired' | 'renewed' }> {
  assert.ok(r !== undefined && (r.outcome === 'acquired' || r.outcome === 'renewed'), `expected a granted claim, got ${r?.outcome}`);
  return r;
}

// One contender's claim calls claim_one (schema 20 on); a batch's, claim.
const claimsOf = (seen: Observed[]): Observed[] => seen.filter((o) => /\.claim(_one)?\(/.test(o.text));

void describe('postgres: one-write handover', { skip: !selectedStores().includes('postgres') }, () => {
  let t: TestStore;
  let schema: string;
  let obs: Awaited<ReturnType<typeof observingPool>>;
  let store: PostgresStore;
  let admin: pg.Client;

  before(async () => {
    t = await makeTestStore('postgres');
    schema = (t.store as PostgresStore).schema;
    obs = await observingPool();
    store = await PostgresStore.create({ pool: obs.pool, schema });
    admin = new pg.Client({ connectionString: TEST_PG_URL });
    await admin.connect();
  });
  after(async () => {
    await store?.close();
    await obs?.end();
    await admin?.end();
    await t?.cleanup();
  });

  const waiterOf = async (name: string): Promise<string | null> =>
    ((await admin.query(`SELECT waiter FROM "${schema}".leases WHERE name = $1`, [name])).rows[0]?.['waiter'] as string | null) ?? null;
  const contend = async (s: PostgresStore, name: string, holder: string, ttlMs: number, handoff?: string[]): Promise<ClaimResult & { sent: string }> => {
    const sent = newNonce();
    const [r] = await s.claim([{ name, holder, ttlMs, expect: null, nextNonce: sent, ...(handoff === undefined ? {} : { handoff }) }]);
    return { ...r!, sent };
  };

  void it('the release hands the term to the registered waiter; its claim accepts it (a write: the waiter’s own TTL from now, under the claim’s own nonce)', async () => {
    const name = uniq('hand');
    const a = await contend(t.store as PostgresStore, name, 'A', 30_000);
    const tokenA = granted(a).token;
    const b = await contend(store, name, 'B', 20_000, []);
    assert.equal(b.outcome, 'busy');
    assert.equal(await waiterOf(name), 'B', "a waiting contender's busy claim registers it");

    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    const [row] = await t.store.list({ name });
    assert.equal(row?.holder, 'B', 'the release handed the term to the waiter');
    assert.ok(row!.token > tokenA, `the handed term's token ${row!.token} is above ${tokenA}`);
    const offered = row!.expiresAtMs! - row!.storeNowMs;
    assert.ok(offered > 0 && offered <= 20_000 / 3, `an offer of a third of B's TTL until B accepts it, not ${Math.round(offered)} ms`);
    assert.deepEqual(
      (await t.store.history({ name })).map((h) => [h.event, h.holder ?? h.previousHolder, h.token]),
      [
        ['acquired', 'A', tokenA],
        ['released', 'A', tokenA],
        ['acquired', 'B', row!.token],
      ],
    );

    const before = obs.seen.length;
    const accepting = await contend(store, name, 'B', 20_000, [b.sent]);
    const c = granted(accepting);
    assert.equal(c.outcome, 'acquired');
    assert.equal(c.nonce, undefined, 'held under the nonce this claim sent: the acceptance swapped it for the registered one');
    assert.equal(c.token, row!.token);
    assert.ok(c.expiresAtMs - c.storeNowMs > 20_000 / 3 && c.expiresAtMs - c.storeNowMs <= 20_000, 'accepted: the waiter’s own TTL, from its claim');
    const confirm = claimsOf(obs.seen.slice(before));
    assert.equal(confirm.length, 1);
    assert.notEqual(confirm[0]!.xid, null, 'the accepting claim wrote: the acceptance is a write');

    // B holds it as any acquirer would: it renews with the nonce its accepting claim sent, and A is out.
    const [renewed] = await store.claim([{ name, holder: 'B', ttlMs: 20_000, expect: [accepting.sent], nextNonce: newNonce() }]);
    assert.equal(renewed?.outcome, 'renewed');
    const [stale] = await t.store.claim([{ name, holder: 'A', ttlMs: 30_000, expect: [a.sent], nextNonce: newNonce() }]);
    assert.equal(stale?.outcome, 'lost');
    if (stale?.outcome === 'lost') assert.equal(stale.reason, 'superseded');
    assert.equal(await waiterOf(name), null, 'the handover used up the registration');
  });

  void it('a release that hands over commits durably (it issues a token); a plain release does not wait for the flush', async () => {
    const name = uniq('durable');
    const a = await contend(store, name, 'A', 30_000);
    await contend(t.store as PostgresStore, name, 'B', 30_000, []);
    const before = obs.seen.length;
    assert.equal(await store.release({ name, holder: 'A', expect: [a.sent] }), true);
    const [handing] = obs.seen.slice(before);
    assert.notEqual(handing!.xid, null);
    assert.equal(handing!.synchronousCommit, 'on', 'a handover must be flushed before its token is used');

    const plain = uniq('plain');
    const p = await contend(store, plain, 'A', 30_000);
    const before2 = obs.seen.length;
    assert.equal(await store.release({ name: plain, holder: 'A', expect: [p.sent] }), true);
    assert.equal(obs.seen[before2]!.synchronousCommit, 'off');
  });

  void it('a registration that has lapsed (two TTLs with no re-check) is not handed the term', async () => {
    const name = uniq('lapsed');
    const a = await contend(t.store as PostgresStore, name, 'A', 30_000);
    assert.equal((await contend(store, name, 'B', 150, [])).outcome, 'busy');
    assert.equal(await waiterOf(name), 'B');
    await sleep(450);
    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    const [row] = await t.store.list({ name });
    assert.equal(row?.holder, null, 'released, not handed to a waiter that stopped checking');
    assert.equal((await t.store.history({ name })).at(-1)?.event, 'released');
  });

  void it('a contender that will not wait (no handoff) does not register', async () => {
    const name = uniq('nowait');
    const a = await contend(t.store as PostgresStore, name, 'A', 30_000);
    assert.equal((await contend(store, name, 'B', 30_000)).outcome, 'busy');
    assert.equal(await waiterOf(name), null);
    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    assert.equal((await t.store.list({ name }))[0]?.holder, null);
  });

  void it("a waiter's release of its registered nonce withdraws it; a holder never hands the term to itself", async () => {
    const name = uniq('withdraw');
    const a = await contend(t.store as PostgresStore, name, 'A', 30_000);
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

  void it("the release is one call of the schema's release function: called directly it hands over and notifies, a plain release notifies through the trigger", async () => {
    // The store sends `SELECT schema.release(...)` (PostgreSQL keeps a function's plans for the
    // session; a statement sent as text is planned on every call): nothing else is needed.
    const listener = new pg.Client({ connectionString: TEST_PG_URL });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (m) => heard.push(m.payload ?? ''));
    await listener.query(`LISTEN "leasehold_freed_${schema}"`);
    const waitHeard = async (name: string): Promise<void> => {
      for (let i = 0; i < 100 && !heard.includes(name); i++) await sleep(20);
      assert.ok(heard.includes(name), `a notification for ${name}`);
    };
    const release = async (name: string, holder: string, expect: string[]): Promise<boolean> =>
      (await admin.query(`SELECT "${schema}".release($1, $2, $3::text[]) AS released`, [name, holder, expect])).rows[0]!['released'] as boolean;
    try {
      const before = obs.seen.length;
      const mine = uniq('sent');
      const m = await contend(store, mine, 'A', 30_000);
      assert.equal(await store.release({ name: mine, holder: 'A', expect: [m.sent] }), true);
      const sent = obs.seen.slice(before).filter((o) => !/\.claim(_one)?\(/.test(o.text));
      assert.equal(sent.length, 1);
      assert.match(sent[0]!.text, new RegExp(`^SELECT "${schema}"\\.release\\(\\$1, \\$2, \\$3::text\\[\\]\\)`), 'the release is one function call');

      const name = uniq('direct');
      const a = await contend(t.store as PostgresStore, name, 'A', 30_000);
      const b = await contend(store, name, 'B', 30_000, []);
      assert.equal(await release(name, 'A', ['not-ours']), false, 'another nonce releases nothing');
      assert.equal(await release(name, 'A', [a.sent]), true);
      const [row] = await t.store.list({ name });
      assert.equal(row?.holder, 'B', 'handed over');
      await waitHeard(name);
      assert.deepEqual((await t.store.history({ name })).map((h) => h.event), ['acquired', 'released', 'acquired']);

      const plain = uniq('direct-plain');
      const p = await contend(t.store as PostgresStore, plain, 'A', 30_000);
      assert.equal(await release(plain, 'A', [p.sent]), true);
      assert.equal((await t.store.list({ name: plain }))[0]?.holder, null);
      await waitHeard(plain);
      void b;

      // Neither the release nor the follower's confirming claim plans on every call: no
      // plan_cache_mode of their own (that stays on claim_write, which locks and writes batches).
      const config = async (fn: string): Promise<unknown> =>
        (await admin.query(`SELECT proconfig FROM pg_proc WHERE oid = $1::regprocedure`, [fn])).rows[0]!['proconfig'];
      assert.equal(await config(`"${schema}".release(text, text, text[])`), null);
      assert.equal(await config(`"${schema}".claim(text[], text[], text[], text[], float8[], boolean[], text[])`), null);
      assert.equal(await config(`"${schema}".claim_one(text, text, text, float8, text)`), null);
      assert.deepEqual(await config(`"${schema}".claim_write(text[], text[], text[], text[], float8[], boolean[], text[], text[], text[])`), ['plan_cache_mode=force_custom_plan']);
    } finally {
      await listener.end();
    }
  });

  void it('a waiter withdraws from a term that was revoked (the row has no holder), so the next holder does not hand the term to it', async () => {
    const name = uniq('withdraw-revoked');
    await contend(t.store as PostgresStore, name, 'A', 30_000);
    const b = await contend(store, name, 'B', 30_000, []);
    assert.equal(await waiterOf(name), 'B');
    assert.equal((await t.store.revoke(name, 'test')).revoked, true);
    assert.equal(await store.release({ name, holder: 'B', expect: [b.sent] }), false, 'B held nothing to release');
    assert.equal(await waiterOf(name), null, 'withdrawn from the free row');
    const c = await contend(t.store as PostgresStore, name, 'C', 30_000);
    assert.equal(c.outcome, 'acquired');
    assert.equal(await t.store.release({ name, holder: 'C', expect: [c.sent] }), true);
    assert.equal((await t.store.list({ name }))[0]?.holder, null, 'released, not handed to the withdrawn B');
  });

  void it('a handed term that was revoked before the waiter confirmed it is not confirmed', async () => {
    const name = uniq('revoked');
    const a = await contend(t.store as PostgresStore, name, 'A', 30_000);
    const b = await contend(store, name, 'B', 30_000, []);
    assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
    const [offer] = await t.store.list({ name });
    assert.equal(offer?.holder, 'B', 'offered to B');
    const offerToken = offer!.token;
    assert.equal((await t.store.revoke(name, 'test')).revoked, true);
    const c = await contend(store, name, 'B', 30_000, [b.sent]);
    // An accepted offer and a new acquisition both answer under the nonce the claim sent: the
    // token tells them apart (the revoked offer's is not taken again).
    const fresh = granted(c);
    assert.equal(fresh.outcome, 'acquired');
    assert.ok(fresh.token > offerToken, `a new acquisition (token ${fresh.token}), not the revoked offer (token ${offerToken})`);
    assert.deepEqual(
      (await t.store.history({ name })).slice(-2).map((h) => [h.event, h.token]),
      [['revoked', offerToken], ['acquired', fresh.token]],
    );
  });

  void it('the engine: the follower takes a released lease with one accepting claim, a larger token, a deadline within the store expiry, and the old holder is fenced', async () => {
    const name = uniq('engine');
    const a = new Leasehold({ store: await t.open() });
    const b = new Leasehold({ store });
    const fences = `${schema}.fences`;
    try {
      const la = a.lease(name, { ttl: 30_000 });
      const lb = b.lease(name, { ttl: 20_000 });
      const first = await la.acquire();
      await fencedTransaction(admin, { resource: name, token: first.token, table: fences }, async () => {});
      const following = lb.acquire({ wait: '20s' });
      await sleep(300);
      const before = obs.seen.length;
      await la.release();
      const second = await following;
      const remaining = lb.msUntilDeadline!;
      const [row] = await t.store.list({ name });
      assert.equal(row?.holder, second.holder);
      assert.ok(second.token > first.token, `${second.token} > ${first.token}`);
      assert.ok(remaining <= row!.expiresAtMs! - row!.storeNowMs, `the local deadline (${remaining}ms away) is within the store's expiry (${row!.expiresAtMs! - row!.storeNowMs}ms away)`);
      const confirms = claimsOf(obs.seen.slice(before));
      assert.ok(confirms.length >= 1);
      assert.ok(remaining > 20_000 / 3, `the term runs the follower's own TTL once accepted, not the offer's third (${remaining}ms left)`);

      // The accepted term writes through the same-database fence (its nonce is the accepting claim's)...
      await fencedTransaction(admin, { resource: name, term: second, table: fences }, async () => {});
      // ...and the old holder's token is refused.
      await assert.rejects(fencedTransaction(admin, { resource: name, token: first.token, table: fences }, async () => {}), FencedError);
      // It renews as any holder does.
      assert.equal(await lb.confirm(), second.token);
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
      await sleep(300);
      assert.notEqual(await waiterOf(name), null, 'the follower registered');
      await lb.close();
      assert.equal(await waiterOf(name), null, 'close() withdrew it before resolving');
      await following;
      await la.release();
      const [row] = await t.store.list({ name });
      assert.equal(row?.holder, null, 'released, not handed to the stopped follower');

      // A follower whose wait ran out withdraws too.
      const lc = a.lease(name, { ttl: 30_000 });
      await lc.acquire();
      const lb2 = b.lease(name, { ttl: 30_000 });
      await assert.rejects(lb2.acquire({ wait: 400 }));
      assert.equal(await waiterOf(name), null);
      await lc.release();
      assert.equal((await t.store.list({ name }))[0]?.holder, null);
    } finally {
      await a.close();
      await b.close();
    }
  });

  void it('a schema at version 5 is refused with the SchemaError that says to migrate; migrating it under a live holder of the previous version keeps its term', async () => {
    const old = `lh_t_v5_${randomBytes(4).toString('hex')}`;
    const q = `"${old}"`;
    await admin.query(`CREATE SCHEMA ${q}`);
    try {
      for (const m of migrations(old).slice(0, 5)) await admin.query(m);
      await admin.query(`CREATE TABLE ${q}.schema_version (version integer NOT NULL); INSERT INTO ${q}.schema_version VALUES (5)`);
      const s5 = await PostgresStore.create({ url: `${TEST_PG_URL}${TEST_PG_URL.includes('?') ? '&' : '?'}schema=${old}` });
      try {
        assert.deepEqual(await s5.schemaStatus(), { current: 5, expected: SCHEMA_VERSION });
        await assert.rejects(s5.claim([{ name: 'n', holder: 'H', ttlMs: 10_000, expect: null, nextNonce: newNonce() }]), (err: unknown) => err instanceof SchemaError && /leasehold migrate/.test(err.message));

        // A holder of the previous version: its claim function (six arguments) and statements.
        const oldClaim = `SELECT * FROM ${q}.claim($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::boolean[])`;
        const got = await admin.query(oldClaim, [['live'], ['OLD'], [null], ['o1'], [30_000], [true]]);
        assert.equal(got.rows[0]!['outcome'], 'acquired');
        assert.equal((await s5.migrate()).current, SCHEMA_VERSION);
        const renewed = await admin.query(oldClaim, [['live'], ['OLD'], ['o1'], ['o2'], [30_000], [false]]);
        assert.equal(renewed.rows[0]!['outcome'], 'renewed', 'the previous version still renews after the migration');
        const [r] = await s5.claim([{ name: 'live', holder: 'OLD', ttlMs: 30_000, expect: ['o2'], nextNonce: 'o3' }]);
        assert.equal(r?.outcome, 'renewed');
        assert.equal(await s5.release({ name: 'live', holder: 'OLD', expect: ['o3'] }), true);
      } finally {
        await s5.close();
      }
    } finally {
      await admin.query(`DROP SCHEMA ${q} CASCADE`);
    }
  });

  void it('a schema still at version 19 (the process was upgraded before migrate): a contender’s claim, without claim_one, goes to claim, and a handover completes', async () => {
    const old = `lh_t_v19_${randomBytes(4).toString('hex')}`;
    const q = `"${old}"`;
    await admin.query(`CREATE SCHEMA ${q}`);
    try {
      for (const m of migrations(old).slice(0, 19)) await admin.query(m);
      await admin.query(`CREATE TABLE ${q}.schema_version (version integer NOT NULL); INSERT INTO ${q}.schema_version VALUES (19)`);
      const url = `${TEST_PG_URL}${TEST_PG_URL.includes('?') ? '&' : '?'}schema=${old}`;
      const [s1, s2] = [await PostgresStore.create({ url }), await PostgresStore.create({ url })];
      try {
        const name = uniq('v19');
        const a = await contend(s1, name, 'A', 30_000);
        const tokenA = granted(a).token;
        const b = await contend(s2, name, 'B', 20_000, []);
        assert.equal(b.outcome, 'busy');
        assert.ok(b.outcome === 'busy' && b.grantedAtMs !== undefined, 'a busy answer still says when the holding term began');
        assert.equal(await s1.release({ name, holder: 'A', expect: [a.sent] }), true);
        const accepted = granted(await contend(s2, name, 'B', 20_000, [b.sent]));
        assert.ok(accepted.token > tokenA);
        assert.ok(accepted.expiresAtMs - accepted.storeNowMs > 20_000 / 3, 'accepted: the waiter’s own TTL');
        // Migrated under the running process: it goes on claiming.
        assert.equal((await s1.migrate()).current, SCHEMA_VERSION);
        assert.equal(granted(await contend(s1, uniq('v19-after'), 'A', 30_000)).outcome, 'acquired');
      } finally {
        await s1.close();
        await s2.close();
      }
    } finally {
      await admin.query(`DROP SCHEMA ${q} CASCADE`);
    }
  });
});
