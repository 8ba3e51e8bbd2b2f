/**
 * Liveness 'session' in a partition (issue 32, docs/liveness.md case 3), with a real one: the
 * holder runs in a network namespace of its own and reaches a PostgreSQL of the test's own
 * through a veth pair; iptables in the namespace drops every packet both ways. Neither side sees
 * a close. The server ends the holder's session only when its TCP keepalive gives up; the
 * holder must have stood down before that (its local deadline), else the store would end the
 * term of a holder that still believes it leads. The server's keepalive is set short here (its
 * own server, port LEASEHOLD_TEST_PG_PARTITION_PORT, default 27220), so both ends of that race
 * happen within seconds:
 *  1. keepalive that gives up within the TTL: the store refuses the mode (LivenessError
 *     'keepalive') before any term;
 *  2. keepalive that gives up after the TTL: the timeline partition -> holder stands down ->
 *     (follower takes over) -> server declares the session dead, printed and asserted in that order.
 * Needs root, iproute2 and iptables; without them the test is skipped and says why.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { createNetns, whyNoNetns, type Netns } from '../helpers/netns.js';
import { ROOT } from './tls-helpers.js';

const PORT = Number(process.env['LEASEHOLD_TEST_PG_PARTITION_PORT'] ?? 27220);
const holderJs = fileURLToPath(new URL('../fixtures/session-holder.js', import.meta.url));
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'postgres').split(',').includes('postgres');
const noNetns = wanted ? whyNoNetns() : null;
const skip = !wanted ? 'postgres not selected' : noNetns !== null ? `no network namespace here: ${noNetns}` : false;
if (skip !== false && wanted) process.stdout.write(`# pg-partition skipped: ${skip}\n`);

const mono = (): number => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
type Line = { event: string; t: number; token?: string; reason?: string; why?: string; message?: string };

interface Server {
  url: string;
  stop(): void;
}

function holder(ns: Netns, url: string, name: string, ttlMs: number): { child: ChildProcess; lines: Line[]; next(event: string, timeoutMs: number): Promise<Line> } {
  const child = ns.spawn(process.execPath, [holderJs, url, name, String(ttlMs), 'session'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines: Line[] = [];
  let buf = '';
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      lines.push(JSON.parse(buf.slice(0, i)) as Line);
      buf = buf.slice(i + 1);
    }
  });
  const next = async (event: string, timeoutMs: number): Promise<Line> => {
    const deadline = mono() + timeoutMs;
    for (;;) {
      const found = lines.find((l) => l.event === event);
      if (found !== undefined) return found;
      if (mono() > deadline) throw new Error(`the holder never printed "${event}" within ${timeoutMs}ms; got ${JSON.stringify(lines)}`);
      await sleep(10);
    }
  };
  return { child, lines, next };
}

void describe("liveness 'session' in a partition between the holder's network namespace and PostgreSQL", { skip }, () => {
  let ns: Netns;
  let server: Server;
  let admin: pg.Client;
  // A /30 of its own (10.232.x.0/30), so that two runs at once do not share addresses.
  const third = randomInt(0, 250);
  const hostAddr = `10.232.${third}.1`;
  const nsAddr = `10.232.${third}.2`;
  const schema = `lh_part_${randomBytes(4).toString('hex')}`;
  const via = (host: string): string => `postgres://postgres@${host}:${PORT}/test?schema=${schema}`;

  /** The server's keepalive for new sessions (these are per-connection settings; a reload applies them to new connections). */
  const keepalive = async (idle: number, interval: number, count: number): Promise<void> => {
    await admin.query(`ALTER SYSTEM SET tcp_keepalives_idle = ${idle}`);
    await admin.query(`ALTER SYSTEM SET tcp_keepalives_interval = ${interval}`);
    await admin.query(`ALTER SYSTEM SET tcp_keepalives_count = ${count}`);
    await admin.query('SELECT pg_reload_conf()');
    await sleep(200); // the postmaster rereads its files asynchronously
  };

  before(async () => {
    ns = createNetns(hostAddr, nsAddr);
    const mod = (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'pg-server.mjs')).href)) as {
      startPgServer(o: { port: number; listen: string[] }): Promise<Server>;
    };
    server = await mod.startPgServer({ port: PORT, listen: ['127.0.0.1', hostAddr] });
    admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    const setup = await PostgresStore.create({ url: via('127.0.0.1') });
    await setup.migrate();
    await setup.close();
  });
  after(async () => {
    await admin?.end().catch(() => {});
    ns?.heal();
    ns?.destroy();
    server?.stop();
  });

  void it('a server keepalive that could end a silent session within the TTL: the holder is refused the mode (LivenessError keepalive), no term granted', async () => {
    await keepalive(1, 1, 2); // gives up 2 s after the first unanswered probe: within a 4 s TTL
    const h = holder(ns, via(hostAddr), 'refused', 4000);
    try {
      const line = await h.next('refused', 20_000);
      assert.equal(line.why, 'keepalive');
      assert.match(line.message!, /could end this process's session after 2000ms without an answer.*tcp_keepalives_interval=1s, tcp_keepalives_count=2.*not longer than the TTL \(4000ms\)/);
      const rows = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".history WHERE name = 'refused'`);
      assert.equal(rows.rows[0].n, 0);
    } finally {
      h.child.kill('SIGKILL');
    }
  });

  void it('a server keepalive longer than the TTL: in a partition the holder stands down before the server declares its session dead', { timeout: 60_000 }, async () => {
    const ttl = 3000;
    // The server gives up idle + interval x count = 1 + 2 x 3 = 7 s after the link goes silent:
    // the session's check sees 6 s (interval x count) > TTL and accepts the mode.
    await keepalive(1, 2, 3);
    const h = holder(ns, via(hostAddr), 'job', ttl);
    const follower = new Leasehold({ store: await PostgresStore.create({ url: via('127.0.0.1') }), closeStore: true });
    try {
      const acquired = await h.next('acquired', 20_000);
      const [row] = (await admin.query<{ pid: number | null }>(`SELECT session_pid AS pid FROM "${schema}".leases WHERE name = 'job'`)).rows;
      const pid = row?.pid;
      assert.ok(pid != null, 'the term was not tied to the holder\'s session');
      const lease = follower.lease('job', { ttl, liveness: 'session' });
      const took = lease.acquire().then((term) => ({ t: mono(), token: term.token }));
      await sleep(ttl); // the follower waits (on the session lock too); the holder renews
      const t0 = mono();
      ns.partition();
      // The server's side: poll for the holder's session backend to be gone.
      let serverEnded: number | null = null;
      const polling = (async () => {
        while (serverEnded === null && mono() - t0 < 30_000) {
          const r = await admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [pid]);
          if (r.rows[0].n === 0) serverEnded = mono();
          else await sleep(50);
        }
      })();
      const lost = await h.next('lost', 3 * ttl);
      const next = await took;
      await polling;
      assert.ok(serverEnded !== null, 'the server never ended the silent session (30 s)');
      const at = (x: number): string => `+${Math.round(x - t0)}ms`;
      process.stdout.write(
        `# partition timeline (TTL ${ttl}ms, server keepalive 1s + 2s x 3): partition ${at(t0)}; holder stood down ${at(lost.t)} (${lost.reason}); ` +
          `follower took over ${at(next.t)} (token ${next.token} > ${acquired.token}); server declared the session dead ${at(serverEnded)}\n`,
      );
      // The order the mode relies on: the holder gives up its belief before the server gives up on it.
      assert.ok(lost.t < serverEnded, `the server ended the session (${at(serverEnded)}) before the holder stood down (${at(lost.t)})`);
      // Its local deadline: at most one TTL after its last confirmed renewal was sent (before t0).
      assert.ok(lost.t - t0 <= ttl, `the holder stood down ${Math.round(lost.t - t0)}ms into the partition, past its TTL`);
      // The store ends the term at its expiry, which the holder's deadline precedes.
      assert.ok(next.t > lost.t, `the follower took over (${at(next.t)}) before the holder stood down (${at(lost.t)})`);
      assert.ok(next.token > BigInt(acquired.token!));
    } finally {
      h.child.kill('SIGKILL');
      ns.heal();
      await follower.close();
    }
  });
});
