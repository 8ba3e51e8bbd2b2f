/**
 * Redis eviction, on a redis-server of this test's own (a spare loopback port, a temp dir): its
 * maxmemory and policy are changed here, which the shared server must never be. An eviction
 * policy that can reach leasehold's keys deletes a live lease and lets a second process lead
 * while the first still believes it does: `leasehold doctor` fails on every such policy.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { createRedisStore, keysFor, type RedisStore } from '../../src/backends/redis/index.js';
import { fencedSet } from '../../src/backends/redis/fence.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { Sandbox, type Done } from '../cli/helpers.js';
import { selectedStores } from '../helpers/stores.js';

const bin = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => existsSync(p));
const skip = !selectedStores().includes('redis') ? 'redis not selected' : bin === undefined ? 'no redis-server binary (apt-get install redis-server)' : false;

async function sparePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

void describe('Redis eviction: doctor and the key layout', { skip }, () => {
  let server: ChildProcess | undefined;
  let dir: string;
  let url: string;
  let admin: Redis;
  const sandbox = new Sandbox('eviction');

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lh-redis-evict-'));
    const port = await sparePort();
    // No persistence: this server is thrown away with its directory.
    server = spawn(bin!, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
    url = `redis://127.0.0.1:${port}/0`;
    admin = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, commandTimeout: 5000, retryStrategy: () => null });
    admin.on('error', () => {});
    for (let i = 0; ; i++) {
      try {
        await admin.connect();
        await admin.ping();
        break;
      } catch (err) {
        if (i > 100) throw new Error(`the test's own redis-server on ${port} never answered: ${(err as Error).message}`);
        admin.disconnect();
        await sleep(50);
      }
    }
  });

  after(async () => {
    admin?.disconnect();
    if (server !== undefined && server.exitCode === null) {
      const exited = new Promise<void>((resolve) => server!.once('exit', () => resolve()));
      server.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
    sandbox.cleanup();
  });

  async function configure(policy: string, maxmemory: string): Promise<void> {
    await admin.config('SET', 'maxmemory-policy', policy);
    await admin.config('SET', 'maxmemory', maxmemory);
  }

  function doctor(): Promise<Done> {
    return sandbox.run(['doctor', '--store', url]);
  }

  const evictionLine = (r: Done): string => r.stdout.split('\n').find((l) => /^\w+\s+eviction\s/.test(l)) ?? `(no eviction line in:\n${r.stdout})`;

  for (const policy of ['allkeys-lru', 'allkeys-lfu', 'allkeys-random', 'volatile-lru', 'volatile-lfu', 'volatile-random', 'volatile-ttl']) {
    void it(`doctor fails on maxmemory-policy ${policy} with a memory limit, naming the policy and what to set`, async () => {
      await configure(policy, '256mb');
      const r = await doctor();
      assert.equal(r.code, 1, `exit 1 (a check failed); stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
      const line = evictionLine(r);
      assert.match(line, /^fail\s+eviction\s/);
      assert.ok(line.includes(policy), `the line names the policy: ${line}`);
      assert.match(line, /maxmemory-policy noeviction/, 'and says what to set');
      assert.match(r.stdout, /doctor: 1 check failed/);
    });
  }

  void it('doctor passes with noeviction', async () => {
    await configure('noeviction', '256mb');
    await admin.config('RESETSTAT'); // evicted_keys: a server that evicted earlier is a warning (below)
    const r = await doctor();
    assert.equal(r.code, 0, r.stdout);
    assert.match(evictionLine(r), /^ok\s+eviction\s.*noeviction/);
    assert.match(r.stdout, /doctor: no failures/);
  });

  void it('doctor warns, without failing, on an evicting policy with no memory limit (nothing is evicted yet)', async () => {
    await configure('allkeys-lru', '0');
    const r = await doctor();
    assert.equal(r.code, 0, r.stdout);
    const line = evictionLine(r);
    assert.match(line, /^warn\s+eviction\s/);
    assert.ok(line.includes('allkeys-lru') && line.includes('maxmemory-policy noeviction'), line);
    await configure('noeviction', '0');
  });

  void it('a client on such a Redis logs one warn line naming the policy at its first claim, and none on noeviction', async () => {
    const warned = async (policy: string): Promise<string[]> => {
      await configure(policy, '256mb');
      const lines: string[] = [];
      const logger = { warn: (_o: object, msg: string) => void lines.push(msg), info: () => {}, error: () => {}, debug: () => {} };
      const store = await createRedisStore({ url, prefix: `evict-${Math.random().toString(36).slice(2, 8)}` });
      const lh = new Leasehold({ store, closeStore: true, logger });
      try {
        await lh.lease('job', { ttl: 5000 }).acquire({ wait: false });
        await lh.lease('other', { ttl: 5000 }).acquire({ wait: false });
        // The client sent its check at the first claim, on this connection; the same check sent
        // now is answered after it, so once it resolves the client has logged what it will.
        await store.checkSettings();
      } finally {
        await lh.close();
      }
      return lines.filter((l) => l.includes('store setting'));
    };
    const bad = await warned('allkeys-lru');
    assert.equal(bad.length, 1, `one line, at the first claim only: ${JSON.stringify(bad)}`);
    assert.match(bad[0]!, /maxmemory-policy allkeys-lru .*Set maxmemory-policy noeviction/);
    assert.deepEqual(await warned('noeviction'), []);
  });

  void it('the key layout: lease records carry an expiry (so volatile-* can evict them); the floor, layout and fence marks do not', async () => {
    await configure('noeviction', '0');
    const prefix = `evict-${Math.random().toString(36).slice(2, 8)}`;
    const store = await createRedisStore({ url, prefix });
    try {
      await store.migrate({ minToken: 10n });
      const [r] = await store.claim([{ name: 'job', holder: 'h', ttlMs: 5000, expect: null, nextNonce: 'n1' }]);
      assert.equal(r?.outcome, 'acquired');
      await fencedSet(store, { resource: 'res', token: r.token!, key: `{${prefix}}:data`, markKey: `{${prefix}}:fence:res`, value: 'x' });
      const k = keysFor(prefix);
      const pttl = async (key: string): Promise<number> => admin.pttl(key);
      assert.ok((await pttl(k.lease('job'))) > 0, 'the lease hash has an expiry: volatile-* policies may evict it');
      assert.ok((await pttl(k.leaseHistory('job'))) > 0, 'and so has its history stream');
      for (const key of [k.floor, k.layout, k.names, k.history, `{${prefix}}:fence:res`]) {
        assert.equal(await pttl(key), -1, `${key} has no expiry: only allkeys-* policies may evict it`);
      }
    } finally {
      await store.close();
    }
  });

  void it('volatile-ttl under memory pressure evicts a live lease, and a second process acquires it while the first still holds it', async () => {
    await configure('noeviction', '0');
    const prefix = `evict-${Math.random().toString(36).slice(2, 8)}`;
    const first: RedisStore = await createRedisStore({ url, prefix });
    const second: RedisStore = await createRedisStore({ url, prefix });
    try {
      const [a] = await first.claim([{ name: 'job', holder: 'first', ttlMs: 60_000, expect: null, nextNonce: 'n1' }]);
      assert.equal(a?.outcome, 'acquired');
      // Just above what is in use, then persistent filler: the only keys volatile-ttl may take
      // are the lease's own (its hash and its stream carry an expiry).
      const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1]);
      await configure('volatile-ttl', String(used + 512 * 1024));
      const evictedBefore = Number(/evicted_keys:(\d+)/.exec(await admin.info('stats'))![1]);
      for (let i = 0; i < 200 && (await admin.exists(keysFor(prefix).lease('job'))) === 1; i++) {
        await admin.set(`filler:${prefix}:${i}`, 'x'.repeat(16 * 1024)).catch(() => undefined); // OOM once nothing volatile is left
      }
      const evicted = Number(/evicted_keys:(\d+)/.exec(await admin.info('stats'))![1]) - evictedBefore;
      assert.ok(evicted > 0, 'Redis evicted keys');
      assert.equal(await admin.exists(keysFor(prefix).lease('job')), 0, "the live lease's hash was evicted");
      await configure('noeviction', '0');
      const [b] = await second.claim([{ name: 'job', holder: 'second', ttlMs: 60_000, expect: null, nextNonce: 'm1' }]);
      assert.equal(b?.outcome, 'acquired', "a second holder, a minute before the first's term would end");
      assert.ok(b.token! > a.token!, 'with a larger token (Redis TIME): the fence still refuses the first holder');
      const r = await doctor();
      assert.equal(r.code, 0, r.stdout);
      assert.match(evictionLine(r), /^warn\s+eviction\s+maxmemory-policy noeviction now, but Redis has evicted \d+ keys/, 'noeviction now, but it evicted before');
    } finally {
      await configure('noeviction', '0');
      await admin.eval(`for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end`, 0, `filler:${prefix}:*`);
      await first.close();
      await second.close();
    }
  });
});
