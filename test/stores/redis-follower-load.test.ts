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

void describe('redis: an idle follower', () => {
  const prefix = freshRedisPrefix();
  const followerName = `${prefix}-follower`;
  let monitorConn: Redis;
  let stopMonitor = (): void => {};
  let seen: { at: number; source: string; args: string[] }[] = [];
  let leaderStore: RedisStore;
  let followerClient: Redis;
  let followerStore: RedisStore;

  before(async () => {
    monitorConn = new Redis(TEST_REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0 });
    monitorConn.on('error', () => {});
    const monitor = await monitorConn.monitor();
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      seen.push({ at: performance.now(), source, args });
    });
    stopMonitor = () => monitor.disconnect();
    leaderStore = await createRedisStore({ url: TEST_REDIS_URL, prefix });
    followerClient = new Redis(TEST_REDIS_URL, { connectionName: followerName, maxRetriesPerRequest: 0 });
    followerClient.on('error', () => {});
    followerStore = await createRedisStore({ client: followerClient, prefix });
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

  void it('sends about one claim per TTL while the lease is held, and takes a release at once (pub/sub wakes it)', async () => {
    const leader = new Leasehold({ store: leaderStore });
    const follower = new Leasehold({ store: followerStore });
    const held = leader.lease('busy', { ttl: TTL });
    await held.acquire();
    seen = [];
    const t0 = performance.now();
    const acquired = follower.lease('busy', { ttl: TTL }).acquire({ wait: '60s' });
    let acquiredAt = 0;
    void acquired.then(() => (acquiredAt = performance.now()));
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

    const released = performance.now();
    assert.equal(await held.release(), true);
    await acquired;
    const took = acquiredAt - released;
    // The holder renewed within TTL/3, so waiting for the expiry would take over 2/3 of a TTL.
    assert.ok(took < TTL / 4, `the follower took ${Math.round(took)}ms to take the released lease: it was not woken`);
    await follower.close();
    await leader.close();
  });
});
