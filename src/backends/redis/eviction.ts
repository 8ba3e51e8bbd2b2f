import { createHash } from 'node:crypto';
import { errorMessage } from '../../core/errors.js';
import type { StoreSettingCheck } from '../../core/port.js';
import type { ScriptRunner } from './runner.js';
import type { LuaScript } from './scripts.js';

/**
 * Whether Redis may delete leasehold's keys to free memory. A lease record that Redis evicts
 * is a free lease to the next claim: a second process acquires it while the holder still
 * believes it leads, until the holder's next renewal is answered "lost". Tokens still rise
 * (they are derived from TIME), so a fence refuses the stale writes, but unfenced work runs
 * twice.
 *
 * Which policies reach which keys (keys.ts): every lease hash and its history stream carry an
 * expiry (PEXPIREAT, `retainMs` after the term would end; `retainMs: 0` makes it the expiry
 * itself), so the volatile-* policies, which choose among keys with an expiry, can evict a live
 * lease as readily as allkeys-* can. The token floor, the layout version, the name index, the
 * global history and fence high-water marks carry none: only allkeys-* reach them, and a lost
 * mark lets one stale write through its fence. So `noeviction` is the only safe policy.
 */

/**
 * INFO from inside a script: the store talks to Redis only through scripts (driver.ts), and
 * INFO, unlike CONFIG GET, may run in one; managed Redis services that refuse CONFIG allow it.
 * KEYS[1] only routes the call to the node holding the store's keys.
 */
const EVICTION_INFO: LuaScript = (() => {
  const source = `return { redis.call('INFO', 'memory'), redis.call('INFO', 'stats') }`;
  return { name: 'eviction-info', source, sha: createHash('sha1').update(source).digest('hex') };
})();

/** The policies Redis has (7.x); each `volatile-*` picks among keys with an expiry, each `allkeys-*` among all. */
const VOLATILE = /^volatile-(lru|lfu|random|ttl)$/;
const ALLKEYS = /^allkeys-(lru|lfu|random)$/;

const HOW = 'CONFIG SET maxmemory-policy noeviction, and in redis.conf on every node a failover may promote';

interface EvictionSettings {
  policy: string;
  /** Bytes; 0 is no limit (Redis then never evicts). */
  maxmemory: number;
  /** Keys evicted since the server started (INFO stats), when it said. */
  evictedKeys: number | undefined;
}

/** What the settings mean for leasehold's keys: `fail` when Redis can evict a lease record now. */
function evictionVerdict(s: EvictionSettings): StoreSettingCheck {
  const evicted = s.evictedKeys !== undefined && s.evictedKeys > 0 ? ` It has evicted ${s.evictedKeys} keys since it started (INFO evicted_keys).` : '';
  if (s.policy === 'noeviction') {
    if (evicted !== '') {
      return {
        check: 'eviction',
        status: 'warn',
        detail: `maxmemory-policy noeviction now, but Redis has evicted ${s.evictedKeys} keys since it started, under an earlier policy: a lease evicted then may have had two holders. Keep noeviction`,
      };
    }
    return {
      check: 'eviction',
      status: 'ok',
      detail: 'maxmemory-policy noeviction: a full Redis refuses writes instead of deleting lease records (renewals then fail and leaders stand down at their deadline)',
    };
  }
  const what = VOLATILE.test(s.policy)
    ? 'live lease records (each carries an expiry, its retention, and volatile-* policies choose among keys with one; the token floor and fence marks have none and are spared)'
    : ALLKEYS.test(s.policy)
      ? 'any key: live lease records, the token floor, and fence high-water marks kept on this Redis (a lost mark lets one stale write through)'
      : 'keys under a policy this leasehold does not know';
  if (s.maxmemory === 0) {
    return {
      check: 'eviction',
      status: 'warn',
      detail: `maxmemory-policy ${s.policy}, but no maxmemory is set, so Redis evicts nothing now; once a limit is set it may evict ${what}. Set maxmemory-policy noeviction before setting one (${HOW}).${evicted}`,
    };
  }
  return {
    check: 'eviction',
    status: 'fail',
    detail:
      `maxmemory-policy ${s.policy} with maxmemory ${bytes(s.maxmemory)}: when memory is full Redis evicts ${what}. An evicted lease is acquired by a ` +
      `second process while its holder still leads (a fence refuses the stale writes; unfenced work runs twice). Set maxmemory-policy noeviction (${HOW}).${evicted}`,
  };
}

function bytes(n: number): string {
  return n >= 1024 * 1024 && n % (1024 * 1024) === 0 ? `${n / (1024 * 1024)}mb` : `${n} bytes`;
}

/** Reads the server's policy (INFO) and judges it; a server that will not say is a warning, not a pass. */
export async function evictionCheck(scripts: ScriptRunner, routeKey: string, signal?: AbortSignal): Promise<StoreSettingCheck> {
  let settings: EvictionSettings;
  try {
    const reply = await scripts.run(EVICTION_INFO, [routeKey], [], signal);
    const text = Array.isArray(reply) ? reply.map((x: unknown) => (Buffer.isBuffer(x) ? x.toString() : String(x))).join('\n') : '';
    const field = (name: string): string | undefined => new RegExp(`^${name}:(.*?)\\r?$`, 'm').exec(text)?.[1]?.trim();
    const policy = field('maxmemory_policy');
    const maxmemory = Number(field('maxmemory'));
    if (policy === undefined || !Number.isFinite(maxmemory)) throw new Error('INFO memory has no maxmemory_policy (Redis before 4.0, or a proxy that rewrites INFO)');
    const evictedKeys = Number(field('evicted_keys'));
    settings = { policy, maxmemory, evictedKeys: Number.isFinite(evictedKeys) ? evictedKeys : undefined };
  } catch (err) {
    return {
      check: 'eviction',
      status: 'warn',
      detail: `could not read the eviction policy (${errorMessage(err)}); make sure maxmemory-policy is noeviction: any other policy can evict a live lease`,
    };
  }
  return evictionVerdict(settings);
}
