/**
 * Migration 13's set-based `release_many` (src/backends/postgres/sql/013-release-many-set.ts)
 * answers a batch as migration 7's row-by-row function, kept as `release_many_rows`: every case a
 * release meets, side by side on two schemas set up alike, one released by the old function, the
 * other by the new one. Answers, lease rows and history must be equal.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { PostgresStore } from '../../src/backends/postgres/store.js';
import { channelFor } from '../../src/backends/postgres/schema.js';
import { newNonce } from '../../src/core/identity.js';
import { makeTestStore, selectedStores, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

const TTL_MS = 60_000;
const HOLDER = 'release-holder';
const CASES = ['released', 'handed', 'waiter-gone', 'withdrawn', 'stale-nonce', 'other-holder', 'expired', 'never-claimed'] as const;
const PAD = 300;

async function sql(text: string, values: unknown[] = []): Promise<Record<string, unknown>[]> {
  const c = new pg.Client({ connectionString: TEST_PG_URL });
  await c.connect();
  try {
    return (await c.query(text, values)).rows as Record<string, unknown>[];
  } finally {
    await c.end();
  }
}

const schemaOf = (t: TestStore): string => new URL(t.url).searchParams.get('schema')!;

/** Sets up each case's row; returns the requests, in an order that is not the name order. */
async function arrange(t: TestStore): Promise<{ names: string[]; holders: string[]; expects: string[] }> {
  const store = t.store as PostgresStore;
  const s = schemaOf(t);
  const req = new Map<string, { holder: string; expect: string }>();
  const claim = async (name: string, holder: string): Promise<string> => {
    const nonce = newNonce();
    const [r] = await store.claim([{ name, holder, ttlMs: TTL_MS, expect: null, nextNonce: nonce }]);
    assert.equal(r!.outcome, 'acquired');
    return nonce;
  };
  for (const c of CASES) {
    if (c === 'never-claimed') {
      req.set(c, { holder: HOLDER, expect: newNonce() });
    } else if (c === 'withdrawn' || c === 'other-holder') {
      await claim(c, 'someone-else');
      req.set(c, { holder: HOLDER, expect: newNonce() });
    } else {
      req.set(c, { holder: HOLDER, expect: await claim(c, HOLDER) });
    }
  }
  const waiter = `UPDATE "${s}".leases SET waiter = $2, waiter_nonce = $3, waiter_ttl_ms = ${TTL_MS}, waiter_until = now() + $4 * interval '1 second' WHERE name = $1`;
  await sql(waiter, ['handed', 'waiter-x', 'wn-handed', 60]);
  await sql(waiter, ['waiter-gone', 'waiter-x', 'wn-gone', -1]);
  // We are the registered waiter of a lease someone else holds: our release withdraws it.
  await sql(waiter, ['withdrawn', HOLDER, req.get('withdrawn')!.expect, 60]);
  await sql(`UPDATE "${s}".leases SET expires_at = now() - interval '1 second' WHERE name = 'expired'`);
  req.set('stale-nonce', { holder: HOLDER, expect: newNonce() });
  const pads = Array.from({ length: PAD }, (_, i) => `pad-${String(i).padStart(4, '0')}`);
  const nonces = pads.map(() => newNonce());
  await store.claim(pads.map((name, i) => ({ name, holder: HOLDER, ttlMs: TTL_MS, expect: null, nextNonce: nonces[i]! })));
  pads.forEach((n, i) => req.set(n, { holder: HOLDER, expect: `${newNonce()},${nonces[i]!}` }));
  const names = [...req.keys()].reverse();
  return { names, holders: names.map((n) => req.get(n)!.holder), expects: names.map((n) => req.get(n)!.expect) };
}

async function rows(t: TestStore): Promise<unknown> {
  const s = schemaOf(t);
  const leases = await sql(
    // Nonces are random per schema but the waiters' (wn-*): compare whether there is one.
    `SELECT name, holder, CASE WHEN nonce LIKE 'wn-%' THEN nonce ELSE (nonce IS NULL)::text END AS nonce, ended_by, token::text, expires_at > now() AS live, expires_at = renewed_at AS fresh,
            waiter, CASE WHEN waiter_nonce LIKE 'wn-%' THEN waiter_nonce ELSE (waiter_nonce IS NULL)::text END AS waiter_nonce, waiter_until IS NULL AS no_waiter_until FROM "${s}".leases ORDER BY name`,
  );
  const history = await sql(`SELECT name, event, holder, previous_holder, token::text, detail FROM "${s}".history ORDER BY id`);
  return { leases, history };
}

void describe('postgres release_many, set-based', { skip: selectedStores().includes('postgres') ? false : 'postgres not selected (LEASEHOLD_TEST_STORES)' }, () => {
  let old: TestStore;
  let set: TestStore;
  before(async () => {
    old = await makeTestStore('postgres');
    set = await makeTestStore('postgres');
  });
  after(async () => {
    await old.cleanup();
    await set.cleanup();
  });

  void it('answers every release case and writes the same rows and history as the row-by-row function', async () => {
    const a = await arrange(old);
    const b = await arrange(set);
    assert.deepEqual(b.names, a.names);
    const call = (t: TestStore, fn: string, r: typeof a): Promise<Record<string, unknown>[]> =>
      sql(`SELECT ord::int, released FROM "${schemaOf(t)}".${fn}($1::text[], $2::text[], $3::text[]) ORDER BY ord`, [r.names, r.holders, r.expects]);
    const listen = new pg.Client({ connectionString: TEST_PG_URL });
    await listen.connect();
    try {
      const handed = new Promise<string>((resolve) => listen.on('notification', (n) => n.payload === 'handed' && resolve(n.payload)));
      await listen.query(`LISTEN "${channelFor(schemaOf(set))}"`);
      const byOld = await call(old, 'release_many_rows', a);
      const bySet = await call(set, 'release_many', b);
      assert.deepEqual(bySet, byOld);
      const released = new Map(a.names.map((n, i) => [n, byOld[i]!['released']]));
      assert.deepEqual(
        CASES.map((c) => [c, released.get(c)]),
        CASES.map((c) => [c, ['released', 'handed', 'waiter-gone', 'expired'].includes(c)]),
      );
      assert.ok(a.names.filter((n) => n.startsWith('pad-')).every((n) => released.get(n) === true), 'every padding lease released');
      assert.deepEqual(await rows(set), await rows(old));
      // The handed-over row keeps a holder, so only the function announces it. A lost
      // notification would leave this wait to the test runner's timeout.
      assert.equal(await handed, 'handed');
    } finally {
      await listen.end();
    }
  });

  void it('answers a batch naming one lease twice as the row-by-row function does', async () => {
    const store = set.store as PostgresStore;
    const nonce = newNonce();
    await store.claim([{ name: 'twice', holder: HOLDER, ttlMs: TTL_MS, expect: null, nextNonce: nonce }]);
    const r = await store.releaseMany([
      { name: 'twice', holder: HOLDER, expect: [nonce] },
      { name: 'twice', holder: HOLDER, expect: [nonce] },
    ]);
    assert.deepEqual(r, [true, false]);
  });
});
