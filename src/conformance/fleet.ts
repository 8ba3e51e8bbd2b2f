/**
 * The fleet conformance suite: what a {@link FleetPort} must do, on top of the lease store whose
 * leases are the agents' liveness. Agents here are plain lease claims of `agent/<id>` plus a
 * registration, so every liveness case (live, expired, released, deregistered, never leased)
 * is set up exactly, without agent processes. Run it with node:test, like `runConformance`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { newNonce } from '../core/identity.js';
import { NoLiveAgentError, NoOwnerError, OwnerChangedError, OwnerDeadError } from '../fleet/errors.js';
import type { LeaseStore } from '../backends/store.js';
import { ConfigError } from '../core/errors.js';
import { Fleet, RESOURCE_PAGE_MAX, type OwnerState, type ResourceRow } from '../fleet/fleet.js';
import { pruneFleet } from '../fleet/retention.js';
import { AGENT_LEASE_PREFIX, type FleetPort, type Labels } from '../fleet/port.js';

/** One isolated namespace of the store under test, with its fleet. */
export interface FleetConformanceTarget {
  /** Migrated and ready: the suite claims agents' liveness leases (`agent/<id>`) here. */
  store: LeaseStore;
  /** The fleet over `store`'s namespace. */
  fleet: FleetPort;
  /** Another, independent fleet on the same namespace (another "process"). */
  openFleet(): Promise<FleetPort>;
  /** Closes everything opened and drops the namespace. */
  cleanup(): Promise<void>;
}

export type FleetConformanceFactory = (label: string) => Promise<FleetConformanceTarget>;

export interface FleetConformanceOptions {
  /** The shortest TTL the store honours. Default 800 ms (etcd: 2000). */
  shortTtlMs?: number;
  /** How long after its expiry the store may still call a lease live. Default 250 ms. */
  expirySlackMs?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const LONG_TTL = 60_000;

interface TestAgent {
  id: string;
  holder: string;
  nonce: string;
}

/**
 * Registers the fleet suite for one store. Call it at the top level of a test file.
 * @param label shown in the test names (`fleet conformance: <label>`)
 */
export function runFleetConformance(label: string, factory: FleetConformanceFactory, options: FleetConformanceOptions = {}): void {
  const shortTtl = options.shortTtlMs ?? 800;
  const slack = options.expirySlackMs ?? 250;

  void describe(`fleet conformance: ${label}`, () => {
    let t: FleetConformanceTarget;
    let fleet: Fleet;
    before(async () => {
      t = await factory(`${label}-fleet`);
      fleet = new Fleet(t.fleet);
    });
    after(async () => {
      await t?.cleanup();
    });

    /** An agent: its liveness lease claimed for `ttlMs` (null: no lease at all), then registered. */
    async function agent(id: string, labels: Labels, ttlMs: number | null = LONG_TTL): Promise<TestAgent> {
      const holder = `holder-${id}`;
      const nonce = newNonce();
      if (ttlMs !== null) {
        const [r] = await t.store.claim([{ name: `${AGENT_LEASE_PREFIX}${id}`, holder, ttlMs, expect: null, nextNonce: nonce }]);
        assert.equal(r?.outcome, 'acquired', `the liveness lease of ${id}`);
      }
      await t.fleet.registerAgent(id, labels);
      return { id, holder, nonce };
    }

    /** Waits until the store itself no longer counts `id` live. */
    async function untilDead(id: string): Promise<void> {
      const limit = Date.now() + shortTtl * 4 + slack + 10_000;
      await sleep(shortTtl);
      for (;;) {
        const row = (await t.fleet.agents()).find((a) => a.id === id);
        if (row !== undefined && !row.live) return;
        if (Date.now() > limit) throw new Error(`agent ${id} was still live long after its lease's ttl`);
        await sleep(100);
      }
    }

    async function ownedOf(...ids: string[]): Promise<number[]> {
      const rows = await t.fleet.agents();
      return ids.map((id) => rows.find((a) => a.id === id)?.owned ?? -1);
    }

    void it('places only on live, non-draining agents', async () => {
      const pool = uniq('live');
      const labels = { pool };
      const [ok, drained, expired, released, gone] = await Promise.all([
        agent(uniq('ok'), labels),
        agent(uniq('drained'), labels),
        agent(uniq('expired'), labels, shortTtl),
        agent(uniq('released'), labels),
        agent(uniq('dereg'), labels),
      ]);
      const neverLeased = await agent(uniq('nolease'), labels, null);
      assert.equal(await t.fleet.setDraining(drained!.id, true), true);
      assert.equal(await t.store.release({ name: `${AGENT_LEASE_PREFIX}${released!.id}`, holder: released!.holder, expect: [released!.nonce] }), true);
      await t.fleet.deregisterAgent(gone!.id);
      await untilDead(expired!.id);

      const rows = new Map((await t.fleet.agents()).map((a) => [a.id, a]));
      assert.equal(rows.get(ok!.id)?.live, true);
      assert.equal(rows.get(drained!.id)?.live, true, 'draining does not make an agent dead');
      assert.equal(rows.get(drained!.id)?.draining, true);
      for (const dead of [expired!, released!, gone!, neverLeased]) assert.equal(rows.get(dead.id)?.live, false, `${dead.id} is not live`);
      assert.equal(rows.get(gone!.id)?.deregistered, true);
      assert.equal(rows.get(neverLeased.id)?.heartbeatAgeMs, null, 'no lease: no heartbeat age');
      const okRow = rows.get(ok!.id)!;
      assert.ok(okRow.expiresInMs !== null && okRow.expiresInMs > 0 && okRow.expiresInMs <= LONG_TTL + slack, `expires in ${okRow.expiresInMs}`);
      assert.ok(okRow.heartbeatAgeMs !== null && okRow.heartbeatAgeMs >= -slack, `heartbeat age ${okRow.heartbeatAgeMs}`);
      assert.deepEqual(okRow.labels, labels);

      for (let i = 0; i < 6; i++) assert.equal((await fleet.place(uniq('job'), { labels })).agent, ok!.id);
      assert.deepEqual(await ownedOf(ok!.id, drained!.id, expired!.id), [6, 0, 0]);
    });

    void it('places on the agent owning fewest, breaking ties at random', async () => {
      const pool = uniq('fewest');
      const labels = { pool };
      const ids = [uniq('f1'), uniq('f2'), uniq('f3')];
      await Promise.all(ids.map((id) => agent(id, labels)));
      const placed: { resource: string; agent: string }[] = [];
      for (let i = 0; i < 9; i++) {
        const resource = uniq('spread');
        placed.push({ resource, agent: (await fleet.place(resource, { labels })).agent });
      }
      assert.deepEqual(await ownedOf(...ids), [3, 3, 3]);
      // Two fewer on the first: the next two go there.
      for (const p of placed.filter((x) => x.agent === ids[0]).slice(0, 2)) await fleet.remove(p.resource, { from: p.agent });
      assert.deepEqual(await ownedOf(...ids), [1, 3, 3]);
      for (let i = 0; i < 2; i++) assert.equal((await fleet.place(uniq('refill'), { labels })).agent, ids[0]);
      // All tied: over 24 place-and-remove rounds, more than one agent is picked (all three tie).
      const picked = new Set<string>();
      for (let i = 0; i < 24; i++) {
        const resource = uniq('tie');
        const p = await fleet.place(resource, { labels });
        picked.add(p.agent);
        await fleet.remove(resource, { from: p.agent });
      }
      assert.ok(picked.size > 1, `ties always went to ${[...picked].join(', ')}`);
    });

    void it('places only on agents carrying every label asked for', async () => {
      const pool = uniq('labels');
      const gpu = await agent(uniq('gpu'), { pool, zone: 'eu', gpu: 'true' });
      const eu = await agent(uniq('eu'), { pool, zone: 'eu' });
      const us = await agent(uniq('us'), { pool, zone: 'us' });
      assert.equal((await fleet.place(uniq('l'), { labels: { pool, zone: 'eu', gpu: 'true' } })).agent, gpu.id);
      assert.equal((await fleet.place(uniq('l'), { labels: { pool, zone: 'us' } })).agent, us.id);
      const anyEu = (await fleet.place(uniq('l'), { labels: { pool, zone: 'eu' } })).agent;
      assert.ok(anyEu === gpu.id || anyEu === eu.id, `placed on ${anyEu}`);
      const none = uniq('l');
      await assert.rejects(fleet.place(none, { labels: { pool, zone: 'ap' } }), NoLiveAgentError);
      await assert.rejects(fleet.place(uniq('l'), { labels: { pool, gpu: 'false' } }), NoLiveAgentError);
      await assert.rejects(fleet.owner(none), NoOwnerError, 'a refused placement records nothing');
    });

    void it('no agent at all: no-agent, and nothing recorded', async () => {
      const resource = uniq('orphan');
      const r = await t.fleet.place(resource, { pool: uniq('empty') }, {});
      assert.deepEqual(r, { outcome: 'no-agent' });
      assert.equal(await t.fleet.owner(resource), undefined);
    });

    void it('an owned resource names its owner, alive or dead, and is not placed again', async () => {
      const pool = uniq('owned');
      const a = await agent(uniq('short'), { pool }, shortTtl);
      const resource = uniq('once');
      const p = await t.fleet.place(resource, { pool });
      assert.equal(p.outcome, 'placed');
      if (p.outcome !== 'placed') return;
      assert.equal(p.agent, a.id);
      assert.deepEqual(await t.fleet.place(resource, { pool }), { outcome: 'owned', agent: a.id, generation: p.generation });
      assert.deepEqual(await t.fleet.place(resource, {}), { outcome: 'owned', agent: a.id, generation: p.generation }, 'whatever the labels asked');
      await agent(uniq('other'), { pool });
      await untilDead(a.id);
      assert.deepEqual(await t.fleet.place(resource, { pool }), { outcome: 'owned', agent: a.id, generation: p.generation }, 'a dead owner is still the owner: place never moves it');
      assert.deepEqual(await ownedOf(a.id), [1]);
    });

    void it('owner lookup: live, dead (with staleness by the store clock), deregistered, none', async () => {
      const pool = uniq('lookup');
      const live = await agent(uniq('live'), { pool });
      const p = await fleet.place(uniq('r-live'), { labels: { pool } });
      const o = await fleet.owner(p.resource);
      assert.equal(o.agent, live.id);
      assert.equal(o.generation, p.generation);
      assert.ok(o.expiresInMs > 0 && o.expiresInMs <= LONG_TTL + slack, `expires in ${o.expiresInMs}`);
      assert.ok(o.heartbeatAgeMs >= -slack && o.heartbeatAgeMs < LONG_TTL, `heartbeat age ${o.heartbeatAgeMs}`);

      await t.fleet.setDraining(live.id, true);
      const dp = await fleet.place(uniq('r-dead'), { labels: { pool } }).catch((e: unknown) => e);
      assert.ok(dp instanceof NoLiveAgentError, 'the only agent is draining');
      const mortal = await agent(uniq('mortal'), { pool }, shortTtl);
      const q = await fleet.place(uniq('r-dead'), { labels: { pool } });
      assert.equal(q.agent, mortal.id);
      await untilDead(mortal.id);
      await sleep(slack);
      const e = await fleet.owner(q.resource).catch((x: unknown) => x);
      assert.ok(e instanceof OwnerDeadError, `expected OwnerDeadError, got ${String(e)}`);
      assert.equal(e.owner, mortal.id);
      assert.equal(e.generation, q.generation);
      assert.equal(e.deregistered, false);
      assert.ok(e.staleForMs === null || e.staleForMs >= 0, `stale for ${e.staleForMs}`);
      const row = await t.fleet.owner(q.resource);
      assert.equal(row?.live, false);
      if (row?.expiresInMs != null) assert.ok(row.expiresInMs <= 0, `a dead owner's lease expired ${row.expiresInMs}ms from now`);
      // Asking again gives the same answer: a lookup never places or moves anything.
      await assert.rejects(fleet.owner(q.resource), OwnerDeadError);

      await t.fleet.setDraining(live.id, false);
      await t.fleet.deregisterAgent(live.id);
      const g = await fleet.owner(p.resource).catch((x: unknown) => x);
      assert.ok(g instanceof OwnerDeadError && g.deregistered, `a deregistered owner is dead at once: ${String(g)}`);
      assert.ok(g.staleForMs !== null && g.staleForMs >= 0);

      await assert.rejects(fleet.owner(uniq('never')), NoOwnerError);
    });

    void it('reassign checks the owner on record, moves with a larger generation, and keeps counts', async () => {
      const pool = uniq('reassign');
      const [a, b, c] = await Promise.all([agent(uniq('a'), { pool }), agent(uniq('b'), { pool }), agent(uniq('c'), { pool: 'elsewhere' })]);
      const mortal = await agent(uniq('m'), { pool }, shortTtl);
      await t.fleet.setDraining(b!.id, true);
      const p = await fleet.place(uniq('job'), { labels: { pool } });
      const from = p.agent;
      assert.ok(from === a!.id || from === mortal.id);
      const other = from === a!.id ? mortal.id : a!.id;
      await untilDead(mortal.id);

      assert.deepEqual(await t.fleet.reassign(p.resource, c!.id, null), { outcome: 'owner-changed', owner: from });
      assert.deepEqual(await t.fleet.reassign(uniq('nothing'), from, null), { outcome: 'owner-changed', owner: null });
      await assert.rejects(fleet.reassign(p.resource, { from: c!.id }), (e: unknown) => e instanceof OwnerChangedError && e.owner === from);
      // To a draining, dead or unknown agent: refused.
      for (const to of [b!.id, mortal.id, uniq('ghost')]) {
        if (to === from) continue;
        assert.deepEqual(await t.fleet.reassign(p.resource, from, to), { outcome: 'no-agent' }, `to ${to}`);
      }
      const unchanged = await t.fleet.owner(p.resource);
      assert.equal(unchanged?.generation, p.generation, 'a refused reassign changes nothing');
      assert.equal(unchanged?.agent, from);

      if (from === a!.id) {
        // The only other live, non-draining agent with the labels is dead: nowhere to go.
        assert.deepEqual(await t.fleet.reassign(p.resource, from, null), { outcome: 'no-agent' });
        await t.fleet.setDraining(b!.id, false);
        const moved = await fleet.reassign(p.resource, { from });
        assert.equal(moved.agent, b!.id);
        assert.ok(moved.generation > p.generation);
        assert.deepEqual(await ownedOf(a!.id, b!.id), [0, 1]);
      } else {
        // The owner is dead: reassigning away from it is what recovery does.
        const moved = await fleet.reassign(p.resource, { from });
        assert.equal(moved.agent, other);
        assert.ok(moved.generation > p.generation);
        assert.deepEqual(await ownedOf(mortal.id, a!.id), [0, 1]);
      }
      // `to` may name an agent without the placement's labels: the operator chose it.
      const cur = (await t.fleet.owner(p.resource))!;
      const forced = await fleet.reassign(p.resource, { from: cur.agent, to: c!.id });
      assert.equal(forced.agent, c!.id);
      assert.ok(forced.generation > cur.generation);
      assert.equal((await fleet.owner(p.resource)).agent, c!.id);
    });

    void it('generations strictly increase, across resources, reassign, remove and placing again', async () => {
      const pool = uniq('gen');
      await Promise.all([agent(uniq('g1'), { pool }), agent(uniq('g2'), { pool })]);
      const seen: bigint[] = [];
      const r1 = uniq('gen');
      let p = await fleet.place(r1, { labels: { pool } });
      seen.push(p.generation);
      seen.push((await fleet.place(uniq('gen-other'), { labels: { pool } })).generation);
      p = await fleet.reassign(r1, { from: p.agent });
      seen.push(p.generation);
      assert.equal(await t.fleet.remove(r1, 'nobody'), false);
      assert.equal((await t.fleet.owner(r1))?.generation, p.generation, 'a refused remove changes nothing');
      assert.equal(await t.fleet.remove(r1, p.agent), true);
      assert.equal(await t.fleet.owner(r1), undefined);
      p = await fleet.place(r1, { labels: { pool } });
      seen.push(p.generation);
      p = await fleet.reassign(r1, { from: p.agent });
      seen.push(p.generation);
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i]! > seen[i - 1]!, `generations ${seen.join(', ')}`);
    });

    void it('drain and undrain: out of placement, still owning; a restart keeps the drain', async () => {
      const pool = uniq('drain');
      const d = await agent(uniq('d'), { pool });
      const first = await fleet.place(uniq('dj'), { labels: { pool } });
      assert.equal(first.agent, d.id);
      assert.equal(await t.fleet.setDraining(d.id, true), true);
      await assert.rejects(fleet.place(uniq('dj'), { labels: { pool } }), NoLiveAgentError);
      assert.equal((await fleet.owner(first.resource)).agent, d.id, 'a draining agent still owns what it owned');
      await t.fleet.registerAgent(d.id, { pool });
      assert.equal((await t.fleet.agents()).find((a) => a.id === d.id)?.draining, true, 'registering again does not undo a drain');
      assert.equal(await t.fleet.setDraining(d.id, false), true);
      assert.equal((await fleet.place(uniq('dj'), { labels: { pool } })).agent, d.id);
      assert.equal(await t.fleet.setDraining(uniq('nobody'), true), false);
    });

    void it('concurrent placements of one resource, from several processes: exactly one wins', async () => {
      const pool = uniq('race');
      const ids = [uniq('r1'), uniq('r2'), uniq('r3')];
      await Promise.all(ids.map((id) => agent(id, { pool })));
      const ports = [t.fleet, ...(await Promise.all([1, 2, 3].map(() => t.openFleet())))];
      for (let round = 0; round < 3; round++) {
        const resource = uniq('contended');
        const rs = await Promise.all(Array.from({ length: 12 }, (_, i) => ports[i % ports.length]!.place(resource, { pool })));
        const won = rs.filter((r) => r.outcome === 'placed');
        assert.equal(won.length, 1, `winners: ${JSON.stringify(won, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`);
        const w = won[0] as { agent: string; generation: bigint };
        for (const r of rs) {
          assert.ok(r.outcome !== 'no-agent');
          assert.equal(r.agent, w.agent);
          assert.equal(r.generation, w.generation);
        }
      }
      const owned = await ownedOf(...ids);
      assert.equal(owned.reduce((a, b) => a + b, 0), 3, `owned counts ${owned.join(',')}: one per resource`);
    });

    void it('prune deletes the records of agents deregistered before the horizon and their ownership, never a registered agent\'s, and generations keep increasing', async () => {
      assert.equal(typeof t.fleet.prune, 'function', 'the fleet has prune');
      const pool = uniq('prune');
      const gone = await agent(uniq('gone'), { pool, who: 'gone' });
      const stays = await agent(uniq('stays'), { pool, who: 'stays' });
      const stale = await agent(uniq('stale'), { pool, who: 'stale' }, null);
      const resources = [uniq('r1'), uniq('r2'), uniq('r3')];
      const generations: bigint[] = [];
      for (const r of resources) {
        const p = await t.fleet.place(r, { pool, who: 'gone' });
        assert.ok(p.outcome === 'placed' && p.agent === gone.id);
        generations.push(p.generation);
      }
      const kept = uniq('kept');
      const k = await t.fleet.place(kept, { pool, who: 'stays' });
      assert.ok(k.outcome === 'placed');
      generations.push(k.generation);
      await t.fleet.deregisterAgent(gone.id);
      assert.equal((await t.fleet.owner(resources[0]!))?.deregistered, true, 'a deregistered owner is on record until pruned');
      assert.deepEqual(await pruneFleet(t.fleet, { olderThan: '1d' }), { ownership: 0, agents: 0, batches: 1 }, 'nothing is that old');
      // Past the deregistration by the store's clock, whatever its resolution.
      await sleep(1100);
      const r = await pruneFleet(t.fleet, { olderThan: 500, batchSize: 2 });
      // Other cases' deregistered agents go too; this case's three records and its agent at least.
      assert.ok(r.ownership >= 3 && r.agents >= 1 && r.batches >= 2, JSON.stringify(r));
      for (const res of resources) assert.equal(await t.fleet.owner(res), undefined, `${res} has no owner on record`);
      const after = (await t.fleet.owner(kept))!;
      assert.deepEqual([after.agent, after.generation], [stays.id, k.generation], 'a registered agent\'s ownership stays');
      const ids = (await t.fleet.agents()).map((a) => a.id);
      assert.ok(!ids.includes(gone.id), 'the deregistered agent is gone');
      assert.ok(ids.includes(stays.id) && ids.includes(stale.id), 'registered agents stay, live or not');
      assert.deepEqual(await ownedOf(stays.id), [1]);
      // The generation floor survives the prune: a pruned resource placed again gets a larger one.
      const again = await t.fleet.place(resources[2]!, { pool, who: 'stays' });
      assert.ok(again.outcome === 'placed');
      const highest = generations.reduce((a, b) => (a > b ? a : b));
      assert.ok(again.generation > highest, `generation ${again.generation} after the prune is not above ${highest}`);
    });

    void it('lists resources a page at a time, each with its owner, generation and the owner live, stale or deregistered by the store clock', async () => {
      assert.equal(typeof t.fleet.resources, 'function', 'the fleet lists resources');
      const pool = uniq('list');
      const live = await agent(uniq('lv'), { pool, who: 'live' });
      const mortal = await agent(uniq('mo'), { pool, who: 'mortal' }, shortTtl);
      const leaving = await agent(uniq('le'), { pool, who: 'leaving' });
      // Same length, lowercase letters and digits: the same order by bytes, code points, any collation or URI encoding.
      const tag = randomBytes(4).toString('hex');
      const name = (i: number): string => `lst${tag}${String(i).padStart(2, '0')}`;
      const owners = [live, mortal, leaving];
      const expected = new Map<string, { agent: string; generation: bigint; state: OwnerState }>();
      for (let i = 0; i < 9; i++) {
        const who = ['live', 'mortal', 'leaving'][i % 3]!;
        const p = await fleet.place(name(i), { labels: { pool, who } });
        assert.equal(p.agent, owners[i % 3]!.id);
        expected.set(name(i), { agent: p.agent, generation: p.generation, state: (['live', 'stale', 'deregistered'] as const)[i % 3]! });
      }
      // Moved: the listing shows the new owner and generation. Removed: not listed.
      const moved = await fleet.reassign(name(1), { from: mortal.id, to: live.id });
      expected.set(name(1), { agent: live.id, generation: moved.generation, state: 'live' });
      await fleet.remove(name(0), { from: live.id });
      expected.delete(name(0));
      await t.fleet.deregisterAgent(leaving.id);
      await untilDead(mortal.id);
      await sleep(slack);

      // The whole namespace (other cases' resources too) in pages of 4.
      const seen: ResourceRow[] = [];
      let after: string | undefined;
      for (let pages = 0; ; pages++) {
        assert.ok(pages < 1000, 'the listing ends');
        const page = await fleet.resources({ ...(after === undefined ? {} : { after }), limit: 4 });
        assert.ok(page.resources.length <= 4, `a page of 4 answered ${page.resources.length}`);
        seen.push(...page.resources);
        if (page.next === null) break;
        after = page.next;
      }
      const names = seen.map((r) => r.resource);
      assert.equal(new Set(names).size, names.length, 'no resource listed twice');
      const mine = seen.filter((r) => r.resource.startsWith(`lst${tag}`));
      assert.deepEqual(
        mine.map((r) => r.resource),
        [...expected.keys()].sort(),
        'every resource of this case once, in name order; the removed one not at all',
      );
      for (const r of mine) {
        const want = expected.get(r.resource)!;
        assert.equal(r.agent, want.agent, `${r.resource}'s owner`);
        assert.equal(r.generation, want.generation, `${r.resource}'s generation`);
        assert.equal(r.ownerState, want.state, `${r.resource}'s owner ${r.agent} is ${want.state}`);
        assert.equal(r.live, want.state === 'live');
        assert.equal(r.deregistered, want.state === 'deregistered');
        assert.ok(r.storeNowMs > 0 && r.placedAtMs <= r.storeNowMs + slack, `placed ${r.placedAtMs}, store now ${r.storeNowMs}`);
        if (want.state === 'deregistered') assert.ok(r.deregisteredAtMs !== null && r.deregisteredAtMs <= r.storeNowMs + slack);
        if (want.state === 'stale' && r.expiresInMs !== null) assert.ok(r.expiresInMs <= 0, `a stale owner's lease expires in ${r.expiresInMs}ms`);
        if (want.state === 'live') assert.ok(r.expiresInMs !== null && r.expiresInMs > 0);
        // The listing agrees with the lookup of one resource.
        const one = (await t.fleet.owner(r.resource))!;
        assert.deepEqual([one.agent, one.generation, one.live, one.deregistered], [r.agent, r.generation, r.live, r.deregistered]);
      }
      // From the middle: the next names after a cursor, and a cursor past everything.
      const mid = await fleet.resources({ after: name(3), limit: 2 });
      assert.deepEqual(mid.resources.map((r) => r.resource), [name(4), name(5)]);
      assert.equal(mid.next, name(5), 'more follow');
      assert.deepEqual(await fleet.resources({ after: `zzzz${tag}`, limit: 3 }), { resources: [], next: null });
      await assert.rejects(fleet.resources({ limit: 0 }), ConfigError);
      await assert.rejects(fleet.resources({ limit: RESOURCE_PAGE_MAX + 1 }), ConfigError);
    });

    // Last: raising the floor ends the namespace's live terms (agents' liveness leases included).
    void it('generations are fencing tokens: after the token floor is raised (migrate --min-token), every later one is above it', async () => {
      const pool = uniq('floor');
      await agent(uniq('f1'), { pool });
      const before = (await fleet.place(uniq('floor-a'), { labels: { pool } })).generation;
      const floor = before + 1_000_000n;
      await t.store.migrate({ minToken: floor });
      // A store that cached its floor may answer the first call after the raise with a retryable error.
      const retry = async <T>(fn: () => Promise<T>): Promise<T> => fn().catch(() => sleep(100).then(fn));
      await retry(() => agent(uniq('f2'), { pool }));
      const after = (await retry(() => fleet.place(uniq('floor-b'), { labels: { pool } }))).generation;
      assert.ok(after > floor, `generation ${after} placed after the floor was raised to ${floor} is not above it`);
    });
  });
}
