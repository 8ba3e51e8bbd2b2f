/**
 * PostgreSQL asynchronous failover (scripts/services/pg-replicas.mjs: a primary and a streaming
 * standby on loopback): the standby misses the primary's last writes, the primary crashes, the
 * standby is promoted. Tokens issued after the promotion must be larger than every token the
 * old primary issued, lost writes included: a token is never issued twice.
 *
 * Ports: LEASEHOLD_TEST_PG_REPLICA_PORT (default 24432; the standby on the next port).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { after, describe, it } from 'node:test';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import type { LeaseStore } from '../../src/backends/store.js';

interface Replicas {
  primaryUrl: string;
  standbyUrl: string;
  stopPrimary(): boolean;
  stopStandby(): boolean;
  startStandby(): void;
  promote(): void;
  stop(): void;
}

const PORT = Number(process.env['LEASEHOLD_TEST_PG_REPLICA_PORT'] ?? 24432);
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'postgres').split(',').includes('postgres');
const hasServer = existsSync('/usr/lib/postgresql');
const skip = !wanted ? 'postgres not selected' : !hasServer ? 'no PostgreSQL server binaries' : false;

async function replicas(): Promise<Replicas> {
  const mjs = join(fileURLToPath(import.meta.url), '..', '..', '..', '..', 'scripts', 'services', 'pg-replicas.mjs');
  const mod = (await import(pathToFileURL(mjs).href)) as { startPgReplicas(o: { port: number }): Promise<Replicas> };
  return mod.startPgReplicas({ port: PORT });
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
    } finally {
      await promoted.close();
    }
  });
});
