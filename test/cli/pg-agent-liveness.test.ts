/**
 * `leasehold agent --liveness session` on PostgreSQL (issue 32): a SIGKILLed agent stops counting
 * as live in the fleet at once (its session is gone), and a process restarted under the same id
 * takes the id over at once, instead of both waiting out --stale-after. In 'ttl' mode the same
 * kill leaves the agent live for the rest of its lease (the contrast, asserted).
 *
 * Bounds: heartbeat 10 s, stale-after 30 s. A killed agent renewed at most one heartbeat before
 * the kill, so in 'ttl' mode it stays live at least 20 s after it; 'session' must show it gone,
 * and the successor live, within 10 s (half of that, with room for a loaded host).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { openFleet } from '../../src/fleet/open.js';
import type { Fleet } from '../../src/fleet/fleet.js';
import { Sandbox, assertOneLineError, dropSchema, freshSchema, pgUrl, until } from './helpers.js';

const sb = new Sandbox('pg-agent-liveness');
const schema = freshSchema();
const store = pgUrl(schema);
const BOUND_MS = 10_000;

void describe('agent --liveness session', () => {
  let pgStore: PostgresStore;
  let fleet: Fleet;
  before(async () => {
    const r = await sb.run(['migrate', '--store', store]);
    assert.equal(r.code, 0, r.stderr);
    pgStore = await PostgresStore.create({ url: store });
    fleet = await openFleet(pgStore);
  });
  after(async () => {
    await pgStore?.close();
    sb.cleanup();
    await dropSchema(schema);
  });

  const live = async (id: string): Promise<boolean> => (await fleet.agents()).find((a) => a.id === id)?.live === true;
  const agent = (id: string, liveness: string) =>
    sb.start(['agent', '--id', id, '--store', store, '--heartbeat', '10s', '--stale-after', '30s', '--liveness', liveness, '--json']);

  void it('a SIGKILLed agent is no longer live at once, and its successor under the same id is live at once', async (t) => {
    const a = agent('h32-agent-s', 'session');
    await until('agent a is live', () => a.stdout.includes('"event":"live"'), 20_000);
    assert.equal(await live('h32-agent-s'), true);
    const b = agent('h32-agent-s', 'session'); // waits for the id (default --wait: stale-after + heartbeat)
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(b.stdout.includes('"event":"live"'), false, 'a second process took a live agent\'s id');
    const killedAt = performance.now();
    a.proc.kill('SIGKILL');
    await until('the successor is live', () => b.stdout.includes('"event":"live"'), BOUND_MS);
    t.diagnostic(`agent SIGKILL -> successor live: ${(performance.now() - killedAt).toFixed(0)}ms`);
    const tokenA = BigInt(/"token":"(\d+)"/.exec(a.stdout)![1]!);
    const tokenB = BigInt(/"token":"(\d+)"/.exec(b.stdout)![1]!);
    assert.ok(tokenB > tokenA, `tokens ${tokenA} then ${tokenB}`);
    b.proc.kill('SIGTERM');
    const done = await b.done;
    assert.equal(done.code, 0, done.stderr);
  });

  void it("the fleet stops counting a SIGKILLed session agent live at once; a 'ttl' agent stays live for its lease", async (t) => {
    const s = agent('h32-agent-s2', 'session');
    const l = agent('h32-agent-t2', 'ttl');
    await until('both agents are live', () => s.stdout.includes('"event":"live"') && l.stdout.includes('"event":"live"'), 20_000);
    const killedAt = performance.now();
    s.proc.kill('SIGKILL');
    l.proc.kill('SIGKILL');
    for (;;) {
      if (!(await live('h32-agent-s2'))) break;
      assert.ok(performance.now() - killedAt < BOUND_MS, 'the killed session agent still counts as live');
      await new Promise((r) => setTimeout(r, 50));
    }
    t.diagnostic(`agent SIGKILL -> not live in the fleet: ${(performance.now() - killedAt).toFixed(0)}ms`);
    // The contrast: the ttl agent's lease has at least 20 s left.
    assert.equal(await live('h32-agent-t2'), true, "a 'ttl' agent was counted dead before its lease ran out");
    const place = await fleet.place(`h32-res-${Date.now()}`);
    assert.notEqual(place.agent, 'h32-agent-s2', 'placement picked the dead session agent');
  });

  void it('is refused with exit 2 and one line where the mode is, and for an unknown mode', async () => {
    const redis = await sb.run(['agent', '--id', 'h32-x', '--store', 'redis://127.0.0.1:6379?prefix=h32agent', '--liveness', 'session']);
    assertOneLineError(redis, 2, /Redis scripts cannot see connections/);
    const bad = await sb.run(['agent', '--id', 'h32-x', '--store', store, '--liveness', 'socket']);
    assertOneLineError(bad, 2, /not a liveness mode; use ttl \(the default\) or session/);
  });
});
