import { randomInt } from 'node:crypto';
import type { CallOptions } from '../../core/port.js';
import { AGENT_LEASE_PREFIX, type AgentRow, type FleetPort, type FleetPruneRequest, type FleetPruneResult, type Labels, type OwnerRow, type PlaceResult, type ReassignResult, type ResourcePage, type ResourcePageRequest } from '../../fleet/port.js';
import { keysFor } from './keys.js';
import { LUA_CLOCK, lua, toStrings, type LuaScript } from './scripts.js';
import type { RedisStore } from './store.js';

/*
 * The fleet registry in Redis, beside the Redis lease store's keys (same `{prefix}` hash tag):
 *
 *   {p}:fleet:agents           set of agent ids ever registered
 *   {p}:fleet:agent:<id>       hash: labels (JSON), started, draining (0/1), dereg (ms, absent
 *                              while registered), owned (resources owned, kept in step by every
 *                              script that changes ownership)
 *   {p}:fleet:own:<resource>   hash: agent, gen, labels (what the placement asked for), placed
 *   {p}:fleet:gen              the last generation issued, for every resource
 *   {p}:fleet:load             sorted set: the agents that can take work (registered, not
 *                              draining), scored by owned; placement walks it fewest owned first
 *   {p}:fleet:load-built       present once {p}:fleet:load was built from the agents set (a
 *                              fleet registered before the index had none)
 *   {p}:fleet:resources        sorted set, every score 0: the resources with an ownership hash, by
 *                              name (ZRANGEBYLEX pages them); kept by every script that writes one
 *   {p}:fleet:resources-built  present once {p}:fleet:resources was built from the ownership hashes
 *                              (a fleet placed before the index had none: see RESOURCES)
 *   {p}:fleet:resources-scan   the build's SCAN cursor between its bounded steps
 *   {p}:lease:agent/<id>       the agent's liveness: the lease store's own hash (holder, exp, renewed)
 *
 * One Lua script per call, so each call is atomic, and every script reads `TIME`: liveness is
 * `holder` present and `exp` > Redis now, exactly the lease store's test. Placement must look
 * at several agents, so the agent and lease hashes are addressed inside the scripts from the
 * prefixes passed in ARGV rather than declared in KEYS; they carry the store's hash tag, so a
 * script still touches one slot.
 *
 * Placement reads the agents in {p}:fleet:load from the fewest owned and stops after the first
 * PLACEMENT_TIES that are live and carry the labels: its cost does not grow with the fleet (more
 * only when the least loaded agents are stale without having deregistered, or lack the labels).
 * Every script that changes an agent's registration, draining or owned count re-indexes it.
 *
 * Generations: max(last + 1, TIME in microseconds, token floor + 1), as the lease store issues
 * tokens (see README.md, "Fencing tokens"): a Redis that restarted empty, or a promoted replica
 * that missed the last writes, still issues a generation larger than any issued before, under
 * the same clock assumption; `leasehold migrate --min-token` raises generations too.
 */

const LOAD_INDEX = `
-- The placement index (see the key list above). AP is '{p}:fleet:agent:'.
local FLEET = string.sub(AP, 1, -7)
local LOAD, LOAD_BUILT = FLEET .. 'load', FLEET .. 'load-built'
-- Puts agent id's entry in step with its hash: scored by owned while registered and not draining, else absent.
local function index_agent(id)
  local a = redis.call('HMGET', AP .. id, 'labels', 'draining', 'dereg', 'owned')
  if a[1] and not a[3] and a[2] ~= '1' then redis.call('ZADD', LOAD, tonumber(a[4] or '0') or 0, id)
  else redis.call('ZREM', LOAD, id) end
end
`;

const PRELUDE = `${LUA_CLOCK}local AP, LP = ARGV[1], ARGV[2]
-- An agent as the store sees it now; nil when never registered.
local function agent(id)
  local a = redis.call('HMGET', AP .. id, 'labels', 'started', 'draining', 'dereg', 'owned')
  if not a[1] then return nil end
  local l = redis.call('HMGET', LP .. id, 'holder', 'exp', 'renewed')
  local exp = (l[2] and tonumber(l[2])) or nil
  return { id = id, labels = a[1], started = a[2] or '0', draining = a[3] == '1', dereg = a[4],
           owned = tonumber(a[5] or '0') or 0, holder = l[1], exp = l[2], renewed = l[3],
           live = (not a[4]) and (l[1] and true or false) and exp ~= nil and exp > now }
end${LOAD_INDEX}`;

/** A placement reads at most this many eligible agents, the fewest owned first, and picks among them. */
const PLACEMENT_TIES = 16;

const PICK = `
local function contains(have, want)
  for k, v in pairs(want) do
    if have[k] ~= v then return false end
  end
  return true
end
-- Live, non-draining agents carrying \`want\` (or exactly \`only\`), never \`except\`: the fewest
-- owned, and among the first ${PLACEMENT_TIES} tied the one at index rand mod count (rand comes
-- from the caller, so the script itself stays deterministic).
local function pick(want, only, except, rand)
  if only ~= '' then
    local a = agent(only)
    if only ~= except and a and a.live and not a.draining then return only end
    return nil
  end
  -- Built once, for a fleet whose agents registered before the index existed.
  if redis.call('EXISTS', LOAD_BUILT) == 0 then
    for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do index_agent(id) end
    redis.call('SET', LOAD_BUILT, '1')
  end
  local best, tied, from, done = nil, {}, 0, false
  while not done do
    local page = redis.call('ZRANGE', LOAD, from, from + 31, 'WITHSCORES')
    if #page == 0 then break end
    for i = 1, #page, 2 do
      local id, owned = page[i], tonumber(page[i + 1])
      if best ~= nil and (owned > best or #tied >= ${PLACEMENT_TIES}) then
        done = true
        break
      end
      if id ~= except then
        local a = agent(id)
        if a and a.live and not a.draining and contains(cjson.decode(a.labels), want) then
          best = best or owned
          tied[#tied + 1] = id
        end
      end
    end
    from = from + 32
  end
  if #tied == 0 then return nil end
  return tied[(tonumber(rand) % #tied) + 1]
end
local function next_generation()
  local g = (tonumber(redis.call('GET', KEYS[3]) or '0') or 0) + 1
  -- The floor in force moves with the clock from when it was set (scripts.ts FLOOR_NOW), so
  -- generations above it stay time-derived and a restart from an older dump cannot repeat them.
  local floor = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
  local at = KEYS[5] and tonumber(redis.call('GET', KEYS[5]) or '')
  if at and now_us > at then floor = floor + (now_us - at) end
  if now_us > g then g = now_us end
  if floor + 1 > g then g = floor + 1 end
  if g >= 9007199254740992 then
    return nil
  end
  redis.call('SET', KEYS[3], fmt(g))
  return fmt(g)
end
`;

const GEN_ERROR = "return redis.error_reply('ERR leasehold: the next fleet generation would pass 2^53')";

/** KEYS: [1] agents set, [2] the agent's hash. ARGV: AP, LP, id, labels JSON. */
const REGISTER = lua(
  'fleet-register',
  `${PRELUDE}
redis.call('HSET', KEYS[2], 'labels', ARGV[4], 'started', fmt(now))
redis.call('HDEL', KEYS[2], 'dereg')
redis.call('HSETNX', KEYS[2], 'draining', '0')
redis.call('HSETNX', KEYS[2], 'owned', '0')
redis.call('SADD', KEYS[1], ARGV[3])
index_agent(ARGV[3])
return { '1' }
`,
);

/** KEYS: [1] the agent's hash. Reply: ['1'] if registered. */
const DEREGISTER = lua(
  'fleet-deregister',
  `${PRELUDE}
if redis.call('EXISTS', KEYS[1]) == 0 then return { '0' } end
redis.call('HSET', KEYS[1], 'dereg', fmt(now))
index_agent(string.sub(KEYS[1], #AP + 1))
return { '1' }
`,
);

/** KEYS: [1] the agent's hash. ARGV: AP, LP, '1'/'0'. Reply: ['1'] if registered. */
const SET_DRAINING = lua(
  'fleet-set-draining',
  `local AP = ARGV[1]${LOAD_INDEX}
if redis.call('EXISTS', KEYS[1]) == 0 then return { '0' } end
redis.call('HSET', KEYS[1], 'draining', ARGV[3])
index_agent(string.sub(KEYS[1], #AP + 1))
return { '1' }
`,
);

const AGENT_FIELDS = 9;
const AGENT_REPLY = `
local function reply(out, a)
  out[#out + 1] = a.id
  out[#out + 1] = a.labels
  out[#out + 1] = a.started
  out[#out + 1] = a.draining and '1' or '0'
  out[#out + 1] = a.dereg or ''
  out[#out + 1] = fmt(a.owned)
  out[#out + 1] = a.live and '1' or '0'
  out[#out + 1] = (a.holder and a.renewed) or ''
  out[#out + 1] = (a.holder and a.exp) or ''
end
`;

/** KEYS: [1] agents set. ARGV: AP, LP. Reply: [now, then 9 per agent (see AGENT_REPLY)]. */
const AGENTS = lua(
  'fleet-agents',
  `${PRELUDE}${AGENT_REPLY}
local out = { fmt(now) }
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local a = agent(id)
  if a then reply(out, a) end
end
return out
`,
);

/** KEYS: [1] the ownership hash. ARGV: AP, LP. Reply: [now, agent, gen, placed, registered '1'/'0', then 9 as AGENT_REPLY] or [now]. */
const OWNER = lua(
  'fleet-owner',
  `${PRELUDE}${AGENT_REPLY}
local o = redis.call('HMGET', KEYS[1], 'agent', 'gen', 'placed')
if not o[1] then return { fmt(now) } end
local out = { fmt(now), o[1], o[2], o[3] }
local a = agent(o[1])
if a then
  out[#out + 1] = '1'
  reply(out, a)
else
  out[#out + 1] = '0'
end
return out
`,
);

/**
 * KEYS: [1] agents set, [2] the ownership hash, [3] generation counter, [4] token floor, [5] its floor-at,
 * [6] the resources index. ARGV: AP, LP, labels JSON, random integer, resource.
 * Reply: ['placed'|'owned', agent, gen] or ['no-agent'].
 */
const PLACE = lua(
  'fleet-place',
  `${PRELUDE}${PICK}
local cur = redis.call('HMGET', KEYS[2], 'agent', 'gen')
if cur[1] then
  -- Indexed already, unless an older leasehold placed it: this heals that.
  redis.call('ZADD', KEYS[6], 0, ARGV[5])
  return { 'owned', cur[1], cur[2] }
end
local id = pick(cjson.decode(ARGV[3]), '', '', ARGV[4])
if not id then return { 'no-agent' } end
local g = next_generation()
if not g then ${GEN_ERROR} end
redis.call('HSET', KEYS[2], 'agent', id, 'gen', g, 'labels', ARGV[3], 'placed', fmt(now))
redis.call('ZADD', KEYS[6], 0, ARGV[5])
redis.call('HINCRBY', AP .. id, 'owned', 1)
index_agent(id)
return { 'placed', id, g }
`,
);

/**
 * KEYS: as PLACE. ARGV: AP, LP, from, to ('' to pick), random integer, resource.
 * Reply: ['moved', agent, gen] | ['owner-changed', owner or ''] | ['no-agent'].
 */
const REASSIGN = lua(
  'fleet-reassign',
  `${PRELUDE}${PICK}
local cur = redis.call('HMGET', KEYS[2], 'agent', 'labels')
if cur[1] ~= ARGV[3] then return { 'owner-changed', cur[1] or '' } end
local id = pick(cjson.decode(cur[2] or '{}'), ARGV[4], ARGV[3], ARGV[5])
if not id then return { 'no-agent' } end
local g = next_generation()
if not g then ${GEN_ERROR} end
redis.call('HSET', KEYS[2], 'agent', id, 'gen', g, 'placed', fmt(now))
redis.call('ZADD', KEYS[6], 0, ARGV[6])
if redis.call('EXISTS', AP .. ARGV[3]) == 1 then
  redis.call('HINCRBY', AP .. ARGV[3], 'owned', -1)
  index_agent(ARGV[3])
end
redis.call('HINCRBY', AP .. id, 'owned', 1)
index_agent(id)
return { 'moved', id, g }
`,
);

/** KEYS: [1] the ownership hash, [2] the resources index. ARGV: AP, LP, from, resource. Reply: ['1'] removed, ['0'] not owned by `from`. */
const REMOVE = lua(
  'fleet-remove',
  `local AP = ARGV[1]${LOAD_INDEX}
if redis.call('HGET', KEYS[1], 'agent') ~= ARGV[3] then return { '0' } end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[4])
if redis.call('EXISTS', AP .. ARGV[3]) == 1 then
  redis.call('HINCRBY', AP .. ARGV[3], 'owned', -1)
  index_agent(ARGV[3])
end
return { '1' }
`,
);

/**
 * KEYS: [1] the agents set, [2] the resources index. ARGV: AP, LP, the ownership keys' match
 * pattern, older-than ms, limit, the ownership keys' prefix.
 * The agents deregistered before the horizon; then their ownership hashes, found by SCAN (there
 * is no index by agent: placements never needed one), up to `limit`; then, if that found fewer,
 * the agents themselves. Reply: [ownership deleted, agents deleted, more 1/0].
 */
const PRUNE = lua(
  'fleet-prune',
  `${LUA_CLOCK}local AP = ARGV[1]${LOAD_INDEX}
local horizon, limit = now - tonumber(ARGV[4]), tonumber(ARGV[5])
local gone, any = {}, false
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local d = redis.call('HGET', AP .. id, 'dereg')
  if d and tonumber(d) and tonumber(d) < horizon then gone[id], any = true, true end
end
if not any then return { '0', '0', '0' } end
local owned, cursor = 0, '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[3], 'COUNT', 500)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    local a = redis.call('HGET', k, 'agent')
    if a and gone[a] and owned < limit then
      redis.call('DEL', k)
      redis.call('ZREM', KEYS[2], string.sub(k, #ARGV[6] + 1))
      redis.call('HINCRBY', AP .. a, 'owned', -1)
      owned = owned + 1
    end
  end
until cursor == '0' or owned >= limit
if owned >= limit then return { tostring(owned), '0', '1' } end
local agents = 0
for id in pairs(gone) do
  if agents + owned >= limit then break end
  redis.call('DEL', AP .. id)
  redis.call('SREM', KEYS[1], id)
  redis.call('ZREM', LOAD, id)
  agents = agents + 1
end
local more = '0'
if owned + agents >= limit then more = '1' end
return { tostring(owned), tostring(agents), more }
`,
);

/** Keys the index build's SCAN looks at per listing call while the index is not built: a bounded step, a few ms. */
const BUILD_STEP_KEYS = 2000;
/** Index entries a listing call may find without an ownership hash (removed by an older leasehold) before it answers with what it has. */
const STALE_SKIP = 1000;
const RESOURCE_FIELDS = 5 + AGENT_FIELDS;

/**
 * KEYS: [1] the resources index, [2] its built flag, [3] the build's SCAN cursor.
 * ARGV: AP, LP, the ownership keys' prefix, their match pattern, after ('' from the first), limit.
 *
 * A fleet placed by a leasehold without the index has none: until the flag is set, each call
 * takes one step of SCAN over the ownership keys (BUILD_STEP_KEYS, then the cursor is saved)
 * and answers ['building']; the caller calls again. Every script that writes an ownership hash
 * keeps the index meanwhile, so what the build adds and they add agree. A rolling upgrade's
 * older writers do not: their placements are missing until placed or reassigned again by a
 * newer one (or the flag is deleted, which builds again), and index entries they removed are
 * dropped here when met.
 *
 * Reply: [now, more '1'/'0', next, then per resource RESOURCE_FIELDS: resource, agent, gen,
 * placed, registered '1'/'0', and AGENT_REPLY's 9 ('' when not registered)].
 */
const RESOURCES = lua(
  'fleet-resources',
  `${PRELUDE}${AGENT_REPLY}
local OWNP, lim = ARGV[3], tonumber(ARGV[6])
if redis.call('EXISTS', KEYS[2]) == 0 then
  local cursor, seen = redis.call('GET', KEYS[3]) or '0', 0
  repeat
    local r = redis.call('SCAN', cursor, 'MATCH', ARGV[4], 'COUNT', 500)
    cursor = r[1]
    for _, k in ipairs(r[2]) do redis.call('ZADD', KEYS[1], 0, string.sub(k, #OWNP + 1)) end
    seen = seen + 500
  until cursor == '0' or seen >= ${BUILD_STEP_KEYS}
  if cursor ~= '0' then
    redis.call('SET', KEYS[3], cursor)
    return { 'building' }
  end
  redis.call('SET', KEYS[2], '1')
  redis.call('DEL', KEYS[3])
end
local out, agents = { fmt(now), '0', '' }, {}
local from, n, skipped, done = '-', 0, 0, false
if ARGV[5] ~= '' then from = '(' .. ARGV[5] end
while not done do
  local want = lim - n + 1
  local page = redis.call('ZRANGEBYLEX', KEYS[1], from, '+', 'LIMIT', 0, want)
  for _, res in ipairs(page) do
    local o = redis.call('HMGET', OWNP .. res, 'agent', 'gen', 'placed')
    if not o[1] then
      redis.call('ZREM', KEYS[1], res)
      skipped = skipped + 1
      if skipped >= ${STALE_SKIP} then
        out[2], out[3], done = '1', res, true
        break
      end
    elseif n == lim then
      out[2], done = '1', true
      break
    else
      n = n + 1
      out[3] = res
      out[#out + 1] = res
      out[#out + 1] = o[1]
      out[#out + 1] = o[2]
      out[#out + 1] = o[3]
      local a = agents[o[1]]
      if a == nil then
        a = agent(o[1]) or false
        agents[o[1]] = a
      end
      if a then
        out[#out + 1] = '1'
        reply(out, a)
      else
        for _ = 0, ${AGENT_FIELDS} do out[#out + 1] = '' end
        out[#out - ${AGENT_FIELDS}] = '0'
      end
    end
  end
  if not done then
    if #page < want then done = true else from = '(' .. page[#page] end
  end
end
return out
`,
);

const num = (s: string | undefined): number | null => (s === undefined || s === '' ? null : Number(s));

interface ParsedAgent {
  row: Omit<AgentRow, 'storeNowMs'>;
  deregisteredAtMs: number | null;
}

function parseAgent(f: string[], at: number, now: number): ParsedAgent {
  const renewed = num(f[at + 7]);
  const exp = num(f[at + 8]);
  const dereg = num(f[at + 4]);
  return {
    row: {
      id: f[at]!,
      labels: JSON.parse(f[at + 1]!) as Labels,
      startedAtMs: Number(f[at + 2]),
      draining: f[at + 3] === '1',
      deregistered: dereg !== null,
      live: f[at + 6] === '1',
      owned: Number(f[at + 5]),
      heartbeatAgeMs: renewed === null ? null : now - renewed,
      expiresInMs: exp === null ? null : exp - now,
    },
    deregisteredAtMs: dereg,
  };
}

/**
 * The fleet registry in Redis, on the Redis lease store's connection: one Lua script per call,
 * judged by Redis `TIME`. An agent is live while the lease store's hash of `agent/<id>` has a
 * holder and an `exp` after Redis now, and it has not deregistered.
 */
export class RedisFleet implements FleetPort {
  readonly kind = 'redis';
  readonly description: string;
  private readonly store: RedisStore;
  private readonly tag: string;
  private readonly agentsKey: string;
  private readonly genKey: string;
  private readonly floorKey: string;
  private readonly floorAtKey: string;
  /** ARGV[1], ARGV[2] of every script: where agent hashes and their liveness leases live. */
  private readonly prefixes: [string, string];

  constructor(store: RedisStore) {
    this.store = store;
    this.description = store.description;
    const keys = keysFor(store.prefix);
    this.tag = `{${store.prefix}}`;
    this.agentsKey = `${this.tag}:fleet:agents`;
    this.genKey = `${this.tag}:fleet:gen`;
    this.floorKey = keys.floor;
    this.floorAtKey = keys.floorAt;
    this.prefixes = [`${this.tag}:fleet:agent:`, keys.lease(AGENT_LEASE_PREFIX)];
  }

  private agentKey(id: string): string {
    return `${this.prefixes[0]}${id}`;
  }

  private ownKey(resource: string): string {
    return `${this.tag}:fleet:own:${resource}`;
  }

  private get resourceIndex(): string {
    return `${this.tag}:fleet:resources`;
  }

  private async run(script: LuaScript, keys: string[], args: string[], options?: CallOptions): Promise<string[]> {
    return toStrings(await this.store.scripts.run(script, keys, [...this.prefixes, ...args], options?.signal));
  }

  async registerAgent(id: string, labels: Labels, options?: CallOptions): Promise<void> {
    await this.run(REGISTER, [this.agentsKey, this.agentKey(id)], [id, JSON.stringify(labels)], options);
  }

  async deregisterAgent(id: string, options?: CallOptions): Promise<void> {
    await this.run(DEREGISTER, [this.agentKey(id)], [], options);
  }

  async setDraining(id: string, draining: boolean, options?: CallOptions): Promise<boolean> {
    const [ok] = await this.run(SET_DRAINING, [this.agentKey(id)], [draining ? '1' : '0'], options);
    return ok === '1';
  }

  async agents(options?: CallOptions): Promise<AgentRow[]> {
    const f = await this.run(AGENTS, [this.agentsKey], [], options);
    const now = Number(f[0]);
    const rows: AgentRow[] = [];
    for (let at = 1; at + AGENT_FIELDS <= f.length; at += AGENT_FIELDS) rows.push({ ...parseAgent(f, at, now).row, storeNowMs: now });
    return rows.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  async owner(resource: string, options?: CallOptions): Promise<OwnerRow | undefined> {
    const f = await this.run(OWNER, [this.ownKey(resource)], [], options);
    const now = Number(f[0]);
    if (f.length === 1) return undefined;
    const a = f[4] === '1' ? parseAgent(f, 5, now) : undefined;
    return {
      resource,
      agent: f[1]!,
      generation: BigInt(f[2]!),
      placedAtMs: Number(f[3]),
      live: a?.row.live ?? false,
      deregistered: a?.row.deregistered ?? false,
      deregisteredAtMs: a?.deregisteredAtMs ?? null,
      heartbeatAgeMs: a?.row.heartbeatAgeMs ?? null,
      expiresInMs: a?.row.expiresInMs ?? null,
      storeNowMs: now,
    };
  }

  async place(resource: string, labels: Labels, options?: CallOptions): Promise<PlaceResult> {
    const keys = [this.agentsKey, this.ownKey(resource), this.genKey, this.floorKey, this.floorAtKey, this.resourceIndex];
    const [outcome, agent, gen] = await this.run(PLACE, keys, [JSON.stringify(labels), String(randomInt(2 ** 47)), resource], options);
    if (outcome === 'no-agent') return { outcome };
    return { outcome: outcome === 'owned' ? 'owned' : 'placed', agent: agent!, generation: BigInt(gen!) };
  }

  async reassign(resource: string, from: string, to: string | null, options?: CallOptions): Promise<ReassignResult> {
    const keys = [this.agentsKey, this.ownKey(resource), this.genKey, this.floorKey, this.floorAtKey, this.resourceIndex];
    const [outcome, agent, gen] = await this.run(REASSIGN, keys, [from, to ?? '', String(randomInt(2 ** 47)), resource], options);
    if (outcome === 'moved') return { outcome, agent: agent!, generation: BigInt(gen!) };
    if (outcome === 'owner-changed') return { outcome, owner: agent === '' || agent === undefined ? null : agent };
    return { outcome: 'no-agent' };
  }

  async remove(resource: string, from: string, options?: CallOptions): Promise<boolean> {
    const [ok] = await this.run(REMOVE, [this.ownKey(resource), this.resourceIndex], [from, resource], options);
    return ok === '1';
  }

  async prune(req: FleetPruneRequest, options?: CallOptions): Promise<FleetPruneResult> {
    const [owned, agents, more] = await this.run(PRUNE, [this.agentsKey, this.resourceIndex], [this.ownPattern, String(Math.round(req.olderThanMs)), String(req.limit), this.ownKey('')], options);
    return { ownership: Number(owned), agents: Number(agents), more: more === '1' };
  }

  /** SCAN's pattern for every ownership hash (the prefix's own glob characters escaped). */
  private get ownPattern(): string {
    return `${this.ownKey('').replace(/[*?[\]\\]/g, '\\$&')}*`;
  }

  /** One script per page (ZRANGEBYLEX on the index); while an older fleet's index is being built, one bounded step per call first. */
  async resources(req: ResourcePageRequest, options?: CallOptions): Promise<ResourcePage> {
    const keys = [this.resourceIndex, `${this.resourceIndex}-built`, `${this.resourceIndex}-scan`];
    const args = [this.ownKey(''), this.ownPattern, req.after ?? '', String(req.limit)];
    let f = await this.run(RESOURCES, keys, args, options);
    while (f[0] === 'building') {
      options?.signal?.throwIfAborted();
      f = await this.run(RESOURCES, keys, args, options);
    }
    const now = Number(f[0]);
    const rows: OwnerRow[] = [];
    for (let at = 3; at + RESOURCE_FIELDS <= f.length; at += RESOURCE_FIELDS) {
      const a = f[at + 4] === '1' ? parseAgent(f, at + 5, now) : undefined;
      rows.push({
        resource: f[at]!,
        agent: f[at + 1]!,
        generation: BigInt(f[at + 2]!),
        placedAtMs: Number(f[at + 3]),
        live: a?.row.live ?? false,
        deregistered: a?.row.deregistered ?? false,
        deregisteredAtMs: a?.deregisteredAtMs ?? null,
        heartbeatAgeMs: a?.row.heartbeatAgeMs ?? null,
        expiresInMs: a?.row.expiresInMs ?? null,
        storeNowMs: now,
      });
    }
    return { rows, next: f[1] === '1' ? f[2]! : null };
  }

  /** The connection is the lease store's: closing the fleet leaves it to the store's owner. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
