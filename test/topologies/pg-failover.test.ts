/**
 * PostgreSQL asynchronous failover (scripts/services/pg-replicas.mjs: a primary and a streaming
 * standby on loopback): the standby misses the primary's last writes, the primary crashes, the
 * standby is promoted. Tokens issued after the promotion must be larger than every token the
 * old primary issued, lost writes included: a token is never issued twice.
 *
 * Ports: LEASEHOLD_TEST_PG_REPLICA_PORT (default 24432; the standby on the next port).
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { openFleet } from '../../src/fleet/open.js';
import { pgReplicaSkip, startPgReplicas, type PgReplicas as Replicas } from './shared.js';

const skip = pgReplicaSkip();

const replicas = (): Promise<Replicas> => startPgReplicas();

/** Holds `agent/<id>` for a minute and registers it, so placements can land on it. */
async function liveAgent(store: PostgresStore, id: string): Promise<void> {
  const [r] = await store.claim([{ name: `agent/${id}`, holder: `agent-${id}`, ttlMs: 60_000, expect: null, nextNonce: `n${id}` }]);
  assert.equal(r!.outcome, 'acquired');
  await (await openFleet(store)).port.registerAgent(id, {});
}

/** Places `n` fresh resources and returns their generations. */
async function placeMany(store: PostgresStore, prefix: string, n: number): Promise<bigint[]> {
  const fleet = await openFleet(store);
  const out: bigint[] = [];
  for (let i = 0; i < n; i++) out.push((await fleet.place(`${prefix}-${i}`)).generation);
  return out;
}

async function cycle(store: LeaseStore, name: string, n: number): Promise<bigint[]> {
  const tokens: bigint[] = [];
  for (let i = 0; i < n; i++) {
    const holder = `h${i}-${Math.random().toString(36).slice(2, 6)}`;
    const nonce = `n${i}${Math.random().toString(36).slice(2, 8)}`;
    const [r] = await store.claim([{ name, holder, ttlMs: 60_000, expect: null, nextNonce: nonce }]);
    assert.equal(r!.outcome, 'acquired');
    tokens.push((r as { token: bigint }).token);
    assert.equal(await store.release({ name, holder, expect: [nonce] }), true);
  }
  return tokens;
}

void describe('PostgreSQL async failover: tokens never repeat', { skip }, () => {
  let r: Replicas | undefined;
  after(() => r?.stop());

  void it('a promoted standby that missed writes issues tokens above every one the old primary issued', async (t) => {
    r = await replicas();
    const schema = `lh_fo_${Math.random().toString(36).slice(2, 8)}`;
    const primary = await PostgresStore.create({ url: r.primaryUrl, schema });
    await primary.migrate();
    const seenByStandby = await cycle(primary, 'job', 3);
    await liveAgent(primary, 'a1');
    const gensSeen = await placeMany(primary, 'seen', 2);
    await cycle(primary, 'other', 2);
    // Let the standby replay all of that, then cut it off: what follows it never receives.
    const standbyWait = await PostgresStore.create({ url: r.standbyUrl, schema });
    for (let i = 0; i < 100; i++) {
      const s = await standbyWait.list({ name: 'other' }).catch(() => []);
      if (s[0]?.token === 2n + (seenByStandby[0]! - 1n)) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    await standbyWait.close();
    r.stopStandby();
    const lost = await cycle(primary, 'job', 4);
    // More than the 32 values a sequence logs ahead, so the standby's copy of it is behind too.
    const gensLost = await placeMany(primary, 'lost', 40);
    await cycle(primary, 'fresh', 2);
    await primary.close();
    r.stopPrimary();
    r.startStandby();
    r.promote();

    const promoted = await PostgresStore.create({ url: r.standbyUrl, schema });
    try {
      const after = await cycle(promoted, 'job', 3);
      const fresh = await cycle(promoted, 'fresh', 1);
      const issuedBefore = [...seenByStandby, ...lost];
      t.diagnostic(`old primary issued ${issuedBefore.join(', ')} (the standby saw ${seenByStandby.join(', ')}); promoted standby issued ${after.join(', ')}; fresh ${fresh.join(', ')}`);
      const max = issuedBefore.reduce((a, b) => (a > b ? a : b));
      for (const tok of after) assert.ok(tok > max, `token ${tok} issued after the failover is not above ${max}, issued before it`);
      assert.ok(fresh[0]! > 2n, `a name whose writes were lost got token ${fresh[0]}, which the old primary had issued`);
      assert.deepEqual([...after].sort((a, b) => (a < b ? -1 : 1)), after, 'tokens increase');
      // The fleet's generations are fencing tokens too: the same rule across the promotion.
      const gensAfter = await placeMany(promoted, 'after', 2);
      t.diagnostic(`fleet generations: old primary ${[...gensSeen, ...gensLost].join(', ')}; promoted standby ${gensAfter.join(', ')}`);
      const maxGen = [...gensSeen, ...gensLost].reduce((a, b) => (a > b ? a : b));
      for (const g of gensAfter) assert.ok(g > maxGen, `generation ${g} issued after the failover is not above ${maxGen}, issued before it`);
    } finally {
      await promoted.close();
    }
  });
});
