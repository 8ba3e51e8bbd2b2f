/**
 * The slot ledger on Redis: each call is one Lua script, so the lease check and the slot write
 * are one atomic step. The claim reads the lease hash the Redis store writes
 * (`{prefix}:lease:NAME`: holder, token, exp) and calls the term live only if the holder and
 * token match and `exp` is after Redis's own TIME, exactly as the store's claim script judges
 * it. The claim rule is src/scheduler/ledger.ts's decideSlotClaim, written again in Lua below
 * (the slot ledger conformance suite holds both to the same cases).
 *
 * Keys, all under the store's hash tag (one Cluster slot):
 *  - `{prefix}:slots:NAME`    hash, slot key -> the row (cjson; every number a decimal string,
 *                             because cjson prints 14 significant digits and tokens have 16)
 *  - `{prefix}:slotidx:NAME`  zset, slot key scored by its slot time (a `--once-per` key: its
 *                             start time), for records()
 *  - `{prefix}:slotrun:NAME`  set of the keys left 'claimed', so interruptStale does not scan
 *                             the whole history
 * The rows never expire: like the SQL ledgers' tables, they are the history. They are only as
 * durable as Redis: one that restarts empty (no AOF) has forgotten which slots ran.
 */
import { AbortedError, ConfigError, SchemaError } from '../../core/errors.js';
import type {
  SlotClaimRequest,
  SlotClaimResult,
  SlotCompletion,
  SlotLedgerPort,
  SlotPruneRequest,
  SlotPruneResult,
  SlotRecord,
  SlotSkipRequest,
  SlotStatus,
  SlotTerm,
} from '../../scheduler/ledger.js';
import { decodeSchedule, encodeSchedule, type ScheduleRecord } from '../../scheduler/schedule-record.js';
import { LUA_CLOCK, LUA_DECIMAL_LESS, lua, type LuaScript } from './scripts.js';
import { RedisStore } from './store.js';

const PRELUDE = `${LUA_CLOCK}-- Decimal token strings, compared exactly (length, then byte by byte): no double rounding.
${LUA_DECIMAL_LESS}-- KEYS[1] is the lease hash: is the term (holder ARGV[1], token ARGV[2]) live by Redis's clock?
local function held()
  local l = redis.call('HMGET', KEYS[1], 'holder', 'token', 'exp')
  return l[1] == ARGV[1] and l[2] == ARGV[2] and l[3] and tonumber(l[3]) and tonumber(l[3]) > now
end
local function row(k, status, reason, slot_at)
  return { status = status, token = ARGV[2], holder = ARGV[1], slot_at = slot_at, started = fmt(now),
           ended = (status == 'skipped') and fmt(now) or '', exit = '', reason = reason }
end
`;

/**
 * KEYS: lease hash, rows hash, index zset, claimed set. ARGV: holder, token, key, slot at ms
 * (or ''), onInterrupted (rerun/skip), rerunFailed (1/0).
 * Reply: [now, outcome, rerunOf or '', the row (cjson) when done].
 */
const CLAIM = lua(
  'slot-claim',
  `${PRELUDE}
local key, slot_at = ARGV[3], ARGV[4]
if not held() then return { fmt(now), 'fenced', '', '' } end
if slot_at ~= '' and tonumber(slot_at) > now then return { fmt(now), 'early', '', '' } end
local cur = redis.call('HGET', KEYS[2], key)
local function write(r)
  local enc = cjson.encode(r)
  redis.call('HSET', KEYS[2], key, enc)
  local score = slot_at
  if score == '' then score = r.started end
  redis.call('ZADD', KEYS[3], score, key)
  if r.status == 'claimed' then redis.call('SADD', KEYS[4], key) else redis.call('SREM', KEYS[4], key) end
  return enc
end
if not cur then
  write(row(key, 'claimed', '', slot_at))
  return { fmt(now), 'claimed', '', '' }
end
local r = cjson.decode(cur)
if less(ARGV[2], r.token) then return { fmt(now), 'fenced', '', '' } end
if r.token == ARGV[2] then
  if r.status == 'claimed' then return { fmt(now), 'claimed', '', '' } end
  return { fmt(now), 'done', '', cur }
end
if r.status == 'claimed' or r.status == 'interrupted' then
  if ARGV[5] == 'skip' then
    return { fmt(now), 'done', '', write(row(key, 'skipped', 'interrupted in term ' .. r.token .. '; --on-interrupted skip', slot_at)) }
  end
  write(row(key, 'claimed', 'rerun: term ' .. r.token .. ' was interrupted', slot_at))
  return { fmt(now), 'claimed', r.token, '' }
end
if r.status == 'failed' and ARGV[6] == '1' then
  write(row(key, 'claimed', 'rerun: failed in term ' .. r.token, slot_at))
  return { fmt(now), 'claimed', r.token, '' }
end
return { fmt(now), 'done', '', cur }
`,
);

/** KEYS: as CLAIM. ARGV: holder, token, reason, then key, slot at ('' for none) pairs. Reply: [now, fenced 1/0, skipped]. */
const SKIP = lua(
  'slot-skip',
  `${PRELUDE}
if not held() then return { fmt(now), '1', '0' } end
local n = 0
for i = 4, #ARGV, 2 do
  local key, slot_at = ARGV[i], ARGV[i + 1]
  if redis.call('HSETNX', KEYS[2], key, cjson.encode(row(key, 'skipped', ARGV[3], slot_at))) == 1 then
    local score = slot_at
    if score == '' then score = fmt(now) end
    redis.call('ZADD', KEYS[3], score, key)
    n = n + 1
  end
end
return { fmt(now), '0', tostring(n) }
`,
);

/** KEYS: rows hash, claimed set. ARGV: key, token, status, exit code or '', reason or ''. Reply: [now, completed 1/0]. */
const COMPLETE = lua(
  'slot-complete',
  `${PRELUDE}
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return { fmt(now), '0' } end
local r = cjson.decode(cur)
if r.token ~= ARGV[2] or r.status ~= 'claimed' then return { fmt(now), '0' } end
r.status, r.ended, r.exit = ARGV[3], fmt(now), ARGV[4]
if ARGV[5] ~= '' then r.reason = ARGV[5] end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(r))
redis.call('SREM', KEYS[2], ARGV[1])
return { fmt(now), '1' }
`,
);

/** KEYS: lease hash, rows hash, claimed set. ARGV: holder, token. Reply: [now, fenced 1/0, interrupted]. */
const INTERRUPT = lua(
  'slot-interrupt',
  `${PRELUDE}
if not held() then return { fmt(now), '1', '0' } end
local n = 0
for _, key in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local cur = redis.call('HGET', KEYS[2], key)
  if cur then
    local r = cjson.decode(cur)
    if r.status == 'claimed' and less(r.token, ARGV[2]) then
      r.status, r.ended, r.reason = 'interrupted', fmt(now), 'its term ended before it completed (seen by term ' .. ARGV[2] .. ')'
      redis.call('HSET', KEYS[2], key, cjson.encode(r))
      redis.call('SREM', KEYS[3], key)
      n = n + 1
    end
  else
    redis.call('SREM', KEYS[3], key)
  end
end
return { fmt(now), '0', tostring(n) }
`,
);

/**
 * KEYS: rows hash, index zset. ARGV: min score (exclusive, or '-inf'), max score ('+inf'),
 * limit, scheduled only (1/0). Reply: the newest `limit` rows as key, row pairs, newest first.
 */
const RECORDS = lua(
  'slot-records',
  `
local out = {}
local limit = tonumber(ARGV[3])
local offset = 0
while #out < 2 * limit do
  local keys = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[2], ARGV[1], 'LIMIT', offset, 500)
  if #keys == 0 then break end
  offset = offset + #keys
  for _, key in ipairs(keys) do
    local cur = redis.call('HGET', KEYS[1], key)
    if cur and (ARGV[4] == '0' or cjson.decode(cur).slot_at ~= '') and #out < 2 * limit then
      out[#out + 1] = key
      out[#out + 1] = cur
    end
  end
end
return out
`,
);

/**
 * KEYS: rows hash, index zset, claimed set. ARGV: older-than ms, keep, once-per older-than ms or
 * '', limit. Deletes up to `limit` rows below the cutoff of slotPruneCutoff (ledger.ts): the
 * keep-th newest scheduled slot and the newest one before the horizon, found by walking the
 * index from the top (a name's rows are a schedule's or once-per keys', rarely both). Reply:
 * [now, deleted, more 1/0]. Scans at most 20 x limit index entries per call, so one call stays
 * short however many kept rows ('claimed', once-per) sit below the cutoff.
 */
const PRUNE = lua(
  'slot-prune',
  `${LUA_CLOCK}
local keep, limit = tonumber(ARGV[2]), tonumber(ARGV[4])
local horizon = now - tonumber(ARGV[1])
local function get(key)
  local cur = redis.call('HGET', KEYS[1], key)
  if cur then return cjson.decode(cur) end
  return nil
end
-- The first scheduled row of the index walked newest first from 'hi', the n-th one.
local function nth(hi, n)
  local seen, offset = 0, 0
  while true do
    local keys = redis.call('ZREVRANGEBYSCORE', KEYS[2], hi, '-inf', 'LIMIT', offset, 200)
    if #keys == 0 then return nil end
    offset = offset + #keys
    for _, key in ipairs(keys) do
      local r = get(key)
      if r and r.slot_at ~= '' then
        seen = seen + 1
        if seen == n then return tonumber(r.slot_at) end
      end
    end
  end
end
local kept = nth('+inf', keep)
local boundary = nil
if kept then boundary = nth('(' .. fmt(horizon), 1) end
local cutoff = nil
if kept and boundary then cutoff = math.min(kept, boundary) end
local once = nil
if ARGV[3] ~= '' then once = now - tonumber(ARGV[3]) end
local top = cutoff
if once and (not top or once > top) then top = once end
local deleted, scanned, skipped = 0, 0, 0
if top then
  while deleted < limit and scanned < 20 * limit do
    local keys = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(top), 'LIMIT', skipped, 200)
    if #keys == 0 then break end
    for _, key in ipairs(keys) do
      scanned = scanned + 1
      local r = get(key)
      local del = false
      if not r then del = true
      elseif r.status ~= 'claimed' then
        if r.slot_at ~= '' then del = cutoff ~= nil and tonumber(r.slot_at) < cutoff
        else del = once ~= nil and r.ended ~= '' and tonumber(r.ended) < once end
      end
      if del then
        redis.call('HDEL', KEYS[1], key)
        redis.call('ZREM', KEYS[2], key)
        redis.call('SREM', KEYS[3], key)
        deleted = deleted + 1
        if deleted >= limit then break end
      else
        skipped = skipped + 1
      end
    end
  end
end
local more = '0'
if deleted >= limit or scanned >= 20 * limit then more = '1' end
return { fmt(now), tostring(deleted), more }
`,
);

/** KEYS: any key under the store's hash tag (routes the call). ARGV: the index keys' match pattern. Reply: the index keys. */
const NAMES = lua(
  'slot-names',
  `
local out, cursor = {}, '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do out[#out + 1] = k end
until cursor == '0'
return out
`,
);

/**
 * KEYS: the schedules hash (`{prefix}:schedules`, field = name, value = "TOKEN JSON"). ARGV: name,
 * token, the record's JSON. Replaces the field unless it holds a later term's record (tokens
 * compared as decimal strings: length, then text). Reply: [written 1/0].
 */
const PUT_SCHEDULE = lua(
  'schedule-put',
  `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local t = string.match(cur, '^(%d+) ')
  if t and (#t > #ARGV[2] or (#t == #ARGV[2] and t > ARGV[2])) then return { '0' } end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
return { '1' }
`,
);

/** KEYS: the schedules hash. Reply: name, "TOKEN JSON" pairs. */
const SCHEDULES = lua('schedule-list', `return redis.call('HGETALL', KEYS[1])`);

interface EncodedRow {
  status: SlotStatus;
  token: string;
  holder: string;
  slot_at: string;
  started: string;
  ended: string;
  exit: string;
  reason: string;
}

export class RedisSlotLedger implements SlotLedgerPort {
  readonly kind = 'redis';
  private readonly store: RedisStore;
  private readonly tag: string;

  /** `store`: the lease store (its connection is used, and its lease hashes fence the claims). */
  constructor(store: RedisStore) {
    if (!(store instanceof RedisStore)) throw new ConfigError("RedisSlotLedger needs the Redis lease store (a RedisStore)");
    this.store = store;
    this.tag = `{${store.prefix}}`;
  }

  private keys(name: string): { lease: string; rows: string; index: string; claimed: string } {
    return { lease: `${this.tag}:lease:${name}`, rows: `${this.tag}:slots:${name}`, index: `${this.tag}:slotidx:${name}`, claimed: `${this.tag}:slotrun:${name}` };
  }

  private async run(script: LuaScript, keys: string[], args: string[], signal?: AbortSignal): Promise<string[]> {
    const reply = await this.store.scripts.run(script, keys, args, signal);
    if (!Array.isArray(reply)) throw new SchemaError(`the ${script.name} script answered ${typeof reply}, not a list; reinstall leasehold`);
    return reply.map((x: unknown) => (x === null || x === undefined || x === false ? '' : Buffer.isBuffer(x) ? x.toString() : String(x)));
  }

  async claim(req: SlotClaimRequest): Promise<SlotClaimResult> {
    const k = this.keys(req.name);
    let reply: string[];
    try {
      reply = await this.run(
        CLAIM,
        [k.lease, k.rows, k.index, k.claimed],
        [req.holder, req.token.toString(), req.key, req.slotAtMs === null ? '' : String(Math.round(req.slotAtMs)), req.onInterrupted, req.rerunFailed ? '1' : '0'],
        req.signal,
      );
    } catch (err) {
      // The script may have run (a claim by an ended term: the next term reruns it).
      if (req.signal?.aborted === true) throw new AbortedError('slot ledger claim aborted; it may have landed', { cause: err });
      throw err;
    }
    const [now, outcome, rerunOf, row] = reply;
    const storeNowMs = Number(now);
    if (outcome === 'claimed') return { outcome, storeNowMs, rerunOf: rerunOf === '' || rerunOf === undefined ? null : BigInt(rerunOf) };
    if (outcome === 'done') return { outcome, storeNowMs, record: decode(req.name, req.key, row!) };
    if (outcome === 'early' || outcome === 'fenced') return { outcome, storeNowMs };
    throw new SchemaError(`the slot-claim script answered ${String(outcome)}; reinstall leasehold`);
  }

  async skip(req: SlotSkipRequest): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }> {
    const k = this.keys(req.name);
    const args = [req.holder, req.token.toString(), req.reason];
    for (const s of req.slots) args.push(s.key, s.slotAtMs === null ? '' : String(Math.round(s.slotAtMs)));
    const [now, fenced, skipped] = await this.run(SKIP, [k.lease, k.rows, k.index, k.claimed], args);
    return { fenced: fenced === '1', skipped: Number(skipped), storeNowMs: Number(now) };
  }

  async complete(req: SlotCompletion): Promise<{ completed: boolean; storeNowMs: number }> {
    const k = this.keys(req.name);
    const [now, done] = await this.run(COMPLETE, [k.rows, k.claimed], [req.key, req.token.toString(), req.status, req.exitCode === null ? '' : String(req.exitCode), req.reason ?? '']);
    return { completed: done === '1', storeNowMs: Number(now) };
  }

  async interruptStale(term: SlotTerm): Promise<{ fenced: boolean; interrupted: number; storeNowMs: number }> {
    const k = this.keys(term.name);
    const [now, fenced, n] = await this.run(INTERRUPT, [k.lease, k.rows, k.claimed], [term.holder, term.token.toString()]);
    return { fenced: fenced === '1', interrupted: Number(n), storeNowMs: Number(now) };
  }

  async records(name: string, options: { sinceMs?: number; untilMs?: number; limit?: number } = {}): Promise<SlotRecord[]> {
    const k = this.keys(name);
    const scheduled = options.sinceMs !== undefined || options.untilMs !== undefined;
    const out = await this.run(RECORDS, [k.rows, k.index], [
      options.sinceMs === undefined ? '-inf' : `(${options.sinceMs}`,
      options.untilMs === undefined ? '+inf' : String(options.untilMs),
      String(options.limit ?? 1000),
      scheduled ? '1' : '0',
    ]);
    const rows: SlotRecord[] = [];
    for (let i = 0; i < out.length; i += 2) rows.push(decode(name, out[i]!, out[i + 1]!));
    return rows.reverse();
  }

  async prune(req: SlotPruneRequest): Promise<SlotPruneResult> {
    const k = this.keys(req.name);
    const [now, deleted, more] = await this.run(PRUNE, [k.rows, k.index, k.claimed], [
      String(Math.round(req.olderThanMs)),
      String(Math.max(1, req.keep)),
      req.oncePerOlderThanMs === undefined ? '' : String(Math.round(req.oncePerOlderThanMs)),
      String(req.limit),
    ]);
    return { deleted: Number(deleted), more: more === '1', storeNowMs: Number(now) };
  }

  async names(): Promise<string[]> {
    const head = `${this.tag}:slotidx:`;
    // A glob: the prefix's own glob characters escaped.
    const pattern = `${head.replace(/[*?[\]\\]/g, '\\$&')}*`;
    const keys = await this.run(NAMES, [`${head}`], [pattern]);
    return keys.map((x) => x.slice(head.length)).sort();
  }

  async putSchedule(record: ScheduleRecord): Promise<void> {
    await this.run(PUT_SCHEDULE, [`${this.tag}:schedules`], [record.name, record.token.toString(), encodeSchedule(record)]);
  }

  async schedules(): Promise<ScheduleRecord[]> {
    const flat = await this.run(SCHEDULES, [`${this.tag}:schedules`], []);
    const out: ScheduleRecord[] = [];
    for (let i = 1; i < flat.length; i += 2) out.push(decodeSchedule(flat[i]!.slice(flat[i]!.indexOf(' ') + 1)));
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** The connection is the store's: closing the store closes it. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}

function decode(name: string, key: string, encoded: string): SlotRecord {
  const r = JSON.parse(encoded) as EncodedRow;
  const num = (s: string): number | null => (s === '' ? null : Number(s));
  return {
    name,
    key,
    slotAtMs: num(r.slot_at),
    status: r.status,
    token: BigInt(r.token),
    holder: r.holder === '' ? null : r.holder,
    startedAtMs: num(r.started),
    endedAtMs: num(r.ended),
    exitCode: num(r.exit),
    reason: r.reason === '' ? null : r.reason,
  };
}
