/**
 * The library surface: bad input gets typed errors that say what to do; runExclusive, the
 * elector and confirm() behave as documented. Against real SQLite files and PostgreSQL.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import { parseDuration, resolveTiming, validateLeaseName } from '../../src/core/config.js';
import { AbortedError, ConfigError, LeaseLostError, NotLeaderError, SchemaError } from '../../src/core/errors.js';
import { newHolderId } from '../../src/core/identity.js';
import { openStore, resolveStoreUrl, defaultStoreUrl } from '../../src/backends/index.js';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import type { Term } from '../../src/core/lease.js';
import { makeTestStore, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

void describe('bad input is refused with a typed error that says what to do', () => {
  void it('durations', () => {
    assert.equal(parseDuration('30s', 'ttl'), 30_000);
    assert.equal(parseDuration('500ms', 'ttl'), 500);
    assert.equal(parseDuration('2m', 'ttl'), 120_000);
    assert.equal(parseDuration(1500, 'ttl'), 1500);
    assert.equal(parseDuration('1500', 'ttl'), 1500);
    for (const bad of ['5x', '', '-1s', '1.5', 'soon', '1 2s']) {
      assert.throws(() => parseDuration(bad, 'ttl'), (e: unknown) => e instanceof ConfigError && /30s, 500ms, 2m/.test(e.message), bad);
    }
    assert.throws(() => parseDuration(-5, 'ttl'), ConfigError);
    assert.throws(() => parseDuration(Number.NaN, 'ttl'), ConfigError);
  });

  void it('lease names', () => {
    assert.equal(validateLeaseName('nightly-billing'), 'nightly-billing');
    assert.equal(validateLeaseName('x'.repeat(200)), 'x'.repeat(200));
    assert.throws(() => validateLeaseName(''), /non-empty/);
    assert.throws(() => validateLeaseName('x'.repeat(201)), /limit is 200/);
    assert.throws(() => validateLeaseName('bad\nname'), /control character/);
    assert.throws(() => validateLeaseName('bell\u0007'), ConfigError);
  });

  void it('timing: renew interval must be at most ttl/2, and leave room for the margin', () => {
    assert.deepEqual(resolveTiming({}), { ttlMs: 30_000, renewMs: 10_000, marginMs: 3000 });
    assert.throws(() => resolveTiming({ ttl: '10s', renewInterval: '10s' }), /shorter than the ttl/);
    assert.throws(() => resolveTiming({ ttl: '10s', renewInterval: '20s' }), /shorter than the ttl/);
    assert.throws(() => resolveTiming({ ttl: '10s', renewInterval: '6s' }), (e: unknown) => e instanceof ConfigError && /more than half the ttl/.test(e.message) && /ttl\/3/.test(e.message));
    assert.throws(() => resolveTiming({ ttl: '10s', renewInterval: '5s', safetyMargin: '5s' }), /no time to renew/);
    assert.throws(() => resolveTiming({ ttl: 50 }), /too short/);
  });

  void it('store URLs', async () => {
    await assert.rejects(openStore('foo://x'), (e: unknown) => e instanceof ConfigError && /unknown scheme "foo"/.test(e.message));
    await assert.rejects(openStore('not a url'), (e: unknown) => e instanceof ConfigError && /no scheme/.test(e.message));
    await assert.rejects(openStore('postgres://user:secret@/db'), (e: unknown) => e instanceof ConfigError && !e.message.includes('secret'));
    await assert.rejects(openStore('postgres://u@h/db?schema=drop;table'), (e: unknown) => e instanceof ConfigError && /plain identifier/.test(e.message));
    await assert.rejects(openStore('sqlite:'), ConfigError);
    await assert.rejects(openStore('redis://127.0.0.1:6379/0?nonsense=1'), ConfigError);
    await assert.rejects(openStore('etcd://'), ConfigError);
  });

  void it('the default store is a SQLite file in the state directory, overridden by LEASEHOLD_STORE', () => {
    assert.equal(defaultStoreUrl({ XDG_STATE_HOME: '/tmp/state' }), 'sqlite:/tmp/state/leasehold/leasehold.db');
    assert.match(defaultStoreUrl({ HOME: '/home/u' }), /\.local\/state\/leasehold\/leasehold\.db$/);
    assert.equal(resolveStoreUrl(undefined, { LEASEHOLD_STORE: 'postgres://h/db' }), 'postgres://h/db');
    assert.equal(resolveStoreUrl('sqlite:/x.db', { LEASEHOLD_STORE: 'postgres://h/db' }), 'sqlite:/x.db');
  });

  void it('a missing schema is a SchemaError telling you to migrate, even while waiting', async () => {
    const store = await PostgresStore.create({ url: TEST_PG_URL, schema: uniq('lh_missing').replace(/-/g, '_') });
    const lh = new Leasehold({ store, closeStore: true });
    try {
      assert.equal((await store.schemaStatus()).current, 0);
      await assert.rejects(lh.lease('x').acquire({ wait: true }), (e: unknown) => e instanceof SchemaError && /leasehold migrate/.test(e.message));
    } finally {
      await lh.close();
    }
  });

  void it('holder ids are unique per instance and carry 128 random bits', () => {
    const a = newHolderId();
    const b = newHolderId();
    assert.notEqual(a, b);
    assert.match(a, new RegExp(`:${process.pid}:[0-9a-f]{32}$`));
  });
});

for (const kind of ['sqlite', 'postgres'] as const) {
  void describe(`library API on ${kind}`, () => {
    let t: TestStore;
    let lh: Leasehold;
    before(async () => {
      t = await makeTestStore(kind);
      lh = new Leasehold({ store: t.store });
    });
    after(async () => {
      await lh?.close();
      await t?.cleanup();
    });

    void it('runExclusive hands the work a token and a signal, and releases afterwards', async () => {
      const name = uniq('run');
      const result = await lh.runExclusive(name, async ({ token, signal, confirm }) => {
        assert.equal(typeof token, 'bigint');
        assert.equal(signal.aborted, false);
        assert.equal(await confirm(), token);
        return `did work under ${token}`;
      });
      assert.match(result, /did work under \d+/);
      const [info] = await t.store.list({ name });
      assert.equal(info?.state, 'free', 'released after the work');
    });

    void it('runExclusive rejects with the LeaseLostError when the term ends mid-work', async () => {
      const name = uniq('run-lost');
      await assert.rejects(
        lh.runExclusive(
          name,
          async ({ signal }) => {
            await t.store.revoke(name, 'test');
            await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
            return 'finished anyway';
          },
          { ttl: 900 },
        ),
        (e: unknown) => e instanceof LeaseLostError && e.reason === 'revoked',
      );
    });

    void it('an aborted acquire rejects with AbortedError and leaves nothing held', async () => {
      const name = uniq('abort');
      const other = new Leasehold({ store: await t.open() });
      try {
        await other.lease(name).acquire();
        const ac = new AbortController();
        const started = performance.now();
        const p = lh.lease(name).acquire({ signal: ac.signal });
        ac.abort();
        await assert.rejects(p, AbortedError);
        // The holder's ttl is 30s: an abort that waited for the expiry would take that long.
        assert.ok(performance.now() - started < 10_000, 'the abort was honoured while asleep');
      } finally {
        await other.close();
      }
    });

    void it('the elector calls onElected and onRevoked once per term, and contends again', async () => {
      const name = uniq('elect');
      const elected: Term[] = [];
      const revoked: string[] = [];
      let sawTwo: () => void = () => {};
      const two = new Promise<void>((r) => (sawTwo = r));
      const elector = lh.elect(
        name,
        {
          onElected(term) {
            elected.push(term);
            if (elected.length === 2) sawTwo();
          },
          onRevoked(_term, err) {
            revoked.push(err.reason);
          },
        },
        { ttl: 900 },
      );
      while (elected.length === 0) await new Promise((r) => setTimeout(r, 20));
      await t.store.revoke(name, 'rotate');
      await two;
      assert.deepEqual(revoked, ['revoked']);
      assert.ok(elected[1]!.token > elected[0]!.token);
      assert.equal(elector.isLeader, true);
      await elector.stop();
      assert.equal(elector.isLeader, false);
      assert.deepEqual(revoked, ['revoked', 'released']);
    });

    void it('confirm() refuses when the term is gone, and token throws when not leading', async () => {
      const name = uniq('confirm');
      const lease = lh.lease(name, { ttl: 900 });
      assert.throws(() => lease.token, NotLeaderError);
      await assert.rejects(lease.confirm(), NotLeaderError);
      const term = await lease.acquire();
      assert.equal(await lease.confirm(), term.token);
      await t.store.revoke(name, 'test');
      await assert.rejects(lease.confirm(), (e: unknown) => e instanceof LeaseLostError && e.reason === 'revoked');
      assert.throws(() => lease.token, NotLeaderError);
    });

    void it('await using releases the lease at the end of the block', async () => {
      const name = uniq('using');
      {
        await using lease = lh.lease(name);
        await lease.acquire();
        assert.equal(lease.isLeader, true);
      }
      const [info] = await t.store.list({ name });
      assert.equal(info?.state, 'free');
    });
  });
}
