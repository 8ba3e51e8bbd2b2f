/**
 * The fleet registry on real stores, with agents as real processes (`leasehold agent`):
 * placement only on live agents, ownership lookups that tell "dead owner" from "no owner", and
 * generations that fence the old owner's writes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { makeTestStore, selectedStores, TEST_PG_URL, type StoreKind, type TestStore, SIDE_BY_SIDE } from '../helpers/stores.js';
import { Fleet } from '../../src/fleet/fleet.js';
import { Agent, resolveAgentTiming } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';
import { openStore } from '../../src/backends/index.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError, FencedError } from '../../src/core/errors.js';
import { AlreadyOwnedError, NoLiveAgentError, NoOwnerError, OwnerChangedError, OwnerDeadError } from '../../src/fleet/errors.js';
import { fencedTransaction } from '../../src/backends/postgres/fence.js';
import { fencedWriteSync } from '../../src/backends/sqlite/fence.js';
import { fencedSet } from '../../src/backends/redis/fence.js';
import { RedisStore } from '../../src/backends/redis/store.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { cli, reapAgents, startCliAgent, type AgentProcess } from './helpers.js';
import { until } from '../cli/helpers.js';

/**
 * Stale-after 3s, heartbeat 500ms: CI once saw a healthy agent on Redis go stale at 1.5s (a
 * parallel suite starved its renewals while the test spawned CLI processes).
 */
const HEARTBEAT = '500ms';
const STALE_MS = 3000;
/**
 * etcd grants whole seconds (2s at least) whatever is asked, so asking less there only makes
 * the agent's own deadline far tighter than the store's: on a loaded machine a couple of slow
 * renewals ended healthy agents' terms. There the agents run with etcd's real granularity, and
 * a second more than its minimum (CI once saw a survivor of 2s go stale next to a busy suite).
 */
const timingFor = (kind: StoreKind): string[] =>
  kind === 'etcd' ? ['--heartbeat', '750ms', '--stale-after', '3s'] : ['--heartbeat', HEARTBEAT, '--stale-after', `${STALE_MS}ms`];
/**
 * An agent that must stay live while another dies. Its liveness is the test's precondition, not
 * the property under test, so it gets a stale-after of 40 heartbeats: CI (load average 7 on two
 * cores) saw a survivor with 6 heartbeats of slack go stale, and placement then rightly found no
 * live agent. Only the victim needs the short stale-after, because the test waits it out.
 */
const survivorTiming = (kind: StoreKind): string[] =>
  kind === 'etcd' ? ['--heartbeat', '750ms', '--stale-after', '30s'] : ['--heartbeat', HEARTBEAT, '--stale-after', '20s'];

/** An agent's start wait in these tests: its default (stale-after + heartbeat), and 30 s at least (see start()). */
function startWaitMs(timing: string[]): number {
  const flag = (name: string): string | undefined => timing[timing.indexOf(name) + 1];
  const { heartbeatMs, staleAfterMs } = resolveAgentTiming({ heartbeat: flag('--heartbeat'), staleAfter: flag('--stale-after') });
  return Math.max(30_000, staleAfterMs + heartbeatMs);
}

void describe('agent timing', () => {
  void it('refuses a stale-after below twice the heartbeat, and takes exactly twice', () => {
    assert.throws(() => resolveAgentTiming({ heartbeat: '10s', staleAfter: '19s' }), ConfigError);
    assert.deepEqual(resolveAgentTiming({ heartbeat: '10s', staleAfter: '20s' }), { heartbeatMs: 10_000, staleAfterMs: 20_000 });
    assert.deepEqual(resolveAgentTiming({}), { heartbeatMs: 10_000, staleAfterMs: 30_000 });
  });
});

/** The stores openFleet supports: every test below runs on each, with real agent processes. */
const FLEET_STORES: readonly StoreKind[] = ['postgres', 'sqlite', 'redis', 'etcd', 'mysql'];

/**
 * The owner that is killed in the first test must be seen live (listed beside the others, then
 * its lookups) before its kill: that is a precondition, so it gets 20 heartbeats of slack. A
 * stressed run (stress-ng --cpu 2 beside the suite, load 12) saw it with 6 (stale-after 3 s)
 * listed not live. The test waits out this stale-after once, after the kill.
 */
const VICTIM_STALE_MS = 10_000;
const victimTiming = (kind: StoreKind): string[] => ['--heartbeat', kind === 'etcd' ? '750ms' : HEARTBEAT, '--stale-after', `${VICTIM_STALE_MS}ms`];
/**
 * How long after its kill the victim is dead by the store's clock: its stale-after, and on etcd
 * also the expiry sweep that deletes the term key once its etcd lease runs out (~500ms, 1.5 s allowed).
 */
function deadAfterMs(kind: StoreKind): number {
  return VICTIM_STALE_MS + (kind === 'etcd' ? 1500 : 200);
}

void describe('fleet registry on each store', SIDE_BY_SIDE, () => {
  for (const kind of selectedStores().filter((k) => FLEET_STORES.includes(k))) {
    void describe(`fleet registry on ${kind}`, { concurrency: 1 }, () => {
      let ts: TestStore;
      let fleet: Fleet;
      const agents: AgentProcess[] = [];
      // An agent that finds the store unavailable as it starts (stressed runs saw etcd's call
      // deadline pass at the schema check and at registration) waits and tries again within its
      // --wait, as a user's does (agent-start-wait.test.ts): no restart here.
      //
      // That wait is raised to 30 s at least, never lowered: its default (stale-after +
      // heartbeat) shrinks with the short stale-after most of these agents run with, to 3.75 s on
      // etcd, and CI61 of 2026-12-07 saw an agent's first claim not land on a loaded etcd within
      // that ("agent g2 exited before going live: ... the wait ran out"). An agent with a long
      // stale-after keeps its default, which is longer: a first claim whose answer was lost waits
      // out a term of its own holder id, stale-after long (a fixed 30 s ran out there on etcd).
      // How soon an agent goes live is not what these tests check; the wait only ends a run that
      // will never start.
      const start = async (id: string, labels?: string, timing: string[] = timingFor(kind)): Promise<AgentProcess> => {
        const a = startCliAgent(ts.url, id, [...timing, '--wait', `${startWaitMs(timing)}ms`, ...(labels === undefined ? [] : ['--labels', labels])]);
        agents.push(a);
        await a.live();
        return a;
      };

      /**
       * The test's own fleet client, an operator's tool here: what it asks is the test's doing,
       * not what is tested (the agents keep every default). On etcd it gets a 30 s call deadline
       * instead of the default 5 s: one placement (reads, a guarded write, retries on conflict,
       * all within one deadline) took over 5 s on a host loaded with two CPU hogs beside three
       * test files (a stressed run; gRPC's name resolution alone took 1.4 s), and failed a test
       * about drain with a retryable error.
       */
      let adminStore: Awaited<ReturnType<typeof openStore>> | undefined;
      before(async () => {
        ts = await makeTestStore(kind);
        if (kind === 'etcd') adminStore = await openStore(`${ts.url}${ts.url.includes('?') ? '&' : '?'}timeout=30000`);
        fleet = await openFleet(adminStore ?? ts.store);
      });
      after(async () => {
        await adminStore?.close();
        await reapAgents(agents);
        await ts.cleanup();
      });

      void it('three agents, a placement, a killed agent: each lookup says what is true', async () => {
        // a1 is the only zone=eu agent when job-1 is placed, so it is the owner that dies; a2 joins
        // after, as the survivor (see survivorTiming).
        const [a1] = await Promise.all([start('a1', 'zone=eu', victimTiming(kind)), start('a3', 'zone=us', survivorTiming(kind))]);
        const p = await fleet.place('job-1', { labels: { zone: 'eu' } });
        assert.equal(p.agent, 'a1', `placed on ${p.agent}, which lacks zone=eu`);
        await start('a2', 'zone=eu', survivorTiming(kind));
        const listed = await fleet.agents();
        assert.deepEqual(listed.map((a) => [a.id, a.live]), [['a1', true], ['a2', true], ['a3', true]]);
        const o = await fleet.owner('job-1');
        assert.equal(o.agent, p.agent);
        assert.equal(o.generation, p.generation);
        assert.ok(o.heartbeatAgeMs < VICTIM_STALE_MS);

        await assert.rejects(fleet.place('job-1'), (e: unknown) => e instanceof AlreadyOwnedError && e.owner === p.agent);
        await assert.rejects(fleet.owner('job-never'), NoOwnerError);

        // kill -9 the owner: no deregistration, its heartbeats just stop.
        const owner = a1!;
        owner.kill('SIGKILL');
        await owner.exited;
        await sleep(deadAfterMs(kind));
        const dead = await fleet.owner('job-1').then(
          () => assert.fail('a killed owner was reported live after stale-after (and, on etcd, its etcd lease)'),
          (e: unknown) => e,
        );
        assert.ok(dead instanceof OwnerDeadError, `expected OwnerDeadError, got ${String(dead)}`);
        assert.equal(dead.owner, p.agent);
        assert.equal(dead.deregistered, false);
        assert.ok(dead.staleForMs !== null && dead.staleForMs > 0, `staleForMs ${dead.staleForMs}`);
        // Asking again changes nothing: still dead, never "no owner", never a new placement.
        await assert.rejects(fleet.owner('job-1'), OwnerDeadError);
        const cliOwner = await cli(['fleet', 'owner', 'job-1', '--store', ts.url]);
        assert.equal(cliOwner.code, 5, cliOwner.stderr);
        assert.equal(cliOwner.stdout.trim(), `${p.agent} generation ${p.generation} dead`);

        // Placement skips the dead agent every time.
        const survivor = 'a2';
        for (let i = 0; i < 5; i++) assert.equal((await fleet.place(`eu-${i}`, { labels: { zone: 'eu' } })).agent, survivor);

        // Reassign: refused from the wrong owner, then moved with a larger generation.
        await assert.rejects(fleet.reassign('job-1', { from: survivor }), (e: unknown) => e instanceof OwnerChangedError && e.owner === p.agent);
        await assert.rejects(fleet.reassign('job-1', { from: p.agent, to: p.agent }), ConfigError);
        await assert.rejects(fleet.reassign('job-1', { from: p.agent, to: 'never-started' }), NoLiveAgentError);
        assert.equal((await fleet.owner('job-1').catch((e: unknown) => e as OwnerDeadError)).generation, p.generation, 'a refused reassign changed nothing');
        const moved = await fleet.reassign('job-1', { from: p.agent });
        assert.equal(moved.agent, survivor);
        assert.ok(moved.generation > p.generation);
        assert.equal((await fleet.owner('job-1')).agent, survivor);
      });

      void it('drain keeps an agent alive and owning but out of placement; SIGTERM deregisters it', async () => {
        // Nothing here waits for staleness (SIGTERM deregisters at once), so the agent gets a long
        // stale-after: 20 heartbeats. With 3s, a CI run whose CLI calls took seconds each (the test
        // ran 8.5s instead of 1s) starved d1 past it; it lost its lease, exited 76, and the third of
        // three identical asks truly said "dead". What is asserted is the answer while d1 lives.
        const d = await start('d1', 'pool=drain', ['--heartbeat', kind === 'etcd' ? '750ms' : HEARTBEAT, '--stale-after', kind === 'etcd' ? '15s' : '10s']);
        const first = await fleet.place('d-job', { labels: { pool: 'drain' } });
        assert.equal(first.agent, 'd1');
        await fleet.drain('d1');
        await assert.rejects(fleet.place('d-job-2', { labels: { pool: 'drain' } }), NoLiveAgentError);
        assert.equal((await fleet.owner('d-job')).agent, 'd1', 'a draining agent still owns what it owned');
        await fleet.undrain('d1');
        assert.equal((await fleet.place('d-job-2', { labels: { pool: 'drain' } })).agent, 'd1');
        await assert.rejects(fleet.drain('nobody'), ConfigError);

        // `fleet owner` gives the same answer however often it is asked while nothing changes.
        const answers = [];
        for (let i = 0; i < 3; i++) {
          const r = await cli(['fleet', 'owner', 'd-job', '--store', ts.url]);
          answers.push([r.code, r.stdout]);
        }
        assert.deepEqual(answers, Array(3).fill([0, `d1 generation ${first.generation} live\n`]));

        d.kill('SIGTERM');
        assert.deepEqual(await d.exited, { code: 0, signal: null });
        // Deregistered: dead at once, without waiting for stale-after, and said so.
        const e = await fleet.owner('d-job').catch((x: unknown) => x);
        assert.ok(e instanceof OwnerDeadError && e.deregistered, String(e));
        assert.equal((await fleet.agents()).find((a) => a.id === 'd1')?.deregistered, true);
      });

      void it('places on the agent owning fewest, and spreads ties', async () => {
        // The rule is about live agents; nothing here waits for staleness, so the agents get 20
        // heartbeats of stale-after. With 3 s, a loaded run (concurrency 4 beside three engineers'
        // tests) let one agent's heartbeat lapse mid-loop: it was rightly passed over, and owned 1
        // of 9 ([1, 4, 4]).
        const long = ['--heartbeat', kind === 'etcd' ? '750ms' : HEARTBEAT, '--stale-after', kind === 'etcd' ? '15s' : '10s'];
        await Promise.all([start('b1', 'pool=b', long), start('b2', 'pool=b', long), start('b3', 'pool=b', long)]);
        for (let i = 0; i < 9; i++) await fleet.place(`b-${i}`, { labels: { pool: 'b' } });
        const owned = (await fleet.agents()).filter((a) => a.id.startsWith('b')).map((a) => a.owned);
        assert.deepEqual(owned, [3, 3, 3]);
      });

      void it('concurrent placements of one resource: exactly one wins, the rest name it', async () => {
        await start('c1', 'pool=c');
        await start('c2', 'pool=c');
        const rs = await Promise.allSettled(Array.from({ length: 8 }, () => fleet.place('contended', { labels: { pool: 'c' } })));
        const won = rs.filter((r) => r.status === 'fulfilled');
        assert.equal(won.length, 1);
        const winner = (won[0] as PromiseFulfilledResult<{ agent: string }>).value.agent;
        for (const r of rs) if (r.status === 'rejected') assert.ok(r.reason instanceof AlreadyOwnedError && r.reason.owner === winner, String(r.reason));
      });

      void it('generations only go up, across reassign, removal and placing again', async () => {
        await start('g1', 'pool=g');
        await start('g2', 'pool=g');
        const seen: bigint[] = [];
        let p = await fleet.place('gen', { labels: { pool: 'g' } });
        seen.push(p.generation);
        p = await fleet.reassign('gen', { from: p.agent });
        seen.push(p.generation);
        await assert.rejects(fleet.remove('gen', { from: 'nobody' }), OwnerChangedError);
        await fleet.remove('gen', { from: p.agent });
        await assert.rejects(fleet.owner('gen'), NoOwnerError);
        p = await fleet.place('gen', { labels: { pool: 'g' } });
        seen.push(p.generation);
        for (let i = 1; i < seen.length; i++) assert.ok(seen[i]! > seen[i - 1]!, `generations ${seen.join(', ')}`);
      });

      void it('a write fenced with the old generation after a reassign is refused', async () => {
        // Both must stay live through the placement and the reassign: survivors (a five-file run
        // saw f1 lapse at 6 heartbeats on SQLite: "no live, non-draining agent other than f2").
        await start('f1', 'pool=f', survivorTiming(kind));
        await start('f2', 'pool=f', survivorTiming(kind));
        const old = await fleet.place('fenced', { labels: { pool: 'f' } });
        const resource = `fleet:fenced:${Math.random()}`;
        // etcd holds no application data, and the MySQL fence is not wired in here: there the
        // resource lives in a SQLite database with its fence.
        const side = kind === 'etcd' || kind === 'mysql' ? await makeTestStore('sqlite') : undefined;
        const write = async (generation: bigint): Promise<void> => {
          if (ts.store instanceof PostgresStore) {
            const pool = new pg.Pool({ connectionString: TEST_PG_URL, max: 1 });
            try {
              await fencedTransaction(pool, { resource, token: generation, table: `${ts.store.schema}.fences` }, async (tx) => {
                await tx.query('SELECT 1');
              });
            } finally {
              await pool.end();
            }
          } else if (ts.store instanceof RedisStore) {
            const tag = `{${ts.store.prefix}}`; // under the test's prefix, so cleanup deletes them
            await fencedSet(ts.store, { resource, token: generation, key: `${tag}:data`, markKey: `${tag}:mark`, value: String(generation) });
          } else {
            const sqlite = side?.store ?? ts.store;
            assert.ok(sqlite instanceof SqliteStore);
            fencedWriteSync(sqlite.database, { resource, token: generation }, () => undefined);
          }
        };
        try {
          await write(old.generation);
          const moved = await fleet.reassign('fenced', { from: old.agent });
          await write(moved.generation);
          await assert.rejects(write(old.generation), (e: unknown) => e instanceof FencedError && e.highWater === moved.generation);
        } finally {
          await side?.cleanup();
        }
      });

      void it('an agent whose liveness lease is revoked stands down, and its resources read as dead', async () => {
        const store = await ts.open();
        const leasehold = new Leasehold({ store });
        const own = await openFleet(store);
        // staleAfter (the liveness lease's TTL) 3 s: the agent must lose its term to the revoke, not to
        // a stall of the loaded host before it (CI at load 20: with 400 ms it had lost already, the
        // 'lost' listener attached after that waited for ever).
        const staleAfter = 3000;
        const agent = await Agent.start(leasehold, own, { id: 'rv1', labels: { pool: 'rv' }, heartbeat: 500, staleAfter });
        const losses: unknown[] = [];
        agent.on('lost', (e: unknown) => losses.push(e));
        try {
          await fleet.place('rv-job', { labels: { pool: 'rv' } });
          assert.deepEqual(losses, [], 'the agent lost its liveness lease before the revoke (the host stalled past its TTL)');
          await ts.store.revoke('agent/rv1', 'test: a fork of this agent was found');
          // Its next renewal is refused, or unanswered renewals end the term at its local deadline: either
          // way within the TTL; twice the TTL bounds the wait so a missed loss fails instead of hanging.
          await until('the agent stands down after the revoke', () => losses.length > 0, 2 * staleAfter);
          assert.ok(agent.signal.aborted, `lost ${String(losses[0])} but the signal did not abort`);
          await assert.rejects(fleet.owner('rv-job'), OwnerDeadError);
          await assert.rejects(fleet.place('rv-2', { labels: { pool: 'rv' } }), NoLiveAgentError);
        } finally {
          await agent.stop();
          await leasehold.close();
        }
      });

      void it('a process waiting for a live agent id is never made the waiter a release hands the liveness lease to', async () => {
        // PostgreSQL and MySQL hand a released term to a registered waiter (one-write handover). For an
        // agent that would say "alive" for a process that never confirmed it (CI's fleet chaos saw
        // a departed waiter handed agent/f3 and a resource reassigned to it), so agents never register.
        const lh1 = new Leasehold({ store: await ts.open() });
        // The first agent's liveness is the precondition, not the property: at stale-after 1.5 s a
        // loaded run (ci65, five files at once) lapsed it, and the waiting process then rightly took
        // the id. 6 s rides out such stalls; a loss is still reported as the precondition failing.
        const first = await Agent.start(lh1, fleet, { id: 'hw', labels: { pool: 'hw' }, heartbeat: 500, staleAfter: 6000 });
        const losses: unknown[] = [];
        first.on('lost', (e: unknown) => losses.push(e));
        const store2 = await ts.open();
        const second = new Leasehold({ store: store2 });
        let started: Agent | undefined;
        try {
          const waiting = Agent.start(second, await openFleet(store2), { id: 'hw', heartbeat: 150, staleAfter: 1500, wait: 1200 });
          waiting.catch(() => undefined);
          await sleep(400); // its first claim was answered 'busy'
          if (kind === 'postgres') {
            const schema = new URL(ts.url).searchParams.get('schema') ?? 'leasehold';
            const db = new pg.Client({ connectionString: TEST_PG_URL });
            await db.connect();
            try {
              const r = await db.query(`SELECT waiter FROM "${schema}".leases WHERE name = 'agent/hw'`);
              assert.equal(r.rows[0]?.['waiter'], null, 'the waiting agent process was registered as the waiter');
            } finally {
              await db.end();
            }
          }
          if (kind === 'mysql') {
            const { createConnection } = await import('mysql2/promise');
            const db = await createConnection(ts.url.replace(/^mariadb:/, 'mysql:').replace(/\?.*$/, ''));
            try {
              const [rows] = (await db.query("SELECT waiter FROM leasehold_leases WHERE name = 'agent/hw'")) as unknown as [{ waiter: string | null }[]];
              assert.equal(rows[0]?.waiter, null, 'the waiting agent process was registered as the waiter');
            } finally {
              await db.end();
            }
          }
          const outcome = await waiting.then(
            (a) => {
              started = a;
              return 'started';
            },
            (e: unknown) => (e instanceof Error && /not acquired/.test(e.message) ? 'refused' : `failed otherwise: ${String(e)}`),
          );
          assert.deepEqual(losses, [], `the first agent lost its liveness lease while the second waited (the host stalled past its stale-after): not what this tests; the second ${outcome}`);
          assert.equal(outcome, 'refused', 'the waiting process gave up with "not acquired" while the first agent was alive');
        } finally {
          await started?.stop();
          await first.stop();
          await lh1.close();
          await second.close();
        }
      });

      void it('a second process with a live agent id is refused (no-wait), not registered over the first', async () => {
        // The first agent's liveness is the precondition, not the property: it gets the survivor's
        // stale-after (a loaded run saw a first agent at stale-after 3 s die, and the second then
        // rightly registered and ran on).
        const first = await start('dup', 'pool=dup', survivorTiming(kind));
        const ask = (): ReturnType<typeof cli> => cli(['agent', '--id', 'dup', '--no-wait', '--labels', 'pool=other', '--store', ts.url]);
        let second = await ask();
        // Its first call to the store is a precondition too: --no-wait is one try at the store as
        // well, and on a loaded host that call can miss its deadline (CI50: etcd's restore check,
        // 2.2 s connecting; exit 3). Such a try is made again, twice at most, and said so.
        for (let i = 0; i < 2 && second.code === 3 && /unavailable/.test(second.stderr); i++) {
          process.stdout.write(`# ${kind}: the second agent found the store unavailable (${second.stderr.trim()}); asking again\n`);
          second = await ask();
        }
        assert.equal(first.child.exitCode, null, `the first agent exited before the second asked: ${first.stderr}`);
        assert.equal(second.code, 75, second.stderr);
        assert.deepEqual((await fleet.agents()).find((a) => a.id === 'dup')?.labels, { pool: 'dup' });
      });
    });
  }
});
