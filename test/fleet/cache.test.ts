/**
 * The edge cache says "live" or asks the store; it never says "dead" on its own. Proved with a
 * fake clock (the logic) and with jittery agents as real processes on real stores (the claim).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { FakeClock } from '../unit/fake-clock.js';
import { OwnerCache } from '../../src/fleet/cache.js';
import type { Owner } from '../../src/fleet/fleet.js';
import { openFleet } from '../../src/fleet/open.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { NoOwnerError, OwnerDeadError } from '../../src/fleet/errors.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';
import { reapAgents, startJitteryAgent, type AgentProcess } from './helpers.js';

/** A scripted registry: each lookup takes the next answer (an Owner, or an error to throw). */
function scripted(answers: (Owner | Error)[]): { owner(resource: string): Promise<Owner>; calls: number } {
  const s = {
    calls: 0,
    owner(): Promise<Owner> {
      const a = answers[s.calls++];
      if (a === undefined) return Promise.reject(new Error('no more scripted answers'));
      return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
    },
  };
  return s;
}

const live = (heartbeatAgeMs: number, expiresInMs: number, generation = 7n): Owner => ({ resource: 'r', agent: 'a1', generation, heartbeatAgeMs, expiresInMs });

void describe('owner cache (fake clock)', () => {
  void it('an agent late by less than the stale threshold when the cache fills is never reported dead', async () => {
    const clock = new FakeClock();
    // Stale after 30s; the last heartbeat is 25s old when the cache fills (the store vouches for 5s more).
    const store = scripted([live(25_000, 5_000), live(100, 29_900)]);
    const cache = new OwnerCache(store, { ttl: '10s', clock });
    assert.equal((await cache.owner('r')).agent, 'a1');
    await clock.advance(4_999);
    assert.equal((await cache.owner('r')).agent, 'a1');
    assert.equal(store.calls, 1, 'within what the store vouched for, the cache answers');
    // Past the store's own expiry (before the cache TTL): the cache does not guess, it asks. The
    // late heartbeat has landed by now, so the answer is live.
    await clock.advance(2);
    const o = await cache.owner('r');
    assert.equal(store.calls, 2);
    assert.equal(o.heartbeatAgeMs, 100);
    assert.deepEqual(cache.stats(), { hits: 1, misses: 2 });
  });

  void it('a live entry lasts at most the TTL', async () => {
    const clock = new FakeClock();
    const store = scripted([live(0, 30_000, 1n), live(0, 30_000, 2n)]);
    const cache = new OwnerCache(store, { ttl: '1s', clock });
    assert.equal((await cache.owner('r')).generation, 1n);
    await clock.advance(999);
    assert.equal((await cache.owner('r')).generation, 1n);
    await clock.advance(1);
    assert.equal((await cache.owner('r')).generation, 2n);
  });

  void it('dead, no-owner and store errors are the store answering, every time: never cached', async () => {
    const clock = new FakeClock();
    const dead = new OwnerDeadError('r', 'a1', 7n, 1200, false);
    const store = scripted([dead, new NoOwnerError('r'), new StoreUnavailableError('down'), live(50, 29_950)]);
    const cache = new OwnerCache(store, { ttl: '10s', clock });
    await assert.rejects(cache.owner('r'), OwnerDeadError);
    await assert.rejects(cache.owner('r'), NoOwnerError);
    await assert.rejects(cache.owner('r'), StoreUnavailableError);
    // No time passed: a negative cache would still be answering "dead" here.
    assert.equal((await cache.owner('r')).agent, 'a1');
    assert.equal(store.calls, 4);
  });

  void it('only the store can say dead: a thousand lookups over jittered liveness give zero dead verdicts from the cache', async () => {
    const clock = new FakeClock();
    let calls = 0;
    let dead = 0;
    // The store's view: heartbeats every 100ms +/- up to 150ms late, stale after 400ms: always live.
    const store = {
      owner(): Promise<Owner> {
        calls++;
        const age = Math.floor(Math.random() * 250);
        return Promise.resolve(live(age, 400 - age));
      },
    };
    const cache = new OwnerCache(store, { ttl: '50ms', clock });
    for (let i = 0; i < 1000; i++) {
      await cache.owner('r').catch(() => dead++);
      await clock.advance(Math.floor(Math.random() * 20));
    }
    assert.equal(dead, 0);
    assert.ok(calls > 10 && calls < 1000, `store calls ${calls}: the cache neither hid the store nor bypassed itself`);
  });
});

for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'sqlite')) {
  void describe(`owner cache under jittered heartbeats on ${kind}`, () => {
    let ts: TestStore;
    before(async () => {
      ts = await makeTestStore(kind);
    });
    after(async () => {
      await reapAgents();
      await ts.cleanup();
    });

    void it('thousands of lookups, zero false dead verdicts; a killed agent is then reported dead', async () => {
      const fleet = await openFleet(ts.store);
      // Heartbeat 100ms, event-loop stalls of up to 250ms: heartbeats land late by up to ~350ms.
      // Stale after 800ms leaves room for a loaded test machine; the claim is about the cache,
      // which must add no dead verdict of its own to whatever the store says.
      const config = { heartbeatMs: 100, staleAfterMs: 800, maxStallMs: 250 };
      const agents: AgentProcess[] = ['j1', 'j2', 'j3'].map((id) => startJitteryAgent(ts.url, id, config));
      await Promise.all(agents.map((a) => a.live()));
      const resources = Array.from({ length: 30 }, (_, i) => `jr-${i}`);
      for (const r of resources) await fleet.place(r);
      // The store's own dead answers, counted where the cache asks it: under load an agent can
      // truly go stale (CI saw j2's heartbeat 800 ms late), and then the store says dead and the
      // cache must pass that on. What the cache must never do is say dead of its own.
      let storeDead = 0;
      const counted = {
        owner: async (r: string, o?: Parameters<typeof fleet.owner>[1]) => {
          try {
            return await fleet.owner(r, o);
          } catch (e) {
            if (e instanceof OwnerDeadError) storeDead++;
            throw e;
          }
        },
      };
      const cache = new OwnerCache(counted, { ttl: '50ms' });
      let lookups = 0;
      let maxAge = 0;
      let deadVerdicts = 0;
      const otherErrors: string[] = [];
      // The claim is about lookups, not throughput: at least 4 s of jittered heartbeats AND at
      // least 2000 lookups, however slow a loaded host makes them (CI once managed 620 in 4 s on
      // PostgreSQL, every one a store round trip). 60 s is only the bound on a broken build.
      const started = Date.now();
      while (Date.now() < started + 4000 || lookups < 2000) {
        assert.ok(Date.now() < started + 60_000, `only ${lookups} lookups in 60 s`);
        await Promise.all(
          resources.slice(0, 10).map(async (_, k) => {
            const r = resources[(lookups + k * 3) % resources.length]!;
            try {
              // Twice: the second is served from the cache (filled one round trip ago, well
              // inside its TTL) however slow the store is, so the cache's own answers are tested.
              maxAge = Math.max(maxAge, (await cache.owner(r)).heartbeatAgeMs, (await cache.owner(r)).heartbeatAgeMs);
            } catch (e) {
              if (e instanceof OwnerDeadError) deadVerdicts++;
              else otherErrors.push(`${r}: ${String(e)}`);
            }
          }),
        );
        lookups += 20;
        await sleep(1);
      }
      const { hits, misses } = cache.stats();
      process.stdout.write(
        `# ${kind}: ${lookups} lookups under jittered heartbeats: ${deadVerdicts - storeDead} false dead (dead verdicts ${deadVerdicts}, all the store's own: ${storeDead}), ` +
          `hit rate ${((100 * hits) / (hits + misses)).toFixed(1)}% (${misses} store lookups), oldest heartbeat seen ${Math.round(maxAge)}ms (stale after ${config.staleAfterMs}ms)\n`,
      );
      assert.deepEqual(otherErrors, []);
      assert.equal(deadVerdicts, storeDead, "every dead verdict is the store's own answer to that lookup, never the cache's");
      assert.ok(hits > 0, 'the cache answered none of the lookups: the run did not test it');
      assert.ok(maxAge > 1.5 * config.heartbeatMs, `the heartbeats were never late (oldest ${maxAge}ms): the run proved nothing`);

      // The zero is not for want of looking: kill a live agent and its resources do read as dead.
      // (A host loaded enough that every agent went stale has shown it already: the store said
      // dead, and the cache passed each one on.)
      const owners = new Map<string, string>();
      for (const r of resources) await fleet.owner(r).then((o) => owners.set(r, o.agent), () => undefined);
      const victim = agents.find((a) => [...owners.values()].includes(a.id));
      if (victim === undefined) {
        assert.ok(storeDead > 0, 'no live owner is left, yet the store never answered dead');
        return;
      }
      const owned = [...owners].filter(([, a]) => a === victim.id).map(([r]) => r);
      victim.kill('SIGKILL');
      await victim.exited;
      await sleep(config.staleAfterMs + 100);
      await assert.rejects(cache.owner(owned[0]!), (e: unknown) => e instanceof OwnerDeadError && e.owner === victim.id);
    });
  });
}
