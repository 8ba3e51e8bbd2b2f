import { createHash } from 'node:crypto';
import { SchemaError } from '../../core/errors.js';

/**
 * The Redis store's operations, one Lua script each. Every script reads the clock with `TIME`
 * inside Redis, so expiry is judged by the store's clock, never the caller's.
 *
 * Conventions shared by all scripts:
 *  - Replies are flat arrays of strings, with '' for "none". Lua numbers would be truncated to
 *    integers and Lua `false` turns into a RESP3 boolean on some clients, so strings are the one
 *    shape that reads the same through ioredis and node-redis, over RESP2 and RESP3.
 *  - Numbers are formatted with `%.0f`: Lua's `tostring` uses 14 significant digits, which would
 *    silently round a 16-digit token. Lua numbers are doubles, so the arithmetic is exact below
 *    2^53; the claim script refuses (before writing anything) to issue a token at or above that.
 *  - Every key a script touches is passed in KEYS, and all of a store's keys share the hash tag
 *    `{prefix}`, so one script never spans two Cluster slots.
 */
export interface LuaScript {
  readonly name: string;
  readonly source: string;
  /** SHA1 of the source, for EVALSHA. */
  readonly sha: string;
}

/** The one way a script is made: its source as a named constant, and the SHA that EVALSHA sends. */
export function lua(name: string, source: string): LuaScript {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

/** The key layout version. `migrate()` records it; claims refuse keys written by a newer layout. */
/**
 * Lua: decimal token strings compared exactly, by length then byte by byte (no double rounding,
 * and not Lua's string <, which goes through strcoll and the server's locale). Shared by the
 * fence and the slot ledger scripts.
 */
export const LUA_DECIMAL_LESS = `
local function less(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
`;

export const LAYOUT_VERSION = 1;

/** Error prefix the claim script uses for "keys from a newer leasehold"; mapped to SchemaError. */
export const LAYOUT_ERROR = 'LEASEHOLD_LAYOUT';

/**
 * Lua: Redis's own clock at the start of a script (TIME: microseconds and milliseconds), and
 * `fmt` for whole numbers as decimal strings. Every leasehold script that reads time starts
 * with this: the store's clock, never the caller's.
 */
export const LUA_CLOCK = `
local function fmt(x) return string.format('%.0f', x) end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
`;

const PRELUDE = LUA_CLOCK;

/** A script's list reply as strings (nil, false and missing fields as ''), once, for every caller. */
export function toStrings(reply: unknown): string[] {
  if (!Array.isArray(reply)) throw new SchemaError(`a leasehold script answered ${typeof reply}, not a list; reinstall leasehold`);
  return reply.map((x: unknown) => (x === null || x === undefined || x === false ? '' : Buffer.isBuffer(x) ? x.toString() : String(x)));
}

/**
 * The token floor in force now: the floor an operator set, plus the microseconds since it was
 * set (its \`floor-at\`). A fixed floor above TIME would make tokens a counter from the floor up,
 * and a Redis restored from a dump saved after the floor was set would count the same tokens
 * again; a floor that moves with the clock keeps every token time-derived, so a restart from an
 * older dump still issues larger ones. A floor without \`floor-at\` (set by an older leasehold)
 * stays fixed. Needs PRELUDE's now_us.
 */
const FLOOR_NOW = `
local function floor_now(fkey, akey)
  local f = tonumber(redis.call('GET', fkey) or '0') or 0
  local at = tonumber(redis.call('GET', akey) or '')
  if at and now_us > at then f = f + (now_us - at) end
  return f
end
`;

// The fields written to both history streams, in the order the history script reads them back.
const HISTORY_FIELDS = `'name', name, 'event', ev, 'holder', hold, 'prev', prev, 'token', tok, 'at', fmt(now), 'detail', detail`;

const RECORD = `
-- Appends one event to the global stream and the lease's own stream, under the same id.
local function record(gkey, lkey, gcap, lcap, name, ev, hold, prev, tok, detail)
  local id = redis.call('XADD', gkey, 'MAXLEN', '~', gcap, '*', ${HISTORY_FIELDS})
  -- pcall: the per-lease stream can only refuse the id if someone deleted the global stream
  -- and left this one; losing one per-lease entry then is better than failing the claim.
  redis.pcall('XADD', lkey, 'MAXLEN', '~', lcap, id, ${HISTORY_FIELDS})
end
`;

/**
 * Acquire-or-renew for a batch of leases, in one atomic script (the semantics of the PostgreSQL
 * store's `claim` function, row for row).
 *
 * KEYS: [1] global history stream, [2] name index (zset), [3] layout version key, then per
 *   request i: [2+2i] the lease hash, [3+2i] the lease's history stream; then the token floor
 *   and the floor's time (`floor-at`).
 * ARGV: [1] retain ms, [2] global history cap, [3] per-lease history cap, [4] layout version,
 *   [5] the freed channel, then per request 7 values: name, holder, expected nonces
 *   (comma-joined; nonces are base64url), next nonce, ttl ms, contend (1/0), and the
 *   contender's unlessReleasedSince in ms ('' for none).
 * Reply: [now ms, then per request: outcome, reason, token, holder, expires at ms, the holding
 *   term's start in ms (busy answers; else ''), and last the microseconds the script ran by
 *   Redis's own clock (store.ts sizes the next batch by it)].
 *
 * unlessReleasedSince (ClaimRequest): a contender whose lease was released by a term that began
 * at or after it is answered busy with reason 'released-since', from the HMGET alone: nothing
 * written, no token spent (a per-slot cron contender that arrives after its slot's winner has
 * run and released the slot's term).
 *
 * Clones (store.ts, expectation 4b): a renewal with our holder id but a nonce the hash does not
 * hold, on a live term, means two processes share one term. The script ends the term there and
 * then (holder and nonce cleared, `exp` = now, `ended` = conflict, a 'conflict' history entry,
 * the name published like a release) and answers lost/cloned; the other clone's next renewal
 * finds no holder and `ended = conflict` and is answered lost/cloned as well.
 *
 * Tokens: max(last stored token + 1, TIME in microseconds, floor in force + 1 (FLOOR_NOW)). The second term is what
 * keeps tokens increasing when the hash is gone (Redis restarted empty, a replica that missed the
 * last writes was promoted, or the record outlived its retention): see README.md. The third is
 * the operator's floor (`leasehold migrate --min-token`), for when the clock cannot be trusted.
 */
export const CLAIM = lua(
  'claim',
  `${PRELUDE}${FLOOR_NOW}${RECORD}
local version = redis.call('GET', KEYS[3])
if version and tonumber(version) and tonumber(version) > tonumber(ARGV[4]) then
  return redis.error_reply('${LAYOUT_ERROR} keys under this prefix use layout ' .. version ..
    ', newer than this leasehold understands (' .. ARGV[4] .. '); upgrade leasehold')
end
local retain = tonumber(ARGV[1])
local n = (#ARGV - 5) / 7
-- The operator's floor matters only to a new token: read on the first acquisition, so a busy
-- follower's claim and a renewal are one HMGET (and a renewal's HSET) after the layout check.
local floor
local plan = {}
-- Pass 1 reads and decides; nothing is written until every decision is known to be writable,
-- because a Lua error halfway through would leave half a batch applied.
for i = 1, n do
  local a = 5 + (i - 1) * 7
  local p = { name = ARGV[a + 1], holder = ARGV[a + 2], expect = ARGV[a + 3], nxt = ARGV[a + 4],
              ttl = tonumber(ARGV[a + 5]), contend = ARGV[a + 6] == '1', since = tonumber(ARGV[a + 7]),
              key = KEYS[2 + 2 * i], hkey = KEYS[3 + 2 * i] }
  local cur = redis.call('HMGET', p.key, 'holder', 'nonce', 'token', 'exp', 'ended', 'gc', 'start')
  p.ch, p.cn, p.ct, p.ce, p.ended, p.gc, p.start = cur[1], cur[2], cur[3], cur[4], cur[5], cur[6], cur[7]
  local cexp = p.ce and tonumber(p.ce)
  local cstart = p.start and tonumber(p.start)
  -- Is the stored nonce one of the expected ones? A plain (not pattern) find in ',a,b,c,'.
  local nonce_ok = p.cn and p.cn ~= '' and p.expect ~= '' and
    string.find(',' .. p.expect .. ',', ',' .. p.cn .. ',', 1, true) ~= nil
  if not p.contend then
    if p.ch == p.holder and nonce_ok and cexp and cexp > now then p.outcome = 'renewed' else p.outcome = 'lost' end
  elseif p.since and (not p.ch) and p.ended == 'released' and cstart and cstart >= p.since then
    p.outcome = 'busy'
    p.reason = 'released-since'
  elseif (not p.ch) or (not cexp) or cexp <= now then
    p.outcome = 'acquired'
  else
    p.outcome = 'busy'
  end
  if p.outcome == 'acquired' then
    if floor == nil then floor = floor_now(KEYS[4 + 2 * n], KEYS[5 + 2 * n]) end
    local last = (p.ct and tonumber(p.ct)) or 0
    local tok = last + 1
    if now_us > tok then tok = now_us end
    if floor + 1 > tok then tok = floor + 1 end
    if tok >= 9007199254740992 then
      return redis.error_reply('ERR leasehold: the next token for ' .. p.name .. ' would pass 2^53; the stored token is ' .. tostring(p.ct))
    end
    p.tok = tok
  elseif p.outcome == 'lost' then
    if p.ch == p.holder and nonce_ok then p.reason = 'expired'
    elseif p.ch == p.holder then
      p.reason = 'cloned'
      -- Our holder id, a nonce we do not hold, a live term: two processes renew one term.
      -- Neither can be told from the other, so the term ends for both (written in pass 2).
      if cexp and cexp > now then p.conflict = true end
    elseif (not p.ch) and p.ended == 'revoked' then p.reason = 'revoked'
    elseif (not p.ch) and p.ended == 'released' then p.reason = 'released'
    elseif (not p.ch) and p.ended == 'conflict' then p.reason = 'cloned'
    elseif not p.ch then p.reason = 'expired'
    else p.reason = 'superseded' end
  end
  plan[i] = p
end
local out = { fmt(now) }
for i = 1, n do
  local p = plan[i]
  if p.outcome == 'acquired' or p.outcome == 'renewed' then
    local exp = now + p.ttl
    -- Redis deletes the record itself, \`retain\` after the term would end (\`gc\`). A renewal
    -- moves that deadline only once it has fallen behind by more than retain/2, so most
    -- renewals are one HMGET and one HSET; the record still outlives its expiry by retain/2.
    local gc = exp + retain
    local move_gc = p.outcome == 'acquired' or not p.gc or gc - tonumber(p.gc) > retain / 2
    local tokstr
    if p.outcome == 'acquired' then
      tokstr = fmt(p.tok)
      redis.call('HSET', p.key, 'holder', p.holder, 'nonce', p.nxt, 'token', tokstr, 'exp', fmt(exp),
                 'start', fmt(now), 'renewed', fmt(now), 'gc', fmt(gc))
      redis.call('HDEL', p.key, 'ended')
      -- A holder still in the hash means the previous term expired without a release.
      local ev = 'acquired'
      if p.ch then ev = 'takeover' end
      record(KEYS[1], p.hkey, ARGV[2], ARGV[3], p.name, ev, p.holder, p.ch or '', tokstr, '')
      redis.call('ZADD', KEYS[2], now, p.name)
    else
      tokstr = p.ct
      if move_gc then
        redis.call('HSET', p.key, 'nonce', p.nxt, 'exp', fmt(exp), 'renewed', fmt(now), 'gc', fmt(gc))
      else
        redis.call('HSET', p.key, 'nonce', p.nxt, 'exp', fmt(exp), 'renewed', fmt(now))
      end
    end
    if move_gc then
      redis.call('PEXPIREAT', p.key, fmt(gc))
      redis.call('PEXPIREAT', p.hkey, fmt(gc))
    end
    out[#out + 1] = p.outcome
    out[#out + 1] = ''
    out[#out + 1] = tokstr
    out[#out + 1] = p.holder
    out[#out + 1] = fmt(exp)
    out[#out + 1] = ''
  elseif p.conflict then
    -- As a release does: the token stays (the next one is larger), the record is kept for
    -- \`retain\`, and followers are woken.
    redis.call('HDEL', p.key, 'holder', 'nonce')
    redis.call('HSET', p.key, 'exp', fmt(now), 'ended', 'conflict')
    record(KEYS[1], p.hkey, ARGV[2], ARGV[3], p.name, 'conflict', '', p.holder, p.ct,
           'two processes renewed one term (a restored snapshot or a clone)')
    local until_ms = fmt(now + retain)
    redis.call('HSET', p.key, 'gc', until_ms)
    redis.call('PEXPIREAT', p.key, until_ms)
    redis.call('PEXPIREAT', p.hkey, until_ms)
    redis.call('PUBLISH', ARGV[5], p.name)
    out[#out + 1] = 'lost'
    out[#out + 1] = 'cloned'
    out[#out + 1] = p.ct
    out[#out + 1] = ''
    out[#out + 1] = fmt(now)
    out[#out + 1] = ''
  elseif p.reason == 'released-since' then
    out[#out + 1] = 'busy'
    out[#out + 1] = p.reason
    out[#out + 1] = p.ct or ''
    out[#out + 1] = ''
    out[#out + 1] = ''
    out[#out + 1] = ''
  else
    out[#out + 1] = p.outcome
    out[#out + 1] = p.reason or ''
    out[#out + 1] = p.ct or ''
    out[#out + 1] = p.ch or ''
    out[#out + 1] = p.ce or ''
    if p.outcome == 'busy' then out[#out + 1] = p.start or '' else out[#out + 1] = '' end
  end
end
-- How long this script held Redis's single thread, by Redis's clock (the store sizes its next
-- batch so that no script holds it longer than its bound).
local t_end = redis.call('TIME')
out[#out + 1] = fmt(tonumber(t_end[1]) * 1000000 + tonumber(t_end[2]) - now_us)
return out
`,
);

/**
 * Releases the caller's term if the holder and one of the expected nonces match (expiry is not
 * checked, as in PostgreSQL: a late release of an expired, untaken term is still ours to end).
 * The token stays in the hash so the next one is larger; the lease name is published.
 *
 * KEYS: [1] lease hash, [2] global history, [3] lease history.
 * ARGV: [1] name, [2] holder, [3] retain ms, [4] global cap, [5] lease cap, [6] channel, [7..] nonces.
 * Reply: ['1'] released, ['0'] not ours.
 */
export const RELEASE = lua(
  'release',
  `${PRELUDE}${RECORD}
local cur = redis.call('HMGET', KEYS[1], 'holder', 'nonce', 'token')
if cur[1] ~= ARGV[2] or not cur[2] then return { '0' } end
local match = false
for i = 7, #ARGV do
  if ARGV[i] == cur[2] then match = true end
end
if not match then return { '0' } end
redis.call('HDEL', KEYS[1], 'holder', 'nonce')
redis.call('HSET', KEYS[1], 'exp', fmt(now), 'ended', 'released')
record(KEYS[2], KEYS[3], ARGV[4], ARGV[5], ARGV[1], 'released', '', ARGV[2], cur[3], '')
local until_ms = fmt(now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'gc', until_ms)
redis.call('PEXPIREAT', KEYS[1], until_ms)
redis.call('PEXPIREAT', KEYS[3], until_ms)
redis.call('PUBLISH', ARGV[6], ARGV[1])
return { '1' }
`,
);

/**
 * RELEASE for a batch of leases in one script: each row as RELEASE answers it, in order (a
 * process closing with N leases sends N / batch scripts instead of N). Each release is
 * independent of the others; the names are published once, together.
 *
 * KEYS: [1] global history, then per request i: [2i] lease hash, [2i+1] lease history.
 * ARGV: [1] retain ms, [2] global cap, [3] lease cap, [4] channel, then per request 3 values:
 *   name, holder, expected nonces (comma-joined; nonces are base64url).
 * Reply: per request '1' released, '0' not ours.
 */
export const RELEASE_MANY = lua(
  'release-many',
  `${PRELUDE}${RECORD}
local n = (#ARGV - 4) / 3
local until_ms = fmt(now + tonumber(ARGV[1]))
local out = {}
for i = 1, n do
  local a = 4 + (i - 1) * 3
  local name, holder, expect = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local key, hkey = KEYS[2 * i], KEYS[2 * i + 1]
  local cur = redis.call('HMGET', key, 'holder', 'nonce', 'token')
  if cur[1] == holder and cur[2] and cur[2] ~= '' and expect ~= '' and
     string.find(',' .. expect .. ',', ',' .. cur[2] .. ',', 1, true) ~= nil then
    redis.call('HDEL', key, 'holder', 'nonce')
    redis.call('HSET', key, 'exp', fmt(now), 'ended', 'released', 'gc', until_ms)
    record(KEYS[1], hkey, ARGV[2], ARGV[3], name, 'released', '', holder, cur[3], '')
    redis.call('PEXPIREAT', key, until_ms)
    redis.call('PEXPIREAT', hkey, until_ms)
    redis.call('PUBLISH', ARGV[4], name)
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return out
`,
);

/**
 * Operator revocation of whoever holds the lease (held or expired-but-untaken). The holder's
 * next renewal finds no holder and `ended = revoked`, and is told 'lost' / 'revoked'.
 *
 * KEYS: [1] lease hash, [2] global history, [3] lease history.
 * ARGV: [1] name, [2] reason, [3] retain ms, [4] global cap, [5] lease cap, [6] channel.
 * Reply: [revoked '1'/'0', previous holder, token] ('' for none).
 */
export const REVOKE = lua(
  'revoke',
  `${PRELUDE}${RECORD}
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token')
if not cur[2] then return { '0', '', '' } end
if not cur[1] then return { '0', '', cur[2] } end
redis.call('HDEL', KEYS[1], 'holder', 'nonce')
redis.call('HSET', KEYS[1], 'exp', fmt(now), 'ended', 'revoked')
record(KEYS[2], KEYS[3], ARGV[4], ARGV[5], ARGV[1], 'revoked', '', cur[1], cur[2], ARGV[2])
local until_ms = fmt(now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'gc', until_ms)
redis.call('PEXPIREAT', KEYS[1], until_ms)
redis.call('PEXPIREAT', KEYS[3], until_ms)
redis.call('PUBLISH', ARGV[6], ARGV[1])
return { '1', cur[1], cur[2] }
`,
);

/** KEYS: [1] name index. Reply: every name that has had a term (some may have been deleted since). */
export const LIST_NAMES = lua('list-names', `return redis.call('ZRANGE', KEYS[1], 0, -1)`);

/**
 * Reads lease hashes. Names whose hash Redis has deleted (retention passed) leave the index.
 *
 * KEYS: [1] name index, [2..] lease hashes. ARGV: the names, in KEYS order.
 * Reply: [now ms, then per lease: found '1'/'0', holder, token, expires at, started at, renewed at].
 */
export const READ_LEASES = lua(
  'read-leases',
  `${PRELUDE}
local out = { fmt(now) }
for i = 2, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'holder', 'token', 'exp', 'start', 'renewed')
  if not v[2] then
    redis.call('ZREM', KEYS[1], ARGV[i - 1])
    for _ = 1, 6 do out[#out + 1] = '' end
    out[#out - 5] = '0'
  else
    out[#out + 1] = '1'
    for j = 1, 5 do out[#out + 1] = v[j] or '' end
  end
end
return out
`,
);

/**
 * The newest ARGV[1] entries of one history stream, newest first.
 * KEYS: [1] stream. Reply: flat, 8 per entry: id, name, event, holder, prev, token, at, detail.
 */
export const READ_HISTORY = lua(
  'read-history',
  `
local entries = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])
local out = {}
for _, e in ipairs(entries) do
  local f = {}
  local kv = e[2]
  for j = 1, #kv, 2 do f[kv[j]] = kv[j + 1] end
  out[#out + 1] = e[1]
  out[#out + 1] = f['name'] or ''
  out[#out + 1] = f['event'] or ''
  out[#out + 1] = f['holder'] or ''
  out[#out + 1] = f['prev'] or ''
  out[#out + 1] = f['token'] or '0'
  out[#out + 1] = f['at'] or '0'
  out[#out + 1] = f['detail'] or ''
end
return out
`,
);

/** Reply: [seconds, microseconds] of the Redis server's clock. */
export const NOW = lua('now', `local t = redis.call('TIME') return { t[1], t[2] }`);

/**
 * Records the layout version unless a newer one is there.
 * KEYS: [1] layout key. ARGV: [1] this build's version. Reply: [version found or set].
 */
export const MIGRATE = lua(
  'migrate',
  `
local v = redis.call('GET', KEYS[1])
if v and tonumber(v) and tonumber(v) > tonumber(ARGV[1]) then return { v } end
redis.call('SET', KEYS[1], ARGV[1])
return { ARGV[1] }
`,
);

/**
 * Raises the token floor, never lowers it (the floor in force, which moves with the clock:
 * FLOOR_NOW), and records when. KEYS: [1] floor key, [2] floor-at key. ARGV: [1] the floor wanted
 * (decimal, below 2^53). Reply: [floor now in force (the floor as set when at or above the one
 * wanted), '1' if raised else '0'].
 */
export const RAISE_FLOOR = lua(
  'raise-floor',
  `${PRELUDE}${FLOOR_NOW}
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local eff = floor_now(KEYS[1], KEYS[2])
local want = tonumber(ARGV[1])
if want > eff then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], fmt(now_us))
  return { ARGV[1], '1' }
end
if want <= cur then return { fmt(cur), '0' } end
return { fmt(eff), '0' }`,
);

/**
 * A lower bound of the next token: what the claim script would compute now.
 * KEYS: [1] floor key, [2] floor-at key, [3] a lease hash (optional). Reply: [token].
 */
export const NEXT_TOKEN = lua(
  'next-token',
  `${PRELUDE}${FLOOR_NOW}
local floor = floor_now(KEYS[1], KEYS[2])
local tok = now_us
if floor + 1 > tok then tok = floor + 1 end
if KEYS[3] then
  local last = tonumber(redis.call('HGET', KEYS[3], 'token') or '0') or 0
  if last + 1 > tok then tok = last + 1 end
end
return { fmt(tok) }`,
);

/** KEYS: [1] layout key. Reply: [stored version or '']. */
export const LAYOUT_STATUS = lua('layout-status', `return { redis.call('GET', KEYS[1]) or '' }`);
