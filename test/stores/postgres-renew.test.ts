/**
 * Migration 12's `renew` (src/backends/postgres/sql/012-renew.ts) answers a renewal batch as
 * the statement it replaces at large batches (src/backends/postgres/renew.ts): every outcome the
 * claim rule gives a renewal, side by side on two schemas set up alike, one renewed in a batch
 * under RENEW_FUNCTION_MIN (the statement), the other in a batch at it (the function).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { PostgresStore } from '../../src/backends/postgres/store.js';
import { RENEW_FUNCTION_MIN } from '../../src/backends/postgres/renew.js';
import { newNonce } from '../../src/core/identity.js';
import type { ClaimResult } from '../../src/core/port.js';
import { makeTestStore, selectedStores, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

const TTL_MS = 60_000;
const HOLDER = 'renew-holder';
const CASES = ['renewed', 'expired', 'released', 'revoked', 'superseded', 'cloned', 'never-claimed'] as const;

async function sql(text: string, values: unknown[] = []): Promise<Record<string, unknown>[]> {
  const c = new pg.Client({ connectionString: TEST_PG_URL });
  await c.connect();
  try {
    return (await c.query(text, values)).rows as Record<string, unknown>[];
  } finally {
    await c.end();
  }
}

/** Sets up each case's row; returns the nonce each request expects. */
async function arrange(t: TestStore, pad: number): Promise<{ expect: Map<string, string> }> {
  const store = t.store as PostgresStore;
  const schema = new URL(t.url).searchParams.get('schema')!;
  const expect = new Map<string, string>();
  const claim = async (name: string, holder: string): Promise<string> => {
    const nonce = newNonce();
    const [r] = await store.claim([{ name, holder, ttlMs: TTL_MS, expect: null, nextNonce: nonce }]);
    assert.equal(r!.outcome, 'acquired');
    return nonce;
  };
  for (const c of CASES) {
    if (c === 'never-claimed') {
      expect.set(c, newNonce());
      continue;
    }
    const n = await claim(c, c === 'superseded' ? 'someone-else' : HOLDER);
    expect.set(c, n);
  }
  await sql(`UPDATE "${schema}".leases SET expires_at = now() - interval '1 second' WHERE name = 'expired'`);
  assert.equal(await store.release({ name: 'released', holder: HOLDER, expect: [expect.get('released')!] }), true);
  await store.revoke('revoked', 'test');
  // Our holder id with a nonce we do not hold, on a live term: a clone renewed it first.
  expect.set('cloned', newNonce());
  const names = Array.from({ length: pad }, (_, i) => `pad-${i}`);
  const nonces = names.map(() => newNonce());
  if (pad > 0) await store.claim(names.map((name, i) => ({ name, holder: HOLDER, ttlMs: TTL_MS, expect: null, nextNonce: nonces[i]! })));
  names.forEach((n, i) => expect.set(n, nonces[i]!));
  return { expect };
}

function renewAll(store: PostgresStore, expect: Map<string, string>): Promise<ClaimResult[]> {
  return store.claim([...expect].map(([name, nonce]) => ({ name, holder: HOLDER, ttlMs: TTL_MS, expect: [nonce], nextNonce: newNonce() })));
}

/** What may be compared across two schemas: no times but whether there is one. */
const shape = (r: ClaimResult): unknown => ({
  name: r.name,
  outcome: r.outcome,
  reason: 'reason' in r ? r.reason : undefined,
  holder: r.holder,
  token: r.token,
  expires: r.expiresAtMs === null ? null : r.expiresAtMs > r.storeNowMs ? 'later' : 'now or before',
});

async function rows(t: TestStore): Promise<unknown> {
  const schema = new URL(t.url).searchParams.get('schema')!;
  const leases = await sql(
    `SELECT name, holder, nonce IS NULL AS no_nonce, ended_by, token::text, expires_at > now() AS live FROM "${schema}".leases WHERE name = ANY ($1) ORDER BY name`,
    [[...CASES]],
  );
  const history = await sql(`SELECT name, event, holder, previous_holder, token::text, detail FROM "${schema}".history WHERE name = ANY ($1) ORDER BY id`, [[...CASES]]);
  return { leases, history };
}

void describe('postgres renew function', { skip: selectedStores().includes('postgres') ? false : 'postgres not selected (LEASEHOLD_TEST_STORES)' }, () => {
  let statement: TestStore;
  let fn: TestStore;
  before(async () => {
    statement = await makeTestStore('postgres');
    fn = await makeTestStore('postgres');
  });
  after(async () => {
    await statement.cleanup();
    await fn.cleanup();
  });

  void it('answers every renewal outcome and writes the same rows as the statement it replaces', async () => {
    const a = await arrange(statement, 0);
    const b = await arrange(fn, RENEW_FUNCTION_MIN);
    const byStatement = await renewAll(statement.store as PostgresStore, a.expect);
    const byFunction = await renewAll(fn.store as PostgresStore, b.expect);
    const pads = byFunction.filter((r) => r.name.startsWith('pad-'));
    assert.equal(pads.length, RENEW_FUNCTION_MIN);
    assert.ok(pads.every((r) => r.outcome === 'renewed'), 'every padding lease renewed');
    const ours = byFunction.filter((r) => !r.name.startsWith('pad-'));
    assert.deepEqual(ours.map(shape), byStatement.map(shape));
    assert.deepEqual(
      byStatement.map((r) => [r.name, r.outcome === 'lost' ? r.reason : r.outcome]),
      CASES.map((c) => [c, c === 'never-claimed' ? 'expired' : c]),
    );
    assert.ok(ours.every((r) => r.storeNowMs > 0), 'every answer carries the store clock, also a never-claimed name');
    assert.deepEqual(await rows(fn), await rows(statement));
  });
});
