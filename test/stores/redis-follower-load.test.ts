import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold } from '../../src/core/leasehold.js';
import { createRedisStore, type RedisStore } from '../../src/backends/redis/index.js';
import { TEST_REDIS_URL, deleteRedisKeys, freshRedisPrefix } from '../helpers/redis-store.js';

/**
 * What one idle follower costs a real Redis: the requests its own connections send, seen through
 * MONITOR and told apart from every other client of the shared server by their connection names
 * (CLIENT LIST). Commands a Lua script runs inside the server show as "lua" and are not requests.
 */
const TTL = 2000;
const TTLS = 3;
const SETUP_STEP_MS = 30_000;

async function bounded<T>(step: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`set-up: ${step} did not finish within ${SETUP_STEP_MS / 1000}s (Redis at ${TEST_REDIS_URL})`)), SETUP_STEP_MS);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

void describe('redis: an idle follower', () => {
  const prefix = freshRedisPrefix();
  const followerName = `${prefix}-follower`;
  let monitorConn: Redis;
  let stopMonitor = (): void => {};
  let seen: { at: number; source: string; args: string[] }[] = [];
  let leaderStore: RedisStore;
  let followerClient: Redis;
  let followerStore: RedisStore;

  // Each step of the set-up is bounded and named: CI54 saw this file make no progress for over
  // 190 s with none of its tests started, and nothing said which step never ended. Each is a
  // connection to the local Redis (milliseconds); 30 s is a hang, not load.
  before(async () => {
    monitorConn = new Redis(TEST_REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0 });
    monitorConn.on('error', () => {});
    const monitor = await bounded('MONITOR on its own connection', monitorConn.monitor());
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      seen.push({ at: performance.now(), source, args });
    });
    stopMonitor = () => monitor.disconnect();
    leaderStore = await bounded("the leader's store", createRedisStore({ url: TEST_REDIS_URL, prefix }));
    followerClient = new Redis(TEST_REDIS_URL, { connectionName: followerName, maxRetriesPerRequest: 0 });
    followerClient.on('error', () => {});
    followerStore = await bounded("the follower's store", createRedisStore({ client: followerClient, prefix }));
  });

  after(async () => {
    await followerStore.close();
    followerClient.disconnect();
    await leaderStore.close();
    stopMonitor();
    monitorConn.disconnect();
    await deleteRedisKeys(prefix);
  });

  /**
   * The follower's client, and the subscribers on this prefix (the leader's and the follower's:
   * both carry the channel's name; neither may send anything but its set-up).
   */
  async function followerAddresses(): Promise<string[]> {
    const list = (await followerClient.client('LIST')) as string;
    return list
      .split('\n')
      .filter((l) => l.includes(` name=${followerName} `) || (l.includes(` name=${prefix}:`) && l.includes('subscriber')))
      .map((l) => /addr=(\S+)/.exec(l)![1]!);
  }

  void it('sends about one claim per TTL while the lease is held', async () => {
    const leader = new Leasehold({ store: leaderStore });
    const follower = new Leasehold({ store: followerStore });
    const held = leader.lease('busy', { ttl: TTL });
    await held.acquire();
    seen = [];
    const t0 = performance.now();
    const acquired = follower.lease('busy', { ttl: TTL }).acquire({ wait: '60s' });
    await sleep(TTL * TTLS);
    const addrs = await followerAddresses();
    assert.equal(addrs.length, 3, `the follower's client and both subscribers are in CLIENT LIST (${addrs.join(', ')})`);
    const window = seen.filter((s) => s.at >= t0 && addrs.includes(s.source));
    const requests = window.filter((s) => !['hello', 'client', 'info', 'subscribe'].includes(s.args[0]!.toLowerCase()));
    const claims = requests.filter((s) => ['evalsha', 'eval'].includes(s.args[0]!.toLowerCase()));
    // Nothing but claims (no PING, TIME, PTTL, SCRIPT EXISTS): the subscriber only set itself up.
    assert.deepEqual(
      requests.filter((s) => !claims.includes(s)).map((s) => s.args.join(' ')),
      [],
      'an idle follower sends nothing but its claims',
    );
    // The first claim, then one at each reported expiry: the holder renews every TTL/3, so the
    // expiry is 2/3 to 1 TTL away when asked; at most one more for the jitter at the edges.
    assert.ok(claims.length <= TTLS + 2, `${claims.length} claims in ${TTLS} TTLs: more than one per TTL`);
    // And it does ask at expiry: a follower that only listened would miss a holder that crashed.
    assert.ok(claims.length >= TTLS, `${claims.length} claims in ${TTLS} TTLs: the follower stopped checking at expiry`);

    assert.equal(await held.release(), true);
    await acquired;
    await follower.close();
    await leader.close();
  });

  /**
   * Woken, told apart from asking again at the expiry by what the follower sent, not by how long
   * it took (that measured the host's load: 1,073 ms against a TTL/4 bound under stress-ng). At a
   * 60 s TTL the follower's first claim finds the lease held with the expiry 40-60 s away, and its
   * next claim without a wake-up would be then; one more claim right after the release, which
   * takes the lease, is the wake-up. The wait bound (TTL/2) only ends a broken run early.
   */
  void it('takes a release at once: its one claim after the release, long before the expiry it was told, takes the lease', async () => {
    const LONG_TTL = 60_000;
    const leader = new Leasehold({ store: leaderStore });
    const follower = new Leasehold({ store: followerStore });
    const held = leader.lease('busy-long', { ttl: LONG_TTL });
    await held.acquire();
    seen = [];
    const addrs = await followerAddresses();
    // A claim names the lease's key (a store's first script call also checks the key layout).
    const claimsSoFar = (): number =>
      seen.filter((x) => addrs.includes(x.source) && ['evalsha', 'eval'].includes(x.args[0]!.toLowerCase()) && x.args.some((a) => a.endsWith(':lease:busy-long'))).length;
    const acquired = follower.lease('busy-long', { ttl: LONG_TTL }).acquire({ wait: LONG_TTL / 2 });
    // The follower's first claim has been answered 'busy' once it is seen and it is still waiting.
    for (let i = 0; claimsSoFar() < 1; i++) {
      assert.ok(i < 600, 'the follower never sent its first claim');
      await sleep(50);
    }
    await sleep(100);
    assert.equal(claimsSoFar(), 1, 'one claim while the lease was held (the next is due at its expiry, 40-60 s away)');
    assert.equal(await held.release(), true);
    await acquired;
    // MONITOR reports a command on its own connection, after the server ran it: the claim that
    // took the lease can show after its answer reached the follower (1 of 3 runs here).
    for (let i = 0; claimsSoFar() < 2 && i < 100; i++) await sleep(50);
    assert.equal(claimsSoFar(), 2, 'exactly one claim after the release, and it took the lease: the follower was woken, not timed');
    await follower.close();
    await leader.close();
  });
});
