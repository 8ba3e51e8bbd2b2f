/**
 * An agent that starts while the store is away, or whose registration meets a store error, waits
 * within --wait instead of exiting 3 at once (as `leasehold run --wait` does). Stressed runs saw
 * agents exit 3 as they started: a loaded etcd's call deadline passed at the schema check or the
 * registration, and a test had to start them again; under systemd or Kubernetes that was a
 * restart loop.
 *
 *  - the library: Agent.start tries a registration that failed with a retryable error again
 *    while the liveness term lasts, and throws any other error at once, the lease released;
 *  - the CLI: an unreachable store is waited for within --wait (one line every few seconds),
 *    then exit 3 saying the wait ran out; --no-wait is one try; a store that comes up during the
 *    wait is used, and the agent goes live.
 */
import assert from 'node:assert/strict';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { makeTestStore, TEST_PG_URL, type TestStore } from '../helpers/stores.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError, LeaseLostError, StoreUnavailableError } from '../../src/core/errors.js';
import { Agent } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';
import { cli, reapAgents, startCliAgent } from './helpers.js';

const DOWN_PG = 'postgres://postgres@127.0.0.1:1/test';

void describe('an agent starting while the store is away', () => {
  let ts: TestStore;
  before(async () => {
    ts = await makeTestStore('sqlite');
  });
  after(async () => {
    await reapAgents();
    await ts.cleanup();
  });

  void it('Agent.start registers again after a retryable store error, and not after any other', async () => {
    const lh = new Leasehold({ store: ts.store });
    try {
      const fleet = await openFleet(ts.store);
      const register = fleet.port.registerAgent.bind(fleet.port);
      let calls = 0;
      let fail: () => Error | undefined = () => (calls <= 2 ? new StoreUnavailableError('the store did not answer in time (injected)') : undefined);
      fleet.port.registerAgent = async (...args: Parameters<typeof register>) => {
        calls++;
        const e = fail();
        if (e !== undefined) throw e;
        return register(...args);
      };
      const agent = await Agent.start(lh, fleet, { id: 'retry-1', heartbeat: 200, staleAfter: 2000 });
      assert.equal(calls, 3, 'two failed registrations, then one that landed');
      assert.deepEqual((await fleet.agents()).map((a) => a.id), ['retry-1']);
      await agent.stop();

      calls = 0;
      fail = () => new ConfigError('not a store error (injected)');
      await assert.rejects(Agent.start(lh, fleet, { id: 'retry-2', heartbeat: 200, staleAfter: 2000 }), ConfigError);
      assert.equal(calls, 1, 'no second try after an error that is not retryable');
      const held = (await ts.store.list()).filter((l) => l.name === 'agent/retry-2' && l.holder !== null);
      assert.deepEqual(held, [], 'the liveness lease was released');
    } finally {
      await lh.close();
    }
  });

  void it('Agent.start whose liveness term ends while it retries its registration throws LeaseLostError, and returns no agent', async () => {
    const lh = new Leasehold({ store: ts.store });
    try {
      const fleet = await openFleet(ts.store);
      const register = fleet.port.registerAgent.bind(fleet.port);
      // Refused (retryably) until a second after an operator revoked the agent's lease (the
      // holder hears of it at its next heartbeat, 200 ms), then accepted: a registration that
      // lands after the term ended must not give back an agent whose 'lost' has already passed.
      let revokedAt: number | undefined;
      fleet.port.registerAgent = async (...args: Parameters<typeof register>) => {
        if (revokedAt === undefined) {
          revokedAt = performance.now();
          await ts.store.revoke('agent/retry-3', 'revoked by the test while the agent registers');
        }
        if (performance.now() < revokedAt + 1000) throw new StoreUnavailableError('the store did not answer in time (injected)');
        return register(...args);
      };
      await assert.rejects(Agent.start(lh, fleet, { id: 'retry-3', heartbeat: 200, staleAfter: 2000 }), LeaseLostError);
      assert.equal((await fleet.agents()).find((a) => a.id === 'retry-3'), undefined, 'nothing registered');
    } finally {
      await lh.close();
    }
  });

  void it('the CLI waits for an unreachable store within --wait, saying so, then exits 3; --no-wait tries once', async () => {
    const started = performance.now();
    const r = await cli(['agent', '--id', 'w-down', '--store', DOWN_PG, '--wait', '2s']);
    const tookMs = performance.now() - started;
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stderr, /agent w-down: the store is unreachable .*; retrying for .* more/);
    assert.match(r.stderr, /still unreachable when the wait \(.*\) ran out/);
    // The wait is a floor, not a bound: it ran out, so it lasted.
    assert.ok(tookMs >= 2000, `exit 3 after ${Math.round(tookMs)} ms, before the 2 s wait ran out`);

    const once = await cli(['agent', '--id', 'w-once', '--store', DOWN_PG, '--no-wait']);
    assert.equal(once.code, 3, once.stderr);
    assert.doesNotMatch(once.stderr, /retrying/);
  });

  void it('the CLI uses a store that comes up during the wait, and goes live', async () => {
    const pg = await makeTestStore('postgres');
    // A loopback port that refuses until the "store" comes up, then forwards to PostgreSQL.
    const target = new URL(TEST_PG_URL);
    const free: Server = createServer();
    await new Promise<void>((resolve) => free.listen(0, '127.0.0.1', resolve));
    const port = (free.address() as { port: number }).port;
    await new Promise<void>((resolve) => free.close(() => resolve()));
    const sockets = new Set<Socket>();
    const forward = createServer((client) => {
      const upstream = createConnection({ host: target.hostname, port: Number(target.port || 5432) });
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('error', () => undefined).on('close', () => sockets.delete(s));
      }
      client.pipe(upstream).pipe(client);
    });
    const url = pg.url.replace(`${target.hostname}:${target.port || 5432}`, `127.0.0.1:${port}`);
    assert.notEqual(url, pg.url, 'the store URL points at the forwarder');
    const agent = startCliAgent(url, 'w-up', ['--wait', '60s', '--heartbeat', '500ms', '--stale-after', '5s', '--json']);
    try {
      // Up once the agent has said it is waiting (its first line comes after its first failed try).
      for (let i = 0; i < 600 && !/store-unavailable/.test(agent.stdout); i++) await new Promise((r) => setTimeout(r, 50));
      assert.match(agent.stdout, /"event":"store-unavailable"/, `the agent said it waits: ${agent.stdout} ${agent.stderr}`);
      await new Promise<void>((resolve) => forward.listen(port, '127.0.0.1', resolve));
      await agent.live();
      const events = agent.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { event: string }).event);
      assert.deepEqual(events.filter((e) => e !== 'store-unavailable'), ['store-reachable', 'live'], agent.stdout);
      agent.kill('SIGTERM');
      assert.equal((await agent.exited).code, 0, agent.stderr);
    } finally {
      await reapAgents([agent]);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => forward.close(() => resolve()));
      await pg.cleanup();
    }
  });
});
