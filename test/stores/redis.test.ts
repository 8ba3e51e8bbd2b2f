import assert from 'node:assert/strict';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { ConfigError, FencedError, SchemaError, StoreUnavailableError } from '../../src/core/errors.js';
import { fencedHSet, fencedSet } from '../../src/backends/redis/fence.js';
import { mapRedisError } from '../../src/backends/redis/errors.js';
import { RedisStore, createRedisStore, keysFor, parseRedisUrl, type IoredisLike } from '../../src/backends/redis/index.js';
import type { ClaimRequest, ClaimResult } from '../../src/backends/store.js';
import { TEST_REDIS_URL, deleteRedisKeys, freshRedisPrefix, makeRedisTestStore } from '../helpers/redis-store.js';

// Every test gets its own prefix and deletes its own keys; the server is shared, so nothing here
// ever flushes a database or the script cache.

const admin = new Redis(TEST_REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, commandTimeout: 5000 });
admin.on('error', () => {});

interface Fixture {
  store: RedisStore;
  prefix: string;
  [Symbol.asyncDispose](): Promise<void>;
}

async function fixture(extra: Partial<Parameters<typeof createRedisStore>[0]> = {}): Promise<Fixture> {
  const prefix = freshRedisPrefix();
  const store = await createRedisStore({ url: TEST_REDIS_URL, prefix, ...extra });
  return {
    store,
    prefix,
    async [Symbol.asyncDispose]() {
      await store.close();
      await deleteRedisKeys(prefix);
    },
  };
}

function contend(name: string, holder: string, nonce: string, ttlMs = 5000): ClaimRequest {
  return { name, holder, ttlMs, expect: null, nextNonce: nonce };
}

function renew(name: string, holder: string, expect: string[], nextNonce: string, ttlMs = 5000): ClaimRequest {
  return { name, holder, ttlMs, expect, nextNonce };
}

async function one(store: RedisStore, req: ClaimRequest): Promise<ClaimResult> {
  const [r] = await store.claim([req]);
  assert.ok(r);
  return r;
}

async function acquiredToken(store: RedisStore, req: ClaimRequest): Promise<bigint> {
  const r = await one(store, req);
  assert.equal(r.outcome, 'acquired');
  assert.ok(r.token !== null);
  return r.token;
}

async function until(what: string, check: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/**
 * A loopback TCP proxy in front of the test Redis that a test can switch off, on, and cut,
 * to play a Redis that goes away and comes back without touching the shared server.
 */
class RedisProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  port = 0;

  static async reservePort(): Promise<number> {
    const s = createServer();
    await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
    const port = (s.address() as AddressInfo).port;
    await new Promise<void>((resolve) => s.close(() => resolve()));
    return port;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  async up(): Promise<void> {
    const target = new URL(TEST_REDIS_URL);
    this.server = createServer((client) => {
      const upstream = connect(Number(target.port || 6379), target.hostname);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('error', () => {});
        s.on('close', () => {
          this.sockets.delete(s);
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve) => this.server!.listen(this.port, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Drops every connection (both ways); new ones are still accepted. */
  cut(): void {
    for (const s of this.sockets) s.destroy();
  }

  async down(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    this.cut();
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

before(async () => {
  await admin.connect();
});

after(() => {
  admin.disconnect();
});

void describe('redis store: claims', () => {
  void it('a free lease is acquired, then busy for others, then renewed by its holder', async () => {
    await using f = await fixture();
    const got = await one(f.store, contend('job', 'A', 'a1'));
    assert.equal(got.outcome, 'acquired');
    assert.equal(got.holder, 'A');
    assert.ok(got.expiresAtMs !== null && got.expiresAtMs - got.storeNowMs === 5000);

    const busy = await one(f.store, contend('job', 'B', 'b1'));
    assert.equal(busy.outcome, 'busy');
    assert.equal(busy.holder, 'A');
    assert.equal(busy.token, got.token);
    assert.equal(busy.expiresAtMs, got.expiresAtMs);

    const renewed = await one(f.store, renew('job', 'A', ['a1'], 'a2', 8000));
    assert.equal(renewed.outcome, 'renewed');
    assert.equal(renewed.token, got.token, 'a renewal keeps the token');
    assert.equal(renewed.expiresAtMs! - renewed.storeNowMs, 8000);
    // Any expected nonce counts (answers to earlier renewals were lost); prefixes do not.
    assert.equal((await one(f.store, renew('job', 'A', ['x1', 'x2', 'a2'], 'a3'))).outcome, 'renewed');
    assert.equal((await one(f.store, renew('job', 'A', ['a', 'a3x'], 'a4'))).outcome, 'lost');
    await assert.rejects(f.store.claim([renew('job', 'A', ['a,3'], 'a4')]), ConfigError);
  });

  void it('store time comes from Redis TIME and is close to this machine', async () => {
    await using f = await fixture();
    const now = await f.store.now();
    const r = await one(f.store, contend('t', 'A', 'a'));
    assert.ok(Math.abs(now - r.storeNowMs) < 1000);
  });

  void it('a renewal after the term expired is lost as expired, and the lease is taken over', async () => {
    await using f = await fixture();
    const t1 = await acquiredToken(f.store, contend('job', 'A', 'a1', 100));
    await sleep(150);
    const late = await one(f.store, renew('job', 'A', ['a1'], 'a2'));
    assert.equal(late.outcome, 'lost');
    assert.equal(late.outcome === 'lost' && late.reason, 'expired');

    const t2 = await acquiredToken(f.store, contend('job', 'B', 'b1'));
    assert.ok(t2 > t1);
    const superseded = await one(f.store, renew('job', 'A', ['a1'], 'a3'));
    assert.equal(superseded.outcome === 'lost' && superseded.reason, 'superseded');
    assert.equal(superseded.holder, 'B');

    const events = (await f.store.history({ name: 'job' })).map((h) => [h.event, h.holder, h.previousHolder]);
    assert.deepEqual(events, [
      ['acquired', 'A', null],
      ['takeover', 'B', 'A'],
    ]);
  });

  void it('two clones restored from one snapshot (same holder, same nonce): the second renewal ends the term for both', async () => {
    await using f = await fixture();
    const token = await acquiredToken(f.store, contend('job', 'H', 'n0'));
    const [x, y] = await Promise.all([
      f.store.claim([renew('job', 'H', ['n0'], 'clone-x')]),
      f.store.claim([renew('job', 'H', ['n0'], 'clone-y')]),
    ]);
    const outcomes = [x[0]!, y[0]!].map((r) => (r.outcome === 'lost' ? `lost:${r.reason}` : r.outcome)).sort();
    assert.deepEqual(outcomes, ['lost:cloned', 'renewed']);
    const lost = x[0]!.outcome === 'lost' ? x[0]! : y[0]!;
    const winnerNonce = x[0]!.outcome === 'renewed' ? 'clone-x' : 'clone-y';
    assert.equal(lost.token, token);
    assert.equal(lost.holder, null, 'the conflict cleared the holder');
    assert.equal(lost.expiresAtMs, lost.storeNowMs, 'the term ended now');

    // The record says so: no holder, no nonce, ended by the conflict, token kept.
    const hash = await admin.hgetall(keysFor(f.prefix).lease('job'));
    assert.equal(hash['holder'], undefined);
    assert.equal(hash['nonce'], undefined);
    assert.equal(hash['ended'], 'conflict');
    assert.equal(hash['token'], token.toString());
    const [info] = await f.store.list({ name: 'job' });
    assert.deepEqual([info?.state, info?.holder, info?.token], ['free', null, token]);

    // The winner's next renewal is lost as cloned too, and writes nothing more.
    const next = await one(f.store, renew('job', 'H', [winnerNonce], 'w2'));
    assert.equal(next.outcome === 'lost' && next.reason, 'cloned');
    assert.equal(next.token, token);
    assert.equal((await one(f.store, renew('job', 'H', ['n0', 'clone-x', 'clone-y'], 'again'))).outcome, 'lost');

    const after = await acquiredToken(f.store, contend('job', 'K', 'k1'));
    assert.ok(after > token, `token ${after} after ${token}`);
    const events = (await f.store.history({ name: 'job' })).map((h) => [h.event, h.holder, h.previousHolder, h.token, h.detail]);
    assert.deepEqual(events, [
      ['acquired', 'H', null, token, null],
      ['conflict', null, 'H', token, 'two processes renewed one term (a restored snapshot or a clone)'],
      ['acquired', 'K', null, after, null],
    ]);
    assert.deepEqual((await f.store.history()).map((h) => h.event), ['acquired', 'conflict', 'acquired'], 'the global stream too');
  });

  void it('a clone conflict inside a batch ends only that lease, in the same script', async () => {
    await using f = await fixture();
    const tA = await acquiredToken(f.store, contend('a', 'H', 'a0'));
    const tB = await acquiredToken(f.store, contend('b', 'H', 'b0'));
    assert.equal((await one(f.store, renew('a', 'H', ['a0'], 'a1'))).outcome, 'renewed'); // the other clone
    const out = await f.store.claim([renew('a', 'H', ['a0'], 'a2'), renew('b', 'H', ['b0'], 'b1'), contend('c', 'H', 'c0')]);
    assert.deepEqual(
      out.map((r) => [r.name, r.outcome === 'lost' ? `lost:${r.reason}` : r.outcome]),
      [
        ['a', 'lost:cloned'],
        ['b', 'renewed'],
        ['c', 'acquired'],
      ],
    );
    assert.equal(out[0]!.token, tA);
    assert.equal(out[1]!.token, tB);
    assert.deepEqual((await f.store.history({ name: 'b' })).map((h) => h.event), ['acquired']);
    assert.deepEqual((await f.store.history({ name: 'a' })).map((h) => h.event), ['acquired', 'conflict']);
  });

  void it('a stale nonce on a term that already expired is lost as cloned, with no conflict to record', async () => {
    await using f = await fixture();
    await acquiredToken(f.store, contend('job', 'H', 'n0', 100));
    assert.equal((await one(f.store, renew('job', 'H', ['n0'], 'n1', 100))).outcome, 'renewed');
    await sleep(150);
    const r = await one(f.store, renew('job', 'H', ['n0'], 'x'));
    assert.equal(r.outcome === 'lost' && r.reason, 'cloned');
    assert.equal(r.holder, 'H', 'nothing was ended: the expired term is left as it was');
    assert.deepEqual((await f.store.history({ name: 'job' })).map((h) => h.event), ['acquired']);
    const [info] = await f.store.list({ name: 'job' });
    assert.equal(info?.state, 'expired');
    assert.equal((await one(f.store, contend('job', 'K', 'k'))).outcome, 'acquired');
    assert.deepEqual((await f.store.history({ name: 'job' })).map((h) => h.event), ['acquired', 'takeover']);
  });

  void it('a renewal after an operator revocation is lost as revoked; after a clone released, as released', async () => {
    await using f = await fixture();
    const token = await acquiredToken(f.store, contend('job', 'A', 'a1'));
    assert.deepEqual(await f.store.revoke('job', 'stuck on host 7'), { revoked: true, previousHolder: 'A', token });
    assert.deepEqual(await f.store.revoke('job', 'again'), { revoked: false, previousHolder: null, token });
    assert.deepEqual(await f.store.revoke('never-held', 'x'), { revoked: false, previousHolder: null, token: null });
    const r = await one(f.store, renew('job', 'A', ['a1'], 'a2'));
    assert.equal(r.outcome === 'lost' && r.reason, 'revoked');
    const last = (await f.store.history({ name: 'job' })).at(-1);
    assert.equal(last?.event, 'revoked');
    assert.equal(last?.detail, 'stuck on host 7');

    await acquiredToken(f.store, contend('job2', 'C', 'c1'));
    assert.equal(await f.store.release({ name: 'job2', holder: 'C', expect: ['c1'] }), true);
    const r2 = await one(f.store, renew('job2', 'C', ['c1'], 'c2'));
    assert.equal(r2.outcome === 'lost' && r2.reason, 'released');
  });

  void it('release needs the holder and a current nonce', async () => {
    await using f = await fixture();
    await acquiredToken(f.store, contend('job', 'A', 'a1'));
    assert.equal(await f.store.release({ name: 'job', holder: 'B', expect: ['a1'] }), false);
    assert.equal(await f.store.release({ name: 'job', holder: 'A', expect: ['old'] }), false);
    assert.equal(await f.store.release({ name: 'job', holder: 'A', expect: ['old', 'a1'] }), true);
    assert.equal(await f.store.release({ name: 'job', holder: 'A', expect: ['a1'] }), false);
    assert.equal((await one(f.store, contend('job', 'B', 'b1'))).outcome, 'acquired');
    assert.deepEqual(
      (await f.store.history({ name: 'job' })).map((h) => h.event),
      ['acquired', 'released', 'acquired'],
    );
  });

  void it('a batch naming one lease twice is refused', async () => {
    await using f = await fixture();
    await assert.rejects(f.store.claim([contend('x', 'A', '1'), contend('x', 'A', '2')]), ConfigError);
  });
});

void describe('redis store: tokens never go backwards', () => {
  void it('across release, expiry and revocation', async () => {
    await using f = await fixture();
    const tokens: bigint[] = [];
    tokens.push(await acquiredToken(f.store, contend('job', 'A', 'a1')));
    await f.store.release({ name: 'job', holder: 'A', expect: ['a1'] });
    tokens.push(await acquiredToken(f.store, contend('job', 'B', 'b1', 100)));
    await sleep(150);
    tokens.push(await acquiredToken(f.store, contend('job', 'C', 'c1')));
    await f.store.revoke('job', 'test');
    tokens.push(await acquiredToken(f.store, contend('job', 'D', 'd1')));
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i]! > tokens[i - 1]!, `token ${i} ${tokens[i]} > ${tokens[i - 1]}`);
  });

  void it('when Redis restarts empty (every key of this store deleted)', async () => {
    await using f = await fixture();
    const before = await acquiredToken(f.store, contend('job', 'A', 'a1'));
    await deleteRedisKeys(f.prefix);
    const afterLoss = await acquiredToken(f.store, contend('job', 'B', 'b1'));
    assert.ok(afterLoss > before, `${afterLoss} > ${before}`);
    const renewal = await one(f.store, renew('job', 'A', ['a1'], 'a2'));
    assert.equal(renewal.outcome === 'lost' && renewal.reason, 'superseded');
  });

  void it('when a replica that missed the last writes is promoted (stale record)', async () => {
    await using f = await fixture();
    const latest = await acquiredToken(f.store, contend('job', 'A', 'a1'));
    // The replica's copy: an older term, token 41, long expired.
    await admin.hset(keysFor(f.prefix).lease('job'), { holder: 'OLD', nonce: 'o', token: '41', exp: '1' });
    const next = await acquiredToken(f.store, contend('job', 'B', 'b1'));
    assert.ok(next > latest, `${next} > ${latest}`);
  });

  void it('are exact beyond 2^32 and returned as bigint', async () => {
    await using f = await fixture();
    const t = await acquiredToken(f.store, contend('job', 'A', 'a1'));
    assert.equal(typeof t, 'bigint');
    assert.ok(t > 2n ** 50n && t < 2n ** 53n);
    assert.equal(await admin.hget(keysFor(f.prefix).lease('job'), 'token'), t.toString());
  });
});

void describe('redis store: batches, list, history', () => {
  void it('claims 1000 leases in one script call when maxScriptMs allows it, results in request order', async () => {
    const prefix = freshRedisPrefix();
    const client = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 0, commandTimeout: 5000 });
    client.on('error', () => {});
    let evalshaCalls = 0;
    const counting: IoredisLike = Object.assign(Object.create(client) as IoredisLike, {
      evalsha: (sha: string, n: number, rest: string[]) => {
        evalshaCalls++;
        return client.evalsha(sha, n, rest);
      },
    });
    // A generous bound: how a batch is sliced under a tight one is redis-script-bound.test.ts's.
    const store = await createRedisStore({ client: counting, prefix, maxScriptMs: 5000 });
    try {
      const names = Array.from({ length: 1000 }, (_, i) => `lease-${String(999 - i).padStart(4, '0')}`);
      const first = await store.claim(names.map((n) => contend(n, 'A', 'a1')));
      assert.equal(evalshaCalls, 1);
      assert.deepEqual(
        first.map((r) => r.name),
        names,
      );
      assert.ok(first.every((r) => r.outcome === 'acquired'));
      const second = await store.claim(names.map((n) => renew(n, 'A', ['a1'], 'a2')));
      assert.equal(evalshaCalls, 2);
      assert.ok(second.every((r, i) => r.outcome === 'renewed' && r.token === first[i]!.token));
      assert.equal((await store.list()).length, 1000);
    } finally {
      await store.close();
      client.disconnect();
      await deleteRedisKeys(prefix);
    }
  });

  void it('list reports held, expired and free leases by the store clock', async () => {
    await using f = await fixture();
    await acquiredToken(f.store, contend('held', 'A', 'a'));
    await acquiredToken(f.store, contend('expired', 'A', 'a', 100));
    await acquiredToken(f.store, contend('free', 'A', 'a'));
    await f.store.release({ name: 'free', holder: 'A', expect: ['a'] });
    await sleep(150);
    const states = Object.fromEntries((await f.store.list()).map((l) => [l.name, [l.state, l.holder]]));
    assert.deepEqual(states, { expired: ['expired', 'A'], free: ['free', null], held: ['held', 'A'] });
    const [one] = await f.store.list({ name: 'held' });
    assert.equal(one?.state, 'held');
    assert.ok(one.termStartedAtMs !== null && one.renewedAtMs !== null);
    assert.deepEqual(await f.store.list({ name: 'nope' }), []);
  });

  void it('history is oldest first, limited to the newest entries, and capped in Redis', async () => {
    await using f = await fixture({ leaseHistoryMaxLen: 10, historyMaxLen: 50 });
    for (let i = 0; i < 300; i++) {
      await acquiredToken(f.store, contend('job', `H${i}`, 'n'));
      await f.store.release({ name: 'job', holder: `H${i}`, expect: ['n'] });
    }
    const all = await f.store.history();
    const ids = all.map((h) => h.id);
    assert.deepEqual(ids, [...ids].sort((a, b) => (a < b ? -1 : 1)));
    assert.equal(all.at(-1)?.event, 'released');
    assert.equal(all.at(-1)?.previousHolder, 'H299');
    assert.ok(all.length < 600, `global stream capped (${all.length})`);
    const last3 = await f.store.history({ name: 'job', limit: 3 });
    assert.deepEqual(
      last3.map((h) => [h.event, h.holder ?? h.previousHolder]),
      [
        ['released', 'H298'],
        ['acquired', 'H299'],
        ['released', 'H299'],
      ],
    );
    assert.ok((await admin.xlen(keysFor(f.prefix).leaseHistory('job'))) < 600);
  });

  void it('a record is kept retainMs past its expiry; renewals move that deadline only when it falls behind', async () => {
    await using f = await fixture({ retainMs: 60_000 });
    const key = keysFor(f.prefix).lease('job');
    await acquiredToken(f.store, contend('job', 'A', 'a1', 1000));
    const ttl1 = await admin.pttl(key);
    assert.ok(ttl1 > 60_000 && ttl1 <= 61_000, `PTTL ${ttl1}`);
    await one(f.store, renew('job', 'A', ['a1'], 'a2', 2000));
    assert.ok((await admin.pttl(key)) <= ttl1, 'a small step does not touch the expiry');
    await one(f.store, renew('job', 'A', ['a2'], 'a3', 40_000));
    const ttl2 = await admin.pttl(key);
    assert.ok(ttl2 > 99_000 && ttl2 <= 100_000, `PTTL ${ttl2}`);
    // Read a moment after the other key's PTTL, so it may be a few ms lower; never higher.
    const historyTtl = await admin.pttl(keysFor(f.prefix).leaseHistory('job'));
    assert.ok(historyTtl <= ttl2 && ttl2 - historyTtl <= 50, `history PTTL ${historyTtl} follows the record's ${ttl2}`);
  });

  void it('Redis deletes a record itself, retainMs after its term ends', async () => {
    await using f = await fixture({ retainMs: 0 });
    const t1 = await acquiredToken(f.store, contend('job', 'A', 'a', 100));
    const ttl = await admin.pttl(keysFor(f.prefix).lease('job'));
    assert.ok(ttl > 0 && ttl <= 100, `PTTL ${ttl}`);
    await sleep(150);
    assert.equal(await admin.exists(keysFor(f.prefix).lease('job')), 0);
    assert.deepEqual(await f.store.list(), []);
    assert.ok((await acquiredToken(f.store, contend('job', 'B', 'b'))) > t1);
  });
});

void describe('redis store: schema, errors, clients', () => {
  void it('migrate records the layout; keys from a newer leasehold are refused', async () => {
    await using f = await fixture();
    assert.deepEqual(await f.store.schemaStatus(), { current: 1, expected: 1 });
    assert.deepEqual(await f.store.migrate(), { current: 1, expected: 1 });
    await admin.set(keysFor(f.prefix).layout, '2');
    await assert.rejects(f.store.migrate(), SchemaError);
    await assert.rejects(f.store.claim([contend('x', 'A', 'a')]), SchemaError);
    assert.deepEqual(await f.store.list(), []);
  });

  for (const clientPackage of ['ioredis', 'redis'] as const) {
    void it(`a store on a URL works through the ${clientPackage} package`, async () => {
      await using f = await fixture({ clientPackage });
      assert.match(f.store.description, clientPackage === 'ioredis' ? /ioredis/ : /node-redis/);
      const t = await acquiredToken(f.store, contend('job', 'A', 'a1'));
      assert.equal((await one(f.store, renew('job', 'A', ['a1'], 'a2'))).token, t);
      let reconnects = 0;
      const freed: string[] = [];
      const stop = await f.store.watchFreed(
        (n) => freed.push(n),
        () => reconnects++,
      );
      await f.store.release({ name: 'job', holder: 'A', expect: ['a2'] });
      await until('the freed notification', () => freed.includes('job'));
      await stop();
      assert.equal(reconnects, 0);
    });

    void it(`a Redis that is down gives StoreUnavailableError quickly (${clientPackage})`, async () => {
      const started = Date.now();
      const store = await createRedisStore({ url: 'redis://127.0.0.1:1/0', clientPackage });
      try {
        const err = await store.claim([contend('x', 'A', 'a')]).then(
          () => assert.fail('claim succeeded'),
          (e: unknown) => e,
        );
        assert.ok(err instanceof StoreUnavailableError, String(err));
        assert.equal(err.retryable, true);
        assert.match(err.message, /retryable/);
        await assert.rejects(store.now(), StoreUnavailableError);
        assert.ok(Date.now() - started < 3000, `took ${Date.now() - started}ms`);
        // Watching a down Redis does not hang either; it keeps trying in the background.
        const stop = await store.watchFreed(() => {});
        await stop();
        assert.ok(Date.now() - started < 9000, `took ${Date.now() - started}ms`);
      } finally {
        await store.close();
      }
    });
  }

  void it('a Redis that is down gives StoreUnavailableError quickly', async () => {
    const started = Date.now();
    const store = await createRedisStore({ url: 'redis://127.0.0.1:1/0' });
    try {
      const err = await store.claim([contend('x', 'A', 'a')]).then(
        () => assert.fail('claim succeeded'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof StoreUnavailableError, String(err));
      assert.equal(err.retryable, true);
      assert.match(err.message, /unreachable.*retryable/);
      await assert.rejects(store.now(), StoreUnavailableError);
      assert.ok(Date.now() - started < 3000, `took ${Date.now() - started}ms`);
    } finally {
      await store.close();
    }
  });

  void it('a call Redis does not answer in time fails with StoreUnavailableError', async () => {
    // A client that queues commands for ever while its connection is down (ioredis defaults).
    const client = new Redis('redis://127.0.0.1:1/0', { lazyConnect: true, maxRetriesPerRequest: null });
    client.on('error', () => {});
    const store = await createRedisStore({ client, commandTimeoutMs: 300 });
    try {
      const started = Date.now();
      await assert.rejects(store.claim([contend('x', 'A', 'a')]), StoreUnavailableError);
      assert.ok(Date.now() - started < 2000);
    } finally {
      await store.close();
      client.disconnect();
    }
  });

  void it('the conformance helper makes an isolated store and removes its keys', async () => {
    const { store, cleanup } = await makeRedisTestStore();
    const [r] = await store.claim([contend('job', 'A', 'a1')]);
    assert.equal(r?.outcome, 'acquired');
    const prefix = /prefix (\S+),/.exec(store.description)?.[1];
    assert.ok(prefix?.startsWith('lhtest-'));
    await cleanup();
    assert.deepEqual(await admin.keys(`{${prefix}}:*`), []);
  });

  void it('bad URLs and options are ConfigErrors', async () => {
    for (const url of ['http://127.0.0.1', 'redis://', 'redis://127.0.0.1/zero', 'redis://127.0.0.1/0?keyPrefix=x', 'not a url', 'redis://127.0.0.1/0?prefix=a%20b']) {
      await assert.rejects(createRedisStore({ url }), ConfigError, url);
    }
    await assert.rejects(createRedisStore({ url: TEST_REDIS_URL, retainMs: -1 }), ConfigError);
    await assert.rejects(createRedisStore({}), ConfigError);
    await assert.rejects(createRedisStore({ client: {} as IoredisLike }), ConfigError);
    await using f = await fixture();
    await assert.rejects(f.store.claim([contend('x', '', 'a')]), ConfigError);
    assert.equal(parseRedisUrl('rediss://u:secret@127.0.0.1:6380/2?prefix=p').prefix, 'p');
    assert.doesNotMatch(parseRedisUrl('rediss://u:secret@127.0.0.1:6380/2').redacted, /secret/);
  });

  void it('server errors map to what to do', () => {
    const ctx = { where: 'redis://x', prefix: 'p' };
    for (const msg of ['READONLY You can\'t write against a read only replica.', 'LOADING Redis is loading the dataset in memory', 'NOSCRIPT No matching script']) {
      assert.ok(mapRedisError(new Error(msg), ctx) instanceof StoreUnavailableError, msg);
    }
    assert.ok(mapRedisError(new Error('WRONGPASS invalid username-password pair'), ctx) instanceof ConfigError);
    assert.ok(mapRedisError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), ctx) instanceof StoreUnavailableError);
  });

  void it('falls back to EVAL when Redis has forgotten the script (NOSCRIPT)', async () => {
    const prefix = freshRedisPrefix();
    const client = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 0 });
    client.on('error', () => {});
    let evals = 0;
    const forgetful: IoredisLike = Object.assign(Object.create(client) as IoredisLike, {
      evalsha: () => Promise.reject(new Error('NOSCRIPT No matching script. Please use EVAL.')),
      eval: (src: string, n: number, rest: string[]) => {
        evals++;
        return client.eval(src, n, rest);
      },
    });
    const store = await createRedisStore({ client: forgetful, prefix });
    try {
      assert.equal((await one(store, contend('x', 'A', 'a'))).outcome, 'acquired');
      assert.equal(evals, 1);
    } finally {
      await store.close();
      client.disconnect();
      await deleteRedisKeys(prefix);
    }
  });

  void it('works with your own ioredis client and with your own node-redis client, and leaves them open', async () => {
    const io = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 0 });
    io.on('error', () => {});
    const nr = createClient({ url: TEST_REDIS_URL });
    nr.on('error', () => {});
    await nr.connect();
    try {
      for (const client of [io, nr]) {
        const prefix = freshRedisPrefix();
        const store = await createRedisStore({ client, prefix });
        try {
          assert.match(store.description, client === io ? /ioredis/ : /node-redis/);
          const t = await acquiredToken(store, contend('job', 'A', 'a1'));
          assert.equal((await one(store, renew('job', 'A', ['a1'], 'a2'))).token, t);
          const freed: string[] = [];
          const stop = await store.watchFreed((name) => freed.push(name));
          await store.release({ name: 'job', holder: 'A', expect: ['a2'] });
          await until('the freed notification', () => freed.includes('job'));
          await stop();
          await fencedSet(client, { resource: `${prefix}-r`, token: t, key: `{${prefix}}:fenced`, value: 'v' });
        } finally {
          await store.close();
          await deleteRedisKeys(prefix, [`leasehold:fence:${prefix}-r`]);
        }
      }
      assert.equal(await io.ping(), 'PONG');
      assert.equal(await nr.ping(), 'PONG');
    } finally {
      io.disconnect();
      await nr.close();
    }
  });
});

void describe('redis store: freed notifications', () => {
  void it('release, revoke and a clone conflict publish the lease name; expiry does not', async () => {
    await using f = await fixture();
    const freed: string[] = [];
    const stop = await f.store.watchFreed((name) => freed.push(name));
    await acquiredToken(f.store, contend('a', 'A', 'a'));
    await acquiredToken(f.store, contend('b', 'A', 'a'));
    await acquiredToken(f.store, contend('c', 'A', 'a', 100));
    await acquiredToken(f.store, contend('d', 'A', 'a'));
    await f.store.release({ name: 'a', holder: 'A', expect: ['a'] });
    await f.store.revoke('b', 'ops');
    assert.equal((await one(f.store, renew('d', 'A', ['a'], 'd1'))).outcome, 'renewed');
    assert.equal((await one(f.store, renew('d', 'A', ['a'], 'd2'))).outcome, 'lost');
    await until('three notifications', () => freed.length >= 3);
    await sleep(200);
    assert.deepEqual(freed, ['a', 'b', 'd']);
    await stop();
  });

  void it('after the subscriber connection is killed, it resubscribes and calls onReconnect', async () => {
    await using f = await fixture();
    const freed: string[] = [];
    let reconnects = 0;
    const stop = await f.store.watchFreed(
      (name) => freed.push(name),
      () => reconnects++,
    );
    const name = `${f.prefix}:freed:subscriber`;
    const list = (await admin.client('LIST')) as string;
    const line = list.split('\n').find((l) => l.includes(` name=${name} `));
    assert.ok(line, 'the subscriber connection is named');
    const id = /(?:^|\s)id=(\d+)/.exec(line)?.[1];
    await admin.client('KILL', 'ID', id!);
    await until('onReconnect', () => reconnects === 1);
    await acquiredToken(f.store, contend('a', 'A', 'a'));
    await f.store.release({ name: 'a', holder: 'A', expect: ['a'] });
    await until('a notification after the reconnect', () => freed.includes('a'));
    await stop();
    // One subscriber per store: a second watcher shares it, and stopping closes it.
    const list2 = (await admin.client('LIST')) as string;
    assert.equal(list2.split('\n').filter((l) => l.includes(` name=${name} `)).length, 0);
  });

  void it('watchers share one subscriber connection', async () => {
    await using f = await fixture();
    const seen: string[] = [];
    const stop1 = await f.store.watchFreed((n) => seen.push(`1:${n}`));
    const stop2 = await f.store.watchFreed((n) => seen.push(`2:${n}`));
    const name = `${f.prefix}:freed:subscriber`;
    const count = async (): Promise<number> =>
      ((await admin.client('LIST')) as string).split('\n').filter((l) => l.includes(` name=${name} `)).length;
    assert.equal(await count(), 1);
    await acquiredToken(f.store, contend('x', 'A', 'a'));
    await f.store.release({ name: 'x', holder: 'A', expect: ['a'] });
    await until('both watchers', () => seen.length === 2);
    await stop1();
    assert.equal(await count(), 1);
    await stop2();
    assert.equal(await count(), 0);
  });
});

void describe('redis store: Redis going away and coming back (loopback proxy)', () => {
  for (const clientPackage of ['ioredis', 'redis'] as const) {
    void it(`calls fail fast while Redis is away and work again after; watchers hear onReconnect (${clientPackage})`, async () => {
      const proxy = new RedisProxy();
      proxy.port = await RedisProxy.reservePort();
      const prefix = freshRedisPrefix();
      // Redis is unreachable when the store is created and the watch starts.
      const store = await createRedisStore({ url: proxy.url, prefix, clientPackage });
      try {
        await assert.rejects(store.claim([contend('job', 'A', 'a1')]), StoreUnavailableError);
        let reconnects = 0;
        const freed: string[] = [];
        const started = Date.now();
        const stop = await store.watchFreed(
          (n) => freed.push(n),
          () => reconnects++,
        );
        assert.ok(Date.now() - started < 3000, 'watchFreed does not wait for Redis');

        await proxy.up();
        await until('the subscription (onReconnect)', () => reconnects === 1, 8000);
        let token: bigint | undefined;
        for (let i = 0; i < 100 && token === undefined; i++) {
          const r = await store.claim([contend('job', 'A', 'a1')]).catch(() => undefined);
          if (r?.[0]?.outcome === 'acquired') token = r[0].token;
          else await sleep(50);
        }
        assert.ok(token !== undefined, 'claims work once Redis is back');

        // The connections drop (a failover, a proxy restart): the subscriber comes back by itself.
        proxy.cut();
        await until('onReconnect after the cut', () => reconnects === 2, 8000);
        let released = false;
        for (let i = 0; i < 100 && !released; i++) {
          released = await store.release({ name: 'job', holder: 'A', expect: ['a1'] }).catch(() => false);
          if (!released) await sleep(50);
        }
        assert.ok(released);
        await until('the freed notification after the cut', () => freed.includes('job'));
        await stop();
      } finally {
        await store.close();
        await proxy.down();
        await deleteRedisKeys(prefix);
      }
    });
  }
});

void describe('redis fence', () => {
  void it('accepts a higher or equal token, refuses a lower one and changes nothing', async () => {
    await using f = await fixture();
    const resource = `${f.prefix}-invoices`;
    const key = `{${f.prefix}}:invoice-run`;
    const markKey = `{${f.prefix}}:fence:invoices`;
    await fencedSet(f.store, { resource, markKey, token: 10n, key, value: 'run by 10' });
    await fencedSet(f.store, { resource, markKey, token: 2n ** 62n, key, value: 'run by big' });
    await fencedSet(f.store, { resource, markKey, token: 2n ** 62n, key, value: 'again by big' });
    assert.equal(await admin.get(key), 'again by big');

    const err = await fencedSet(f.store, { resource, markKey, token: 2n ** 62n - 1n, key, value: 'stale' }).then(
      () => assert.fail('a stale token was accepted'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof FencedError);
    assert.equal(err.highWater, 2n ** 62n);
    assert.equal(err.token, 2n ** 62n - 1n);
    assert.equal(await admin.get(key), 'again by big');
    assert.equal(await admin.get(markKey), (2n ** 62n).toString());
  });

  void it('fences hash fields too, with a token from a lease', async () => {
    await using f = await fixture();
    const t1 = await acquiredToken(f.store, contend('job', 'A', 'a', 100));
    await sleep(150);
    const t2 = await acquiredToken(f.store, contend('job', 'B', 'b'));
    const key = `{${f.prefix}}:state`;
    const markKey = `{${f.prefix}}:fence:state`;
    await fencedHSet(f.store, { resource: 'state', markKey, token: t2, key, fields: { owner: 'B', step: '1' } });
    // The paused leader wakes up and writes with its old token: fenced.
    await assert.rejects(fencedHSet(f.store, { resource: 'state', markKey, token: t1, key, fields: { owner: 'A' } }), FencedError);
    assert.deepEqual(await admin.hgetall(key), { owner: 'B', step: '1' });
    // A wrong-typed target changes nothing, not even the mark.
    await assert.rejects(fencedSet(f.store, { resource: 'state', markKey, token: t2 + 1n, key, value: 'x' }));
    assert.equal(await admin.get(markKey), t2.toString());
  });
});
