import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { StoreError, StoreUnavailableError } from '../../core/errors.js';
import type { CallOptions } from '../../core/port.js';
import {
  AGENT_LEASE_PREFIX,
  type AgentRow,
  type FleetPort,
  type FleetPruneRequest,
  type FleetPruneResult,
  type Labels,
  type OwnerRow,
  type PlaceResult,
  type ReassignResult,
  type ResourcePage,
  type ResourcePageRequest,
} from '../../fleet/port.js';
import { type EtcdKeyValue, type EtcdRequestOp, type EtcdResponseOp, type EtcdTxnRequest, type EtcdTxnResponse } from './client.js';
import { newNonce } from '../../core/identity.js';
import { json, prefixEnd, type EtcdKeys } from './keys.js';
import { mapLedgerError, pages } from './pages.js';
import type { EtcdStore } from './store.js';
import { agentRows, generationOf, isLive, parseAgent, parseOwn, type AgentValue, type Candidate, type Ctx, type OwnValue } from './fleet-rows.js';
import { listAgents, listResources, type FleetKeys } from './fleet-list.js';
import { all, first, guarded, rangeOf, schemaOk } from './txn.js';
import { buildLoad, idOfLoadKey, labelsOfLoad, loadKeysOf, loadOps, LoadWindow, type LoadKeys, type LoadPage } from './fleet-load.js';

/*
 * The fleet registry in etcd, beside the etcd lease store's keys (same prefix {p}):
 *
 *   {p}/fleet/agent/{id}        JSON: labels, startedAtMs, draining, deregisteredAtMs (absent while
 *                               registered), owned (kept in step by every Txn that changes ownership)
 *   {p}/fleet/own/{resource}    JSON: agent, labels (what the placement asked for), placedAtMs, floor
 *   {p}/term/agent%2F{id}       the agent's liveness: the lease store's term key for `agent/<id>`
 *   {p}/fleet/load/...          the load index placement walks (fleet-load.ts), written with the records
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
/**
 * Load keys a placement reads per step of its walk, least loaded first; their agents' records and
 * term keys are one more read (2 ops each: under etcd's default --max-txn-ops of 128). A step
 * that finds a live agent carrying the labels ends the walk.
 */
const WALK = 32;
/**
 * Load keys a step reads after the first, whose records and term keys are read AGENTS_PER_READ
 * agents a Txn, at once: a walk past agents that are dead (not deregistered) or lack the labels
 * gets on in bigger steps, so even a fleet with no live agent is read in few round trips.
 */
const WALK_ON = 256;
/** Fewer load keys than this left in a placement's window (fleet-load.ts LoadWindow) and it reads on, and places the window again. */
const REFILL = WALK / 4;
const AGENTS_PER_READ = 50;
/** Ownership records deleted per Txn by prune: well under etcd's default --max-txn-ops (128). */
const PRUNE_CHUNK = 50;

function contains(have: Labels, want: Labels): boolean {
  return Object.entries(want).every(([k, v]) => have[k] === v);
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
  /** The first read of the load index, by load prefix. */
  private readonly windows = new Map<string, LoadWindow>();

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
  private load(k: EtcdKeys): LoadKeys {
    return loadKeysOf(k.fleetPrefix);
  }
  private ownKey(k: EtcdKeys, resource: string): Buffer {
    return Buffer.from(`${k.fleetPrefix}own/${encodeURIComponent(resource)}`);
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
      const prev = parseAgent(kv);
      const next = change(prev);
      if (next === null) return false;
      const ok = await this.write(
        c,
        [{ request_put: { key, value: json(next) } }, ...loadOps(this.load(c.keys), id, prev, next)],
        [{ key, target: 'Mod', result: 'Equal', mod_revision: kv?.mod_revision ?? '0' }],
        where,
      );
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

  private fleetKeys(k: EtcdKeys): FleetKeys {
    return { keys: k, agentPrefix: this.agentPrefix(k), ownPrefix: `${k.fleetPrefix}own/` };
  }

  /** Every agent, a page at a time (fleet-list.ts). */
  async agents(options?: CallOptions): Promise<AgentRow[]> {
    const c = await this.store.fleetContext(options);
    // The schema and floor check every read here makes, once, before the pages (which are plain ranges).
    await this.read(c, [], 'fleet agents');
    return listAgents(c, (q) => this.txn(c, q, 'fleet agents'), this.fleetKeys(c.keys));
  }

  /** A page of ownership records with their owners' liveness (fleet-list.ts); its first read is guarded. */
  async resources(req: ResourcePageRequest, options?: CallOptions): Promise<ResourcePage> {
    const c = await this.store.fleetContext(options);
    return listResources(c, (q) => this.read(c, q.success, 'fleet resources'), this.fleetKeys(c.keys), req);
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
      const { rows } = await agentRows(c, [cand], new Map(renew === undefined ? [] : [[v.agent, renew]]), new Map(state === undefined ? [] : [[v.agent, state]]));
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

  private ownValue(k: EtcdKeys, agent: string, labels: Labels, writeId: string): Buffer {
    const v: OwnValue = { agent, labels, placedAtMs: Date.now(), floor: k.floor.toString(), writeId };
    return json(v);
  }

  /** The record with its owned count moved by `by`, and its load key with it. */
  private bump(k: EtcdKeys, a: Candidate, by: number): EtcdRequestOp[] {
    const next = { ...a.value, owned: Math.max(0, a.value.owned + by) };
    return [{ request_put: { key: a.kv.key, value: json(next) } }, ...loadOps(this.load(k), a.id, a.value, next)];
  }

  /**
   * A range read of load keys from `from` (inclusive), `limit` of them, in key order. No
   * sort_order: etcd answers a range in key order already, and a range with one (even Ascend by
   * Key, on etcd 3.4) is read whole, sorted and then cut to the limit: 30 ms for 32 of 10,000
   * keys, against 5 without. (The rest is etcd counting the range for the answer's `count`,
   * about 0.25 µs a key on this machine, which no option of a range avoids: so a placement's
   * first read is a window, LoadWindow in fleet-load.ts, and only a walk past it reads to the end.)
   */
  private loadPage(k: EtcdKeys, from: Buffer, limit = WALK): EtcdRequestOp {
    return { request_range: { key: from, range_end: prefixEnd(Buffer.from(this.load(k).loadPrefix)), limit } };
  }

  private window(k: EtcdKeys): LoadWindow {
    const l = this.load(k);
    let w = this.windows.get(l.loadPrefix);
    if (w === undefined) this.windows.set(l.loadPrefix, (w = new LoadWindow(l, WALK, REFILL)));
    return w;
  }

  /** The first step's page from the window's answer `r` (LoadWindow.page). */
  private firstPage(c: Ctx, w: LoadWindow, r: EtcdResponseOp | undefined, bound: Buffer | undefined, where: string): Promise<LoadPage> {
    return w.page(all(r), r?.response_range?.more === true, bound, async (from, limit) => {
      const on = await this.txn(c, { compare: [], success: [this.loadPage(c.keys, from, limit)], failure: [] }, where);
      return { kvs: all(on.responses[0]), more: on.responses[0]?.response_range?.more === true };
    });
  }

  /**
   * Builds the load index when `load-built` is absent (fleet-load.ts), once: the caller's loop
   * reads again (and builds again, after a back-off, while records keep changing under the build).
   */
  private async ensureLoad(c: Ctx, where: string, attempt: number): Promise<void> {
    const write = async (q: EtcdTxnRequest): Promise<EtcdTxnResponse> => ((await this.write(c, q.success, q.compare, where)) === null ? { succeeded: false, responses: [] } : { succeeded: true, responses: [] });
    if (!(await buildLoad((q) => this.txn(c, q, where), this.load(c.keys), write))) await backoff(attempt, c.deadline);
  }

  /**
   * The walk of the load index from the page `kvs` (read with the resource's record): each step,
   * the records and term keys of the agents whose load key carries `want` (never `except`), in
   * one read; the first step with a live, non-draining one of them (by its record, the truth)
   * picks the fewest owned among those, ties at random. The index is in owned order, so no agent
   * past the step owns fewer.
   */
  private async walk(c: Ctx, kvs: EtcdKeyValue[], more: boolean, want: Labels, except: string | null, where: string): Promise<Candidate | undefined> {
    const k = c.keys;
    const l = this.load(k);
    for (;;) {
      const ids = kvs.flatMap((kv) => {
        const id = idOfLoadKey(l, kv.key);
        const labels = labelsOfLoad(kv);
        return id === null || id === except || labels === null || !contains(labels, want) ? [] : [id];
      });
      if (ids.length > 0) {
        const found = new Map<string, Candidate>();
        const chunks = Array.from({ length: Math.ceil(ids.length / AGENTS_PER_READ) }, (_, i) => ids.slice(i * AGENTS_PER_READ, (i + 1) * AGENTS_PER_READ));
        await Promise.all(
          chunks.map(async (chunk) => {
            const r = await this.txn(c, { compare: [], success: chunk.flatMap((id) => [rangeOf(this.agentKey(k, id)), rangeOf(k.term(`${AGENT_LEASE_PREFIX}${id}`))]), failure: [] }, where);
            chunk.forEach((id, i) => {
              const kv = first(r.responses[2 * i]);
              const value = parseAgent(kv);
              if (kv !== undefined && value !== null) found.set(id, { id, kv, value, term: first(r.responses[2 * i + 1]) });
            });
          }),
        );
        const a = this.pick(found, want, null, except);
        if (a !== undefined) return a;
      }
      const last = kvs.at(-1);
      if (!more || last === undefined) return undefined;
      const r = await this.txn(c, { compare: [], success: [this.loadPage(k, Buffer.concat([last.key, Buffer.from([0])]), WALK_ON)], failure: [] }, where);
      kvs = all(r.responses[0]);
      more = r.responses[0]?.response_range?.more === true;
    }
  }

  /**
   * One guarded read of the resource's record and the first step of the load index, the walk
   * (`walk`: one more read a step, usually one), then one Txn: the resource is still absent, the
   * pick still holds the same term and record. Its revision, plus the floor, is the generation.
   */
  async place(resource: string, labels: Labels, options?: CallOptions): Promise<PlaceResult> {
    const c = await this.store.fleetContext(options);
    const k = c.keys;
    const key = this.ownKey(k, resource);
    const l = this.load(k);
    const win = this.window(k);
    const sent = new Set<string>();
    let attempt = 0;
    for (; attempt === 0 || Date.now() < c.deadline; attempt++) {
      const head = win.first();
      const r = await this.read(c, [rangeOf(key), rangeOf(l.built), head.op], 'fleet place');
      const own = first(r.responses[0]);
      const cur = parseOwn(own);
      if (own !== undefined && cur !== null) {
        const outcome = cur.writeId !== undefined && sent.has(cur.writeId) ? 'placed' : 'owned';
        return { outcome, agent: cur.agent, generation: generationOf(own, cur) };
      }
      if (first(r.responses[1]) === undefined) {
        await this.ensureLoad(c, 'fleet place', attempt);
        continue;
      }
      const page = await this.firstPage(c, win, r.responses[2], head.bound, 'fleet place');
      const a = await this.walk(c, page.kvs, page.more, labels, null, 'fleet place');
      if (a === undefined) return { outcome: 'no-agent' };
      const writeId = newNonce();
      sent.add(writeId);
      const w = await this.write(
        c,
        [{ request_put: { key, value: this.ownValue(k, a.id, labels, writeId) } }, rangeOf(key), ...this.bump(k, a, 1)],
        [{ key, target: 'Create', result: 'Equal', create_revision: 0 }, ...this.pinned(k, a)],
        'fleet place',
      );
      if (w !== null) {
        this.remember(resource, a.id);
        return { outcome: 'placed', agent: a.id, generation: written(w, 1) };
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
    const l = this.load(k);
    const win = this.window(k);
    for (; attempt === 0 || Date.now() < c.deadline; attempt++) {
      const head = win.first();
      // The resource's record, the current owner's record, and either the named agent's keys or the load index's first step.
      const toName = to === null ? null : `${AGENT_LEASE_PREFIX}${to}`;
      const r = await this.read(
        c,
        [rangeOf(key), rangeOf(this.agentKey(k, from)), ...(to === null ? [rangeOf(l.built), head.op] : [rangeOf(this.agentKey(k, to)), rangeOf(k.term(toName!))])],
        'fleet reassign',
      );
      const ownKv = first(r.responses[0]);
      const v = parseOwn(ownKv);
      if (ownKv !== undefined && v?.writeId !== undefined && sent.has(v.writeId)) return { outcome: 'moved', agent: v.agent, generation: generationOf(ownKv, v) };
      if (ownKv === undefined || v === null || v.agent !== from) return { outcome: 'owner-changed', owner: v?.agent ?? null };
      let a: Candidate | undefined;
      if (to === null) {
        if (first(r.responses[2]) === undefined) {
          await this.ensureLoad(c, 'fleet reassign', attempt);
          continue;
        }
        const page = await this.firstPage(c, win, r.responses[3], head.bound, 'fleet reassign');
        a = await this.walk(c, page.kvs, page.more, v.labels, from, 'fleet reassign');
      } else {
        const toKv = first(r.responses[2]);
        const value = parseAgent(toKv);
        a = toKv === undefined || value === null ? undefined : this.pick(new Map([[to, { id: to, kv: toKv, value, term: first(r.responses[3]) }]]), v.labels, to, from);
      }
      if (a === undefined) return { outcome: 'no-agent' };
      const oldKv = first(r.responses[1]);
      const oldValue = parseAgent(oldKv);
      const old = oldKv === undefined || oldValue === null ? undefined : { id: from, kv: oldKv, value: oldValue, term: undefined };
      const writeId = newNonce();
      sent.add(writeId);
      const w = await this.write(
        c,
        [{ request_put: { key, value: this.ownValue(k, a.id, v.labels, writeId) } }, rangeOf(key), ...this.bump(k, a, 1), ...(old === undefined ? [] : this.bump(k, old, -1))],
        [
          { key, target: 'Mod', result: 'Equal', mod_revision: ownKv.mod_revision },
          ...this.pinned(k, a),
          { key: this.agentKey(k, from), target: 'Mod', result: 'Equal', mod_revision: old?.kv.mod_revision ?? '0' },
        ],
        'fleet reassign',
      );
      if (w !== null) {
        this.remember(resource, a.id);
        return { outcome: 'moved', agent: a.id, generation: written(w, 1) };
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
    await this.read(c, [], 'fleet prune');
    const horizon = Date.now() - req.olderThanMs;
    const gone = new Map<string, { kv: EtcdKeyValue; value: AgentValue }>();
    // The agent records in pages too, as agents() reads them (fleet-list.ts).
    const agentFrom = Buffer.from(this.agentPrefix(k));
    for await (const kvs of pages((q) => this.txn(c, q, 'fleet prune'), agentFrom, prefixEnd(agentFrom), 'Ascend')) {
      for (const kv of kvs) {
        const id = k.nameIn(kv.key, this.agentPrefix(k));
        const value = parseAgent(kv);
        if (id !== null && value?.deregisteredAtMs !== undefined && value.deregisteredAtMs < horizon) gone.set(id, { kv, value });
      }
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
      if (agentKv !== undefined && value !== null) ops.push(...this.bump(k, { id: from, kv: agentKv, value, term: undefined }, -1));
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

