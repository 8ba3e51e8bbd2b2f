/**
 * `leasehold agent --metrics-port --health-port`, as real processes on loopback against a real
 * store: the agent's own liveness and the fleet as the store sees it, live and after another
 * agent is SIGKILLed; and a port that cannot be bound stops the agent deregistered, not stale.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { randomBytes } from 'node:crypto';
import { Sandbox, assertOneLineError, dropSchema, freshSchema, pgUrl, until, type Running } from '../cli/helpers.js';
import { selectedStores } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(3).toString('hex')}`;
// Complete lines only: a line still being written is not parsed until its newline arrives.
const events = (text: string): Array<Record<string, unknown>> =>
  text
    .split('\n')
    .slice(0, -1)
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

// heartbeat 200ms, stale after 1s: for agents that never need to be seen live for long.
const TIMING = ['--heartbeat', '200ms', '--stale-after', '1s'];
// The agent that is killed must first be seen live beside the other (the first scrape counts 2),
// then stale: 25 heartbeats of slack, and it goes stale 5 s after its last one.
const VICTIM_STALE_S = 5;
const VICTIM_TIMING = ['--heartbeat', '200ms', '--stale-after', `${VICTIM_STALE_S}s`];
// The serving agent must stay live: its liveness is the precondition of every figure read from
// it, not the property, so it gets 150 heartbeats of slack (a stressed run saw one with 5 lose its
// lease before the first scrape). Only the agent that is killed needs the short stale-after.
const SURVIVOR_STALE_MS = 30_000;
const SURVIVOR_TIMING = ['--heartbeat', '200ms', '--stale-after', `${SURVIVOR_STALE_MS}ms`];
// The killed agent is stale by the store's clock within its stale-after of its kill; the gauge
// shows it at the first scrape after that whose read is not the cached one (1s apart). 10x the
// sum is the bound for a loaded 2-core machine.
const STALE_BOUND_MS = 10 * (VICTIM_STALE_S + 1) * 1000;

const schema = freshSchema();
const stores = [
  { kind: 'sqlite', url: (sb: Sandbox) => `sqlite:${sb.path('fleet.db')}` },
  { kind: 'postgres', url: () => pgUrl(schema) },
].filter((s) => selectedStores().includes(s.kind as never));

for (const { kind, url } of stores) {
  void describe(`leasehold agent serves metrics and probes (${kind})`, () => {
    const sb = new Sandbox(`agent-probes-${kind}`);
    const store = url(sb);
    const running: Running[] = [];
    before(async () => {
      const m = await sb.run(['migrate', '--store', store]);
      assert.equal(m.code, 0, m.stderr);
    });
    after(async () => {
      for (const r of running) if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGKILL');
      await Promise.all(running.map((r) => r.done));
      sb.cleanup();
      if (kind === 'postgres') await dropSchema(schema);
    });

    void it('metrics show this agent live and the fleet by state; a SIGKILLed agent turns stale; /readyz is 200 while live', async () => {
      const a = uniq('a');
      const b = uniq('b');
      const served = sb.start(['agent', '--id', a, '--store', store, ...SURVIVOR_TIMING, '--json', '--metrics-port', '0', '--health-port', '0']);
      const other = sb.start(['agent', '--id', b, '--store', store, ...VICTIM_TIMING, '--json']);
      running.push(served, other);
      await until('both agents are live and the first serves', () => events(served.stdout).filter((e) => e['event'] === 'serving').length === 2 && events(other.stdout).some((e) => e['event'] === 'live'));
      const ev = events(served.stdout);
      const metrics = String(ev.find((e) => e['metrics'] !== undefined)!['metrics']);
      const health = String(ev.find((e) => e['health'] !== undefined)!['health']);
      assert.match(metrics, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/, 'loopback by default');
      // The gauge is 1 while the agent holds its term and its last renewal landed in time: a
      // renewal overdue by half a heartbeat (100 ms) reads 0 until the next one lands, and CI
      // (stop 50's rehearsal, five files at once) scraped it in such a moment, token 1 held. Held
      // means read as 1 by some scrape within the agent's stale-after, after which it would
      // have lost its term.
      const leading = new RegExp(`^leasehold_leader\\{lease="agent/${a}"\\} 1$`, 'm');
      let text = '';
      await until("the agent's liveness lease is held and renewed in time", async () => leading.test((text = await (await fetch(metrics)).text())), SURVIVOR_STALE_MS).catch((e: unknown) => {
        throw new Error(`${String(e)}; the last scrape:\n${text.split('\n').filter((l) => l.startsWith('leasehold_')).join('\n')}`, { cause: e });
      });
      assert.match(text, /^leasehold_fleet_agents\{state="live"\} 2$/m);
      assert.match(text, /^leasehold_fleet_agents\{state="stale"\} 0$/m);
      assert.match(text, new RegExp(`^leasehold_fleet_agent_owned\\{agent="${b}"\\} 0$`, 'm'));
      assert.match(text, new RegExp(`^leasehold_fleet_agent_heartbeat_age_seconds\\{agent="${b}"\\} [0-9.e-]+$`, 'm'));
      assert.equal((await fetch(health)).status, 200);
      // Ready is the same test as the gauge's (isLeader): polled for the same reason.
      await until('a live agent is ready', async () => (await fetch(health.replace('/healthz', '/readyz'))).status === 200, SURVIVOR_STALE_MS);

      other.proc.kill('SIGKILL');
      await other.done;
      await until(
        'the killed agent shows as stale',
        async () => /^leasehold_fleet_agents\{state="stale"\} 1$/m.test(await (await fetch(metrics)).text()),
        STALE_BOUND_MS,
      );
      assert.match(await (await fetch(metrics)).text(), /^leasehold_fleet_agents\{state="live"\} 1$/m, 'the serving agent is still live');

      served.proc.kill('SIGTERM');
      const done = await served.done;
      assert.equal(done.code, 0, done.stderr);
      assert.ok(events(served.stdout).some((e) => e['event'] === 'stopped'));
      await assert.rejects(fetch(metrics), 'the servers close with the agent');
    });

    void it('a health port already in use: exit 2 with one line, and the agent is deregistered, not left to go stale', async () => {
      const id = uniq('busy');
      const blocker: Server = createServer();
      await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
      const port = (blocker.address() as { port: number }).port;
      try {
        const r = await sb.run(['agent', '--id', id, '--store', store, ...TIMING, '--health-port', String(port)]);
        assertOneLineError(r, 2, /health port \d+ on 127\.0\.0\.1 is in use; pick another port/);
      } finally {
        blocker.close();
      }
      const ls = await sb.run(['fleet', 'ls', '--json', '--store', store]);
      assert.equal(ls.code, 0, ls.stderr);
      const row = (JSON.parse(ls.stdout) as Array<{ id: string; deregistered: boolean; live: boolean }>).find((x) => x.id === id);
      assert.ok(row === undefined || (row.deregistered && !row.live), `deregistered: ${JSON.stringify(row)}`);
    });

    void it('a bad port is a usage error before the agent registers', async () => {
      const r = await sb.run(['agent', '--id', uniq('bad'), '--store', store, '--metrics-port', 'http']);
      assertOneLineError(r, 2, /--metrics-port "http" is not a port/);
    });
  });
}
