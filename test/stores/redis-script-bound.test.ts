import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { ConfigError } from '../../src/core/errors.js';
import { createRedisStore } from '../../src/backends/redis/index.js';
import type { ClaimRequest } from '../../src/backends/store.js';
import { TEST_REDIS_URL, deleteRedisKeys, freshRedisPrefix } from '../helpers/redis-store.js';

// Redis runs one script at a time and nothing else meanwhile: a claim batch is sent as as many
// scripts as keep each under maxScriptMs (by Redis's own clock), one after another. Proven by
// counting the scripts a real Redis was sent and checking every lease's answer; how long each
// took is the benchmark's business (bench/renewal.ts), not a timed assertion here.

const prefixes: string[] = [];
after(async () => {
  for (const p of prefixes) await deleteRedisKeys(p);
});

/** A store on its own client whose EVALSHA/EVAL calls are counted, with the leases per call. */
async function countedStore(maxScriptMs?: number) {
  const client = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 0, commandTimeout: 10_000 });
  const scripts: number[] = [];
  const flight = { now: 0, most: 0 };
  /** The n-th script call (1-based, counting every call) fails without being sent. */
  const ctl: { failScript: number | undefined } = { failScript: undefined };
  for (const m of ['evalsha', 'eval'] as const) {
    const orig = client[m].bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as unknown as Record<string, unknown>)[m] = (...a: unknown[]) => {
      scripts.push(a.length);
      if (scripts.length === ctl.failScript) return Promise.reject(new Error('test: this script never reached Redis'));
      flight.most = Math.max(flight.most, ++flight.now);
      return orig(...a).finally(() => flight.now--);
    };
  }
  const prefix = freshRedisPrefix();
  prefixes.push(prefix);
  const store = await createRedisStore({ client, prefix, ...(maxScriptMs === undefined ? {} : { maxScriptMs }) });
  return {
    store,
    scripts,
    flight,
    set failScript(n: number | undefined) {
      ctl.failScript = n;
    },
    async close() {
      await store.close();
      client.disconnect();
    },
  };
}

const names = (n: number): string[] => Array.from({ length: n }, (_, i) => `bound-${i}`);

void describe('Redis: a claim batch never runs as one long script', () => {
  void it('with maxScriptMs 1, 3000 acquisitions and their renewals go as several scripts, every lease answered in order', async () => {
    const s = await countedStore(1);
    try {
      const all = names(3000);
      const acquire: ClaimRequest[] = all.map((name, i) => ({ name, holder: 'h', expect: null, nextNonce: `a${i}`, ttlMs: 60_000 }));
      const got = await s.store.claim(acquire);
      assert.equal(got.length, 3000);
      got.forEach((r, i) => {
        assert.equal(r.name, all[i]);
        assert.equal(r.outcome, 'acquired');
      });
      const acquireScripts = s.scripts.length;
      assert.ok(acquireScripts > 1, `3000 acquisitions went as ${acquireScripts} script(s)`);

      const renew: ClaimRequest[] = all.map((name, i) => ({ name, holder: 'h', expect: [`a${i}`], nextNonce: `b${i}`, ttlMs: 60_000 }));
      const renewed = await s.store.claim(renew);
      renewed.forEach((r, i) => {
        assert.equal(r.name, all[i]);
        assert.equal(r.outcome, 'renewed');
        assert.equal(r.token, got[i]!.token);
      });
      assert.ok(s.scripts.length - acquireScripts > 1, `3000 renewals went as ${s.scripts.length - acquireScripts} script(s)`);

      // The renewals landed: the old nonces are stale now, the new ones current.
      const again = await s.store.claim(all.slice(0, 5).map((name, i) => ({ name, holder: 'h', expect: [`b${i}`], nextNonce: `c${i}`, ttlMs: 60_000 })));
      assert.deepEqual(
        again.map((r) => r.outcome),
        ['renewed', 'renewed', 'renewed', 'renewed', 'renewed'],
      );
    } finally {
      await s.close();
    }
  });

  void it('a slice that fails after others landed fails the call, and a claim naming both nonces recognises every lease', async () => {
    const s = await countedStore(1);
    try {
      const all = names(2000);
      await s.store.claim(all.map((name, i) => ({ name, holder: 'h', expect: null, nextNonce: `a${i}`, ttlMs: 60_000 })));
      // The second script of the renewal never reaches Redis: the call fails with some slices landed.
      const before = s.scripts.length;
      s.failScript = before + 1;
      const renew = all.map((name, i) => ({ name, holder: 'h', expect: [`a${i}`], nextNonce: `b${i}`, ttlMs: 60_000 }));
      await assert.rejects(s.store.claim(renew));
      s.failScript = undefined;
      // Unknown is not yes: the engine's next claim expects the old nonce and the unanswered one.
      const again = await s.store.claim(all.map((name, i) => ({ name, holder: 'h', expect: [`a${i}`, `b${i}`], nextNonce: `c${i}`, ttlMs: 60_000 })));
      assert.equal(again.filter((r) => r.outcome === 'renewed').length, 2000);
    } finally {
      await s.close();
    }
  });

  void it('two sliced batches sent at once take turns: never two scripts in flight', async () => {
    const s = await countedStore(1);
    try {
      const batch = (from: number): ClaimRequest[] =>
        names(1500).map((n, i) => ({ name: `${n}-${from}`, holder: 'h', expect: null, nextNonce: `t${from}-${i}`, ttlMs: 60_000 }));
      const [a, b] = await Promise.all([s.store.claim(batch(1)), s.store.claim(batch(2))]);
      assert.equal([...a, ...b].filter((r) => r.outcome === 'acquired').length, 3000);
      assert.ok(s.scripts.length > 2, `${s.scripts.length} scripts`);
      assert.equal(s.flight.most, 1);
    } finally {
      await s.close();
    }
  });

  void it('a small batch is one script', async () => {
    const s = await countedStore();
    try {
      const all = names(20);
      const got = await s.store.claim(all.map((name, i) => ({ name, holder: 'h', expect: null, nextNonce: `a${i}`, ttlMs: 60_000 })));
      assert.equal(got.filter((r) => r.outcome === 'acquired').length, 20);
      assert.equal(s.scripts.length, 1);
    } finally {
      await s.close();
    }
  });

  void it('maxScriptMs must be a positive whole number of milliseconds', async () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      await assert.rejects(createRedisStore({ url: TEST_REDIS_URL, prefix: freshRedisPrefix(), maxScriptMs: bad }), (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /maxScriptMs must be a positive whole number/);
        return true;
      });
    }
  });
});
