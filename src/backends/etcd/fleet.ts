import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { StoreError, StoreUnavailableError } from '../../core/errors.js';
import type { CallOptions } from '../../core/port.js';
import { AGENT_LEASE_PREFIX, type AgentRow, type FleetPort, type FleetPruneRequest, type FleetPruneResult, type Labels, type OwnerRow, type PlaceResult, type ReassignResult } from '../../fleet/port.js';
import { estimateExpiry, leaseRemaining } from './claim.js';
import { type EtcdKeyValue, type EtcdRequestOp, type EtcdTxnRequest, type EtcdTxnResponse } from './client.js';
import { newNonce } from '../../core/identity.js';
import { json, parseRenew, parseState, parseTerm, prefixEnd, type EtcdKeys } from './keys.js';
import { mapLedgerError, pages } from './pages.js';
import type { EtcdStore } from './store.js';
import type { MemberPool } from './members.js';
import { all, first, guarded, rangeOf, rangePrefix, schemaOk } from './txn.js';

/*
 * The fleet registry in etcd, beside the etcd lease store's keys (same prefix {p}):
 *
 *   {p}/fleet/agent/{id}        JSON: labels, startedAtMs, draining, deregisteredAtMs (absent while
 *                               registered), owned (kept in step by every Txn that changes ownership)
 *   {p}/fleet/own/{resource}    JSON: agent, labels (what the placement asked for), placedAtMs, floor
 *   {p}/term/agent%2F{id}       the agent's liveness: the lease store's term key for `agent/<id>`
 *
 * Ids and resources are URI-encoded, as lease names are. Liveness is exactly the lease store's
 * rule: the term key exists (etcd deletes it when its etcd lease runs out, so expiry is etcd's
 * own lease clock; release, revoke and a clone conflict delete it too) and the agent has not
 * deregistered.
 *
 * Every call reads one snapshot (one Txn), decides, and writes in ONE Txn whose compares pin
 * everything the decision read: the resource key's revisions, the chosen agent's term key
 * create revision (constant for a term: a new term of that agent is a new create revision, and
 * an expired one is 0) and its record's mod revision (draining, deregistration, owned count).
 * On a conflict it reads again, with jittered back-off, until the call's deadline. Each ownership
 * write carries a fresh writeId, so a write that landed although its answer was lost (etcd3's
 * retry on the next member, client.ts) is recognised on the re-read as this call's own.
 *
 * Generations: the ownership key's mod revision plus the token floor in force when it was
 * written (stored in the record). etcd revisions are cluster-wide, persisted and only go up, so
 * every place or reassign, of any resource, gets a larger one than any before it, also after a
 * remove; the floor (`leasehold migrate --min-token N`, compared by every Txn) puts every later
 * generation above N, like every later lease token. A record keeps its generation when the floor
 * is raised: a generation never changes under its owner.
 */

const GUESS_CAP = 10_000;
/** Ownership records deleted per Txn by prune: well under etcd's default --max-txn-ops (128). */
const PRUNE_CHUNK = 50;

interface AgentValue {
  labels: Labels;
  startedAtMs: number;
  draining: boolean;
  deregisteredAtMs?: number;
  owned: number;
}

interface OwnValue {
  agent: string;
  labels: Labels;
  placedAtMs: number;
  /** The token floor in force when this was written (decimal). */
  floor: string;
  /** Fresh per write: a write that landed but whose answer was lost (etcd3 retried it on another member) is recognised as ours. */
  writeId?: string;
}

function parse<T>(kv: EtcdKeyValue | undefined, ok: (v: T) => boolean): T | null {
  if (kv === undefined) return null;
  try {
    const v = JSON.parse(kv.value.toString()) as T;
    return typeof v === 'object' && v !== null && ok(v) ? v : null;
  } catch {
    return null;
  }
}

const parseAgent = (kv: EtcdKeyValue | undefined): AgentValue | null =>
  parse<AgentValue>(kv, (v) => typeof v.labels === 'object' && v.labels !== null && typeof v.owned === 'number');
/** The ownership record; null when absent. @throws {StoreError} a value leasehold did not write. */
function parseOwn(kv: EtcdKeyValue | undefined): OwnValue | null {
  if (kv === undefined) return null;
  const v = parse<OwnValue>(kv, (x) => typeof x.agent === 'string' && typeof x.floor === 'string' && /^\d+$/.test(x.floor));
  if (v === null) throw new StoreError(`etcd key ${kv.key.toString()} is not a fleet ownership record leasehold wrote; delete it, or use another prefix`);
  return v;
}

/** The generation of an ownership record: its key's mod revision plus the floor it was written under. */
const generationOf = (kv: EtcdKeyValue, v: OwnValue): bigint => BigInt(kv.mod_revision) + BigInt(v.floor);

/** One agent in a snapshot: its record, and the term key of its liveness lease. */
interface Candidate {
  id: string;
  kv: EtcdKeyValue;
  value: AgentValue;
  term: EtcdKeyValue | undefined;
}

/** The lease store's rule (see above), by what etcd holds in this snapshot. */
const isLive = (c: Candidate): boolean => c.value.deregisteredAtMs === undefined && c.term !== undefined && parseTerm(c.term) !== null;

function contains(have: Labels, want: Labels): boolean {
  return Object.entries(want).every(([k, v]) => have[k] === v);
}

interface Ctx {
  client: MemberPool;
  keys: EtcdKeys;
  deadline: number;
}

/**
 * The fleet registry in etcd, on the etcd lease store's client. An agent is live while the lease
 * store's term key of `agent/<id>` exists (etcd's own lease expiry) and it has not deregistered.
 */
export class EtcdFleet implements FleetPort {
  readonly kind = 'etcd';
  readonly description: string;
  private readonly store: EtcdStore;
  /** Which agent owned a resource when last looked up: lets owner() read all it needs in one Txn. */
  private readonly guesses = new Map<string, string>();

  constructor(store: EtcdStore) {
    this.store = store;
    this.description = store.description;
  }

  private agentPrefix(k: EtcdKeys): string {
    return `${k.fleetPrefix}agent/`;
  }
  private agentKey(k: EtcdKeys, id: string): Buffer {
    return Buffer.from(this.agentPrefix(k) + encodeURIComponent(id));
  }
  private ownKey(k: EtcdKeys, resource: string): Buffer {
    return Buffer.from(`${k.fleetPrefix}own/${encodeURIComponent(resource)}`);
  }
  /** Where the term keys of every agent's liveness lease live. */
  private agentTermPrefix(k: EtcdKeys): string {
    return k.termPrefix + encodeURIComponent(AGENT_LEASE_PREFIX);
  }

  private async txn(c: Ctx, req: EtcdTxnRequest, where: string): Promise<EtcdTxnResponse> {
    try {
      return await c.client.kv.txn(req, { deadline: c.deadline });
    } catch (err) {
      // An answer over gRPC's 4 MB limit is a StoreError, not a retryable outage (pages.ts).
      throw mapLedgerError(err, where);
    }
  }

  /** A guarded read: the schema and floor compares, then `ops`. */
  private async read(c: Ctx, ops: EtcdRequestOp[], where: string): Promise<EtcdTxnResponse> {
    const r = await this.txn(c, guarded(c.keys, ops), where);
    schemaOk(c.keys, r);
    return r;
  }

  /** A guarded write under `compares`: false when one of them failed (someone changed what we read). */
  private async write(c: Ctx, ops: EtcdRequestOp[], compares: EtcdTxnRequest['compare'], where: string): Promise<EtcdTxnResponse | null> {
    const r = await this.txn(c, guarded(c.keys, ops, compares), where);
    return schemaOk(c.keys, r) ? r : null;
  }

  /** Every agent with its term key, from one snapshot. */
  private snapshotAgents(k: EtcdKeys, agents: EtcdKeyValue[], terms: EtcdKeyValue[]): Map<string, Candidate> {
    const termOf = new Map<string, EtcdKeyValue>();
    for (const kv of terms) {
      const name = k.nameIn(kv.key, k.termPrefix);
      if (name?.startsWith(AGENT_LEASE_PREFIX) === true) termOf.set(name.slice(AGENT_LEASE_PREFIX.length), kv);
    }
    const out = new Map<string, Candidate>();
    for (const kv of agents) {
      const id = k.nameIn(kv.key, this.agentPrefix(k));
      const value = parseAgent(kv);
      if (id !== null && value !== null) out.set(id, { id, kv, value, term: termOf.get(id) });
    }
    return out;
  }

  /** Live, non-draining, carrying `want` (or exactly `only`), never `except`: the fewest owned, ties at random. */
  private pick(agents: Map<string, Candidate>, want: Labels, only: string | null, except: string | null): Candidate | undefined {
    let best: Candidate[] = [];
    for (const a of agents.values()) {
      if (a.id === except || (only !== null && a.id !== only)) continue;
      if (!isLive(a) || a.value.draining || (only === null && !contains(a.value.labels, want))) continue;
      if (best.length === 0 || a.value.owned < best[0]!.value.owned) best = [a];
      else if (a.value.owned === best[0]!.value.owned) best.push(a);
    }
    return best.length === 0 ? undefined : best[randomInt(best.length)];
  }

  /** Pins the chosen agent: the same term (create revision) and the same record (mod revision). */
  private pinned(k: EtcdKeys, a: Candidate): EtcdTxnRequest['compare'] {
    return [
      { key: k.term(`${AGENT_LEASE_PREFIX}${a.id}`), target: 'Create', result: 'Equal', create_revision: a.term!.create_revision },
      { key: a.kv.key, target: 'Mod', result: 'Equal', mod_revision: a.kv.mod_revision },
    ];
  }

  private conflicted(what: string, attempts: number): StoreUnavailableError {
    return new StoreUnavailableError(
      `etcd: ${what} conflicted with concurrent fleet changes ${attempts} times, until the call's deadline; this is retryable (raise the store's timeout if bursts are normal)`,
    );
  }

  /** Read-modify-write of one agent record, compared on its mod revision. `change` returns null to write nothing. */
  private async updateAgent(id: string, change: (prev: AgentValue | null) => AgentValue | null, where: string, options?: CallOptions): Promise<boolean> {
    const c = await this.store.fleetContext(options);
    const key = this.agentKey(c.keys, id);
    let attempt = 0;
    for (; attempt === 0 || Date.now() < c.deadline; attempt++) {
      const kv = first((await this.read(c, [rangeOf(key)], where)).responses[0]);
      const next = change(parseAgent(kv));
      if (next === null) return false;
      const ok = await this.write(c, [{ request_put: { key, value: json(next) } }], [{ key, target: 'Mod', result: 'Equal', mod_revision: kv?.mod_revision ?? '0' }], where);
      if (ok !== null) return true;
      await backoff(attempt, c.deadline);
    }
    throw this.conflicted(`${where} of agent "${id}"`, attempt);
  }

  async registerAgent(id: string, labels: Labels, options?: CallOptions): Promise<void> {
    await this.updateAgent(id, (prev) => ({ labels, startedAtMs: Date.now(), draining: prev?.draining ?? false, owned: prev?.owned ?? 0 }), 'register agent', options);
  }

  async deregisterAgent(id: string, options?: CallOptions): Promise<void> {
    await this.updateAgent(id, (prev) => (prev === null ? null : { ...prev, deregisteredAtMs: Date.now() }), 'deregister agent', options);
  }

  setDraining(id: string, draining: boolean, options?: CallOptions): Promise<boolean> {
    return this.updateAgent(id, (prev) => (prev === null ? null : { ...prev, draining }), 'drain', options);
  }

  /**
   * Rows for agents, with the times etcd can give: expiry from LeaseTimeToLive on each live
   * term's etcd lease (whole seconds), refined by the last renewal's record exactly as the
   * lease store's `list()` does.
   */
  private async rows(c: Ctx, agents: Candidate[], renews: Map<string, EtcdKeyValue>, states: Map<string, EtcdKeyValue>): Promise<{ now: number; rows: Map<string, AgentRow & { deregisteredAtMs: number | null }> }> {
    const leases = [...new Set(agents.filter(isLive).map((a) => a.term!.lease))];
    const ttl = await leaseRemaining(c.client, leases, c.deadline);
    const now = Date.now();
    const rows = new Map<string, AgentRow & { deregisteredAtMs: number | null }>();
    for (const a of agents) {
      const renew = parseRenew(renews.get(a.id));
      const state = parseState(states.get(a.id));
      let live = isLive(a);
      let expiresAt: number | null;
      if (a.term !== undefined) {
        const remaining = ttl.get(a.term.lease);
        const recorded = renew !== null && renew.nonce === parseTerm(a.term)?.nonce ? renew.expiresAtMs : null;
        expiresAt = remaining === undefined ? recorded : estimateExpiry(remaining, recorded);
        // etcd already calls its lease expired; it deletes the key within its sweep (~500ms).
        if (remaining !== undefined && remaining.ttlSec < 0) live = false;
      } else {
        // The term key is gone, so etcd's expiry (or the release) is behind us: never in the future.
        const at = state?.endedBy !== undefined ? (state.endedAtMs ?? null) : (renew?.expiresAtMs ?? null);
        expiresAt = at === null ? null : Math.min(at, now);
      }
      rows.set(a.id, {
        id: a.id,
        labels: a.value.labels,
        startedAtMs: a.value.startedAtMs,
        draining: a.value.draining,
        deregistered: a.value.deregisteredAtMs !== undefined,
        live,
        owned: a.value.owned,
        heartbeatAgeMs: heartbeatAge(a.term, renew, a.term === undefined ? undefined : ttl.get(a.term.lease), now),
        expiresInMs: expiresAt === null ? null : expiresAt - now,
        storeNowMs: now,
        deregisteredAtMs: a.value.deregisteredAtMs ?? null,
      });
    }
    return { now, rows };
  }

  /** Keys under `{p}/renew/agent%2F` or `{p}/state/agent%2F`, by agent id. */
  private byAgent(k: EtcdKeys, kvs: EtcdKeyValue[], prefix: string): Map<string, EtcdKeyValue> {
    const out = new Map<string, EtcdKeyValue>();
    for (const kv of kvs) {
      const name = k.nameIn(kv.key, prefix);
      if (name?.startsWith(AGENT_LEASE_PREFIX) === true) out.set(name.slice(AGENT_LEASE_PREFIX.length), kv);
    }
    return out;
  }

  /**
   * Every agent, a page of agent records at a time (pages.ts), each page's liveness keys (term,
   * renewal, state of `agent/<id>` for the ids from its first to its last) in one more read: one
   * answer with every agent passed gRPC's 4 MB limit at about 15,000 agents. An agent's row
   * comes from two reads a round trip apart, not one snapshot of the fleet: a listing, nothing
   * decides on it (placement reads its own snapshot).
   */
  async agents(options?: CallOptions): Promise<AgentRow[]> {
    const c = await this.store.fleetContext(options);
    const k = c.keys;
    const lp = encodeURIComponent(AGENT_LEASE_PREFIX);
    // The schema and floor check every read here makes, once, before the pages (which are plain ranges).
    await this.read(c, [], 'fleet agents');
    const from = Buffer.from(this.agentPrefix(k));
    const out: AgentRow[] = [];
    for await (const page of pages((q) => this.txn(c, q, 'fleet agents'), from, prefixEnd(from), 'Ascend')) {
      const firstId = page[0]!.key.subarray(from.length);
      const lastId = page.at(-1)!.key.subarray(from.length);
      // [first, last + NUL): exactly the keys of this page's ids (and of no id past the last).
      const span = (prefix: string): EtcdRequestOp => ({
        request_range: { key: Buffer.concat([Buffer.from(prefix), firstId]), range_end: Buffer.concat([Buffer.from(prefix), lastId, Buffer.from([0])]) },
      });
      const r = await this.txn(c, { compare: [], success: [span(k.termPrefix + lp), span(k.renewPrefix + lp), span(k.statePrefix + lp)], failure: [] }, 'fleet agents');
      const snap = this.snapshotAgents(k, page, all(r.responses[0]));
      const { rows } = await this.rows(c, [...snap.values()], this.byAgent(k, all(r.responses[1]), k.renewPrefix), this.byAgent(k, all(r.responses[2]), k.statePrefix));
      for (const { deregisteredAtMs: _, ...row } of rows.values()) out.push(row);
    }
    return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /**
   * One Txn reads the resource and the keys of the agent that owned it last time (a guess); if
   * the owner on record is another, one more Txn reads that one's. Then one LeaseTimeToLive.
   */
  async owner(resource: string, options?: CallOptions): Promise<OwnerRow | undefined> {
    const c = await this.store.fleetContext(options);
    const k = c.keys;
    const own = this.ownKey(k, resource);
    let guess = this.guesses.get(resource);
    let attempt = 0;
    for (; attempt === 0 || Date.now() < c.deadline; attempt++) {
      const name = guess === undefined ? undefined : `${AGENT_LEASE_PREFIX}${guess}`;
      const ops = [rangeOf(own)];
      if (guess !== undefined && name !== undefined) ops.push(rangeOf(this.agentKey(k, guess)), rangeOf(k.term(name)), rangeOf(k.renew(name)), rangeOf(k.state(name)));
      const r = await this.read(c, ops, 'fleet owner');
      const ownKv = first(r.responses[0]);
      const v = parseOwn(ownKv);
      if (ownKv === undefined || v === null) {
        this.guesses.delete(resource);
        return undefined;
      }
      if (v.agent !== guess) {
        guess = v.agent;
        this.remember(resource, guess);
        continue;
      }
      const generation = generationOf(ownKv, v);
      const agentKv = first(r.responses[1]);
      const value = parseAgent(agentKv);
      if (agentKv === undefined || value === null) {
        // Ownership names an agent with no record: owned, and not by anyone alive.
        const now = Date.now();
        return { resource, agent: v.agent, generation, placedAtMs: v.placedAtMs, live: false, deregistered: false, deregisteredAtMs: null, heartbeatAgeMs: null, expiresInMs: null, storeNowMs: now };
      }
      const cand: Candidate = { id: v.agent, kv: agentKv, value, term: first(r.responses[2]) };
      const renew = first(r.responses[3]);
      const state = first(r.responses[4]);
      const { rows } = await this.rows(c, [cand], new Map(renew === undefined ? [] : [[v.agent, renew]]), new Map(state === undefined ? [] : [[v.agent, state]]));
      const row = rows.get(v.agent)!;
      return {
        resource,
        agent: v.agent,
        generation,
        placedAtMs: v.placedAtMs,
        live: row.live,
        deregistered: row.deregistered,
        deregisteredAtMs: row.deregisteredAtMs,
        heartbeatAgeMs: row.heartbeatAgeMs,
        expiresInMs: row.expiresInMs,
        storeNowMs: row.storeNowMs,
      };
    }
    throw this.conflicted(`looking up the owner of "${resource}"`, attempt);
  }

  private remember(resource: string, agent: string): void {
    if (this.guesses.size >= GUESS_CAP) this.guesses.clear();
    this.guesses.set(resource, agent);
  }

  /** One snapshot of every agent, their term keys and the resource. */
  private async snapshot(c: Ctx, resource: string, where: string): Promise<{ agents: Map<string, Candidate>; own: EtcdKeyValue | undefined }> {
    const k = c.keys;
    const r = await this.read(c, [rangePrefix(this.agentPrefix(k)), rangePrefix(this.agentTermPrefix(k)), rangeOf(this.ownKey(k, resource))], where);
    return { agents: this.snapshotAgents(k, all(r.responses[0]), all(r.responses[1])), own: first(r.responses[2]) };
  }

  private ownValue(k: EtcdKeys, agent: string, labels: Labels, writeId: string): Buffer {
    const v: OwnValue = { agent, labels, placedAtMs: Date.now(), floor: k.floor.toString(), writeId };
    return json(v);
  }

  private bump(a: Candidate, by: number): EtcdRequestOp {
    return { request_put: { key: a.kv.key, value: json({ ...a.value, owned: Math.max(0, a.value.owned + by) }) } };
  }

  /**
   * Read everything, pick, then one Txn: the resource is still absent, the pick still holds the
   * same term and record. Its revision, plus the floor, is the generation.
   */
  async place(resource: string, labels: Labels, options?: CallOptions): Promise<PlaceResult> {
    const c = await this.store.fleetContext(options);
    const k = c.keys;
    const key = this.ownKey(k, resource);
    const sent = new Set<string>();
    let attempt = 0;
    for (; attempt === 0 || Date.now() < c.deadline; attempt++) {
      const snap = await this.snapshot(c, resource, 'fleet place');
      const cur = parseOwn(snap.own);
      if (snap.own !== undefined && cur !== null) {
        const outcome = cur.writeId !== undefined && sent.has(cur.writeId) ? 'placed' : 'owned';
        return { outcome, agent: cur.agent, generation: generationOf(snap.own, cur) };
      }
      const a = this.pick(snap.agents, labels, null, null);
      if (a === undefined) return { outcome: 'no-agent' };
      const writeId = newNonce();
      sent.add(writeId);
      const w = await this.write(
        c,
        [{ request_put: { key, value: this.ownValue(k, a.id, labels, writeId) } }, this.bump(a, 1), rangeOf(key)],
        [{ key, target: 'Create', result: 'Equal', create_revision: 0 }, ...this.pinned(k, a)],
        'fleet place',
      );
      if (w !== null) {
        this.remember(resource, a.id);
        return { outcome: 'placed', agent: a.id, generation: written(w, 2) };
      }
      await backoff(attempt, c.deadline);
    }
    throw this.conflicted(`placing "${resource}"`, attempt);
  }

  async reassign(resource: string, from: string, to: string | null, options?: CallOptions): Promise<ReassignResult> {
    const c = await this.store.fleetContext(options);
    const k = c.keys;
    const key = this.ownKey(k, resource);
    const sent = new Set<string>();
    let attempt = 0;
    for (; attempt === 0 || Date.now() < c.deadline; attempt++) {
      const snap = await this.snapshot(c, resource, 'fleet reassign');
      const v = parseOwn(snap.own);
      if (snap.own !== undefined && v?.writeId !== undefined && sent.has(v.writeId)) return { outcome: 'moved', agent: v.agent, generation: generationOf(snap.own, v) };
      if (snap.own === undefined || v === null || v.agent !== from) return { outcome: 'owner-changed', owner: v?.agent ?? null };
      const a = this.pick(snap.agents, v.labels, to, from);
      if (a === undefined) return { outcome: 'no-agent' };
      const old = snap.agents.get(from);
      const writeId = newNonce();
      sent.add(writeId);
      const w = await this.write(
        c,
        [{ request_put: { key, value: this.ownValue(k, a.id, v.labels, writeId) } }, this.bump(a, 1), rangeOf(key), ...(old === undefined ? [] : [this.bump(old, -1)])],
        [
          { key, target: 'Mod', result: 'Equal', mod_revision: snap.own.mod_revision },
          ...this.pinned(k, a),
          { key: this.agentKey(k, from), target: 'Mod', result: 'Equal', mod_revision: old?.kv.mod_revision ?? '0' },
        ],
        'fleet reassign',
      );
      if (w !== null) {
        this.remember(resource, a.id);
        return { outcome: 'moved', agent: a.id, generation: written(w, 2) };
      }
      await backoff(attempt, c.deadline);
    }
    throw this.conflicted(`reassigning "${resource}"`, attempt);
  }

  /**
   * One snapshot of the agents and the ownership records; then, per agent deregistered before the
   * horizon (by this process's clock, which stamped deregisteredAtMs), its records deleted with
   * its owned count in one Txn pinned on every key read (a record reassigned, or the agent
   * registered again, since: the Txn fails and this batch leaves them), at most PRUNE_CHUNK per
   * Txn; then agents that own nothing, likewise pinned.
   */
  async prune(req: FleetPruneRequest, options?: CallOptions): Promise<FleetPruneResult> {
    const c = await this.store.fleetContext(options);
    const k = c.keys;
    const r = await this.read(c, [rangePrefix(this.agentPrefix(k))], 'fleet prune');
    const horizon = Date.now() - req.olderThanMs;
    const gone = new Map<string, { kv: EtcdKeyValue; value: AgentValue }>();
    for (const kv of all(r.responses[0])) {
      const id = k.nameIn(kv.key, this.agentPrefix(k));
      const value = parseAgent(kv);
      if (id !== null && value?.deregisteredAtMs !== undefined && value.deregisteredAtMs < horizon) gone.set(id, { kv, value });
    }
    // The ownership records in pages: a fleet's whole `own/` range passes gRPC's 4 MB answer
    // limit at some tens of thousands of resources. Not one revision: each delete below is
    // pinned on the record's mod revision and the agent's, so a record changed since stays.
    const records = new Map<string, EtcdKeyValue[]>();
    const own = Buffer.from(`${k.fleetPrefix}own/`);
    if (gone.size > 0) {
      for await (const kvs of pages((q) => this.txn(c, q, 'fleet prune'), own, prefixEnd(own), 'Ascend')) {
        for (const kv of kvs) {
          const agent = parseOwn(kv)?.agent;
          if (agent === undefined || !gone.has(agent)) continue;
          const mine = records.get(agent);
          if (mine === undefined) records.set(agent, [kv]);
          else mine.push(kv);
        }
      }
    }
    let ownership = 0;
    let agents = 0;
    let conflicted = false;
    for (const [id, a] of gone) {
      const mine = (records.get(id) ?? []).slice(0, Math.min(PRUNE_CHUNK, req.limit - ownership - agents));
      if (mine.length === 0 && records.has(id)) break;
      const ops: EtcdRequestOp[] = mine.map((kv) => ({ request_delete_range: { key: kv.key } }));
      const whole = mine.length === (records.get(id)?.length ?? 0);
      // Every record of the agent goes in this Txn: the agent record goes too, else its count drops.
      ops.push(whole ? { request_delete_range: { key: a.kv.key } } : { request_put: { key: a.kv.key, value: json({ ...a.value, owned: Math.max(0, a.value.owned - mine.length) }) } });
      const w = await this.write(
        c,
        ops,
        [{ key: a.kv.key, target: 'Mod', result: 'Equal', mod_revision: a.kv.mod_revision }, ...mine.map((kv) => ({ key: kv.key, target: 'Mod' as const, result: 'Equal' as const, mod_revision: kv.mod_revision }))],
        'fleet prune',
      );
      // A conflict, or an agent with more records than one Txn takes: the next call goes on.
      if (w === null || !whole) conflicted = true;
      if (w === null) continue;
      ownership += mine.length;
      if (whole) agents++;
      if (ownership + agents >= req.limit) break;
    }
    return { ownership, agents, more: conflicted || ownership + agents >= req.limit };
  }

  async remove(resource: string, from: string, options?: CallOptions): Promise<boolean> {
    const c = await this.store.fleetContext(options);
    const k = c.keys;
    const key = this.ownKey(k, resource);
    const agentKey = this.agentKey(k, from);
    let attempt = 0;
    for (; attempt === 0 || Date.now() < c.deadline; attempt++) {
      const r = await this.read(c, [rangeOf(key), rangeOf(agentKey)], 'fleet remove');
      const ownKv = first(r.responses[0]);
      if (parseOwn(ownKv)?.agent !== from) return false;
      const agentKv = first(r.responses[1]);
      const value = parseAgent(agentKv);
      const ops: EtcdRequestOp[] = [{ request_delete_range: { key } }];
      if (agentKv !== undefined && value !== null) ops.push(this.bump({ id: from, kv: agentKv, value, term: undefined }, -1));
      const w = await this.write(
        c,
        ops,
        [
          { key, target: 'Mod', result: 'Equal', mod_revision: ownKv!.mod_revision },
          { key: agentKey, target: 'Mod', result: 'Equal', mod_revision: agentKv?.mod_revision ?? '0' },
        ],
        'fleet remove',
      );
      if (w !== null) {
        this.guesses.delete(resource);
        return true;
      }
      await backoff(attempt, c.deadline);
    }
    throw this.conflicted(`removing "${resource}"`, attempt);
  }

  /** The client is the lease store's: closing the fleet leaves it to the store's owner. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** The generation of the ownership record a successful write put, read back by op `at` of the same Txn. */
function written(w: EtcdTxnResponse, at: number): bigint {
  const kv = first(w.responses[at]);
  const v = parseOwn(kv);
  if (kv === undefined || v === null) throw new StoreError('etcd answered a fleet write without the record it wrote; report this');
  return generationOf(kv, v);
}

/** A few ms, growing to ~50ms and jittered, so racing writers do not collide again in lockstep; never past the deadline. */
function backoff(attempt: number, deadline: number): Promise<void> {
  return sleep(Math.max(0, Math.min(randomInt(1, 3 * 2 ** Math.min(attempt, 4) + 2), deadline - Date.now())));
}

/**
 * Since the agent's last renewal: its renew record's time, or, for a term its session renews
 * (session.ts: a tick writes no per-term record), the time since etcd last had the session's
 * lease kept alive (granted TTL less remaining, whole seconds).
 */
function heartbeatAge(
  term: EtcdKeyValue | undefined,
  renew: { renewedAtMs: number } | null,
  lease: { ttlSec: number; grantedSec: number } | undefined,
  now: number,
): number | null {
  const byRecord = renew === null ? null : now - renew.renewedAtMs;
  if (parseTerm(term)?.session !== true || lease === undefined || lease.ttlSec < 0 || !Number.isFinite(lease.grantedSec)) return byRecord;
  const byLease = Math.max(0, (lease.grantedSec - lease.ttlSec) * 1000);
  return byRecord === null ? byLease : Math.min(byRecord, byLease);
}
