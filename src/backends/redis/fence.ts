import { ConfigError, FencedError } from '../../core/errors.js';
import type { CallOptions } from '../store.js';
import { driverFor, type RedisClientLike } from './driver.js';
import { ScriptRunner } from './runner.js';
import { RedisStore } from './store.js';
import { createHash } from 'node:crypto';
import { LUA_DECIMAL_LESS, type LuaScript } from './scripts.js';

/**
 * The resource-side fence for data kept in Redis: a write carries the lease's token, and Redis
 * applies it only if no higher token has been accepted for that resource. The high-water mark
 * and the write change together in one script, so there is no gap between check and write.
 *
 * Tokens are compared as decimal strings (length first, then digits), never as Lua numbers, so
 * tokens of any size compare exactly, including PostgreSQL's bigint tokens.
 *
 * Hazard: the mark is only as durable as this Redis. If it restarts without persistence, or a
 * replica missing the last mark is promoted, the mark is gone and a stale token would be
 * accepted once. Keep fenced data on a Redis with AOF (appendfsync everysec or always).
 */
const FENCED_WRITE: LuaScript = (() => {
  const source = `
-- KEYS: [1] high-water mark, [2] target. ARGV: [1] token, [2] 'set' | 'hset', [3] px ms or '',
-- [4..] the value (set) or field, value pairs (hset). Reply: [accepted '1'/'0', mark after].
-- Byte by byte: Lua's string < goes through strcoll, which follows the server's locale.
${LUA_DECIMAL_LESS}local mark = redis.call('GET', KEYS[1])
if mark and less(ARGV[1], mark) then return { '0', mark } end
-- Check the target's type before touching the mark: a WRONGTYPE error after SET would leave
-- the mark advanced with nothing written.
local ty = redis.call('TYPE', KEYS[2])['ok']
local want = 'string'
if ARGV[2] == 'hset' then want = 'hash' end
if ty ~= 'none' and ty ~= want then
  return redis.error_reply('WRONGTYPE fenced ' .. ARGV[2] .. ' target holds a ' .. ty)
end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[2] == 'set' then
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
  else
    redis.call('SET', KEYS[2], ARGV[4])
  end
else
  redis.call('HSET', KEYS[2], unpack(ARGV, 4))
  if ARGV[3] ~= '' then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
end
return { '1', ARGV[1] }
`;
  return { name: 'fenced-write', source, sha: createHash('sha1').update(source).digest('hex') };
})();

export interface RedisFenceTarget {
  /** What the token protects. The mark lives at `leasehold:fence:<resource>` unless `markKey` is given. */
  resource: string;
  /** The lease's fencing token for this term. */
  token: bigint;
  /** The key to write. On Redis Cluster, give it and `markKey` the same hash tag. */
  key: string;
  /** Where the high-water mark is kept. */
  markKey?: string;
  /** Expire the written key after this many milliseconds. */
  pxMs?: number;
}

/** Where fenced writes go: a leasehold RedisStore (its connection is reused) or your client. */
export type RedisFenceClient = RedisStore | RedisClientLike;

const MAX_FIELDS = 1000;

/**
 * `SET key value` if `token` is at least the highest token accepted for `resource`, advancing
 * that mark to `token`. An equal token is accepted (one term may write many times).
 *
 * @throws {FencedError} when a higher token has been accepted; nothing was changed.
 * @throws {StoreUnavailableError} when Redis could not be reached (the write may have happened).
 */
export async function fencedSet(
  target: RedisFenceClient,
  write: RedisFenceTarget & { value: string },
  options?: CallOptions,
): Promise<void> {
  await fencedWrite(target, write, 'set', [write.value], options);
}

/**
 * `HSET key field value ...` under the same rule as {@link fencedSet}.
 *
 * @throws {FencedError} when a higher token has been accepted; nothing was changed.
 * @throws {StoreUnavailableError} when Redis could not be reached (the write may have happened).
 */
export async function fencedHSet(
  target: RedisFenceClient,
  write: RedisFenceTarget & { fields: Readonly<Record<string, string>> },
  options?: CallOptions,
): Promise<void> {
  const pairs = Object.entries(write.fields);
  if (pairs.length === 0) throw new ConfigError('fencedHSet needs at least one field');
  if (pairs.length > MAX_FIELDS) throw new ConfigError(`fencedHSet takes at most ${MAX_FIELDS} fields per call`);
  await fencedWrite(target, write, 'hset', pairs.flat(), options);
}

async function fencedWrite(
  target: RedisFenceClient,
  write: RedisFenceTarget,
  mode: 'set' | 'hset',
  values: string[],
  options?: CallOptions,
): Promise<void> {
  if (typeof write.token !== 'bigint' || write.token < 0n) {
    throw new ConfigError(`fencing token must be a non-negative bigint, got ${String(write.token)}`);
  }
  if (write.resource === '') throw new ConfigError('fenced write needs a resource name');
  if (write.pxMs !== undefined && (!Number.isInteger(write.pxMs) || write.pxMs <= 0)) {
    throw new ConfigError(`pxMs must be a positive whole number of milliseconds, got ${write.pxMs}`);
  }
  const runner =
    target instanceof RedisStore ? target.scripts : new ScriptRunner(driverFor(target, false), { where: 'your Redis client', prefix: 'leasehold' }, 5000);
  const markKey = write.markKey ?? `leasehold:fence:${write.resource}`;
  const token = write.token.toString();
  const reply = await runner.run(
    FENCED_WRITE,
    [markKey, write.key],
    [token, mode, write.pxMs === undefined ? '' : String(write.pxMs), ...values],
    options?.signal,
  );
  const [accepted, mark] = Array.isArray(reply) ? reply.map((x: unknown) => String(x)) : [];
  if (accepted !== '1') throw new FencedError(write.resource, write.token, mark === undefined ? null : BigInt(mark));
}
