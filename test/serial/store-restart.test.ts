/**
 * Store restarts while leases are held: PostgreSQL restarted, Redis restarted EMPTY (no
 * persistence, the common default), etcd restarted, MariaDB shut down cleanly and started again.
 * No token may ever go backwards, and a leader must be back without anyone touching anything.
 *
 * Each store is a server of this file's own on a loopback port nobody else uses (below), started
 * for its case and removed after: restarting the machine's shared servers made this file run in
 * the test runner's last phase, alone (31 s of npm test's wall time on 2026-12-07), and a shared
 * server restarted is a fault for every other file that happens to be using it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Term } from '../../src/core/lease.js';
import { openStore } from '../../src/backends/index.js';
import { selectedStores, type StoreKind } from '../helpers/stores.js';
import { startPrivateMariadb, whyNoPrivateMariadb } from '../helpers/private-mariadb.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const exec = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** Ports no other test uses (chaos-private keeps 25432, 26479 and 22379; the topologies 24xxx, 26050-27990 and 3307-3318). */
const PORTS = { postgres: 25442, redis: 26489, etcd: 22391, mysql: 3319 } as const;

/** A server of this file's own: where it is, how to restart it, how to remove it. */
interface OwnServer {
  url: string;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

async function redisAnswers(port: number): Promise<boolean> {
  const r = await exec('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'ping'], { timeout: 2000 }).catch(() => null);
  return r !== null && r.stdout.includes('PONG');
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`${what} within ${timeoutMs}ms`);
    await sleep(100);
  }
}

const servers: Record<Exclude<StoreKind, 'sqlite'>, () => Promise<OwnServer>> = {
  async postgres() {
    const port = PORTS.postgres;
    const mod = (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'pg-server.mjs')).href)) as {
      startPgServer(o: { port: number }): Promise<{ url: string; stop(): void }>;
      restartPgServer(o: { port: number; downMs: number }): Promise<void>;
    };
    const s = await mod.startPgServer({ port });
    // pg_ctl stop -m fast and start, as pg_ctlcluster restart does.
    return { url: s.url, restart: () => mod.restartPgServer({ port, downMs: 0 }), stop: async () => s.stop() };
  },
  async redis() {
    const port = PORTS.redis;
    const dir = join(tmpdir(), `lh-restart-redis-${port}`);
    // Started as this machine starts its Redis: nothing is kept on disk, so a restart is empty.
    const start = async (): Promise<void> => {
      mkdirSync(dir, { recursive: true });
      await exec('redis-server', ['--daemonize', 'yes', '--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', dir, '--logfile', join(dir, 'redis.log')]);
      await until('Redis answered', () => redisAnswers(port), 20_000);
    };
    const shutdown = async (): Promise<void> => {
      await exec('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'shutdown', 'nosave'], { timeout: 10_000 }).catch(() => undefined);
      await until('Redis shut down', async () => !(await redisAnswers(port)), 10_000);
    };
    await shutdown();
    await start();
    return {
      url: `redis://127.0.0.1:${port}`,
      restart: async () => {
        await shutdown();
        await sleep(300);
        await start();
      },
      stop: async () => {
        await shutdown();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
  async etcd() {
    const port = PORTS.etcd;
    const env = { ...process.env, LEASEHOLD_ETCD_SERVICE_PORT: String(port), LEASEHOLD_ETCD_SERVICE_DIR: join(tmpdir(), `lh-restart-etcd-${port}`) };
    const script = join(ROOT, 'scripts', 'services', 'etcd.mjs');
    const etcd = (cmd: string): Promise<unknown> => exec(process.execPath, [script, cmd], { env, timeout: 60_000 });
    await etcd('start');
    return {
      url: `etcd://127.0.0.1:${port}`,
      // Killed and started again on the same data dir (revisions, keys and leases survive).
      restart: async () => void (await etcd('restart')),
      stop: async () => {
        await etcd('stop').catch(() => undefined);
        rmSync(env.LEASEHOLD_ETCD_SERVICE_DIR, { recursive: true, force: true });
      },
    };
  },
  async mysql() {
    const s = await startPrivateMariadb(PORTS.mysql, []);
    // A clean shutdown (SIGTERM, as start-stop-daemon --stop sends), 500 ms down, a start.
    return { url: s.url, restart: () => s.restart(500), stop: async () => s.stop() };
  },
};

async function whyNot(kind: StoreKind): Promise<string | undefined> {
  if (kind === 'sqlite') return 'SQLite is a file: there is no server to restart';
  if (kind === 'postgres' && spawnSync('sh', ['-c', 'command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl']).status !== 0) return 'no pg_ctl to start a PostgreSQL of its own';
  if (kind === 'redis' && spawnSync('sh', ['-c', 'command -v redis-server && command -v redis-cli']).status !== 0) return 'redis-server/redis-cli are not installed';
  if (kind === 'mysql') return whyNoPrivateMariadb();
  return undefined;
}

void describe('store restarts while a lease is held', () => {
  for (const kind of selectedStores()) {
    void it(`${kind}: tokens never go backwards and a leader is back on its own`, async (t) => {
      const skip = await whyNot(kind);
      if (skip !== undefined) {
        t.skip(skip);
        return;
      }
      const server = await servers[kind as Exclude<StoreKind, 'sqlite'>]();
      try {
        await restartsWhileHeld(kind, server);
      } finally {
        await server.stop();
      }
    });
  }
});

/** Two electors on the server; the server restarted under the first term's holder. */
async function restartsWhileHeld(kind: StoreKind, server: OwnServer): Promise<void> {
  const first = await openStore(server.url);
  await first.migrate();
  const stores = [first, await openStore(server.url)];
  const ttl = kind === 'etcd' ? 2000 : 1000;
  const name = `restart-${randomBytes(4).toString('hex')}`;
  const clients = stores.map((store) => new Leasehold({ store }));
  const terms: { token: bigint; by: number; at: number }[] = [];
  const electors = clients.map((c, i) =>
    c.elect(name, { onElected: (term: Term) => void terms.push({ token: term.token, by: i, at: performance.now() }) }, { ttl }),
  );
  try {
    while (terms.length === 0) await sleep(20);
    await sleep(ttl); // a few renewals under the first term
    const before = terms.length;
    const restartedAt = performance.now();
    await server.restart();
    // Redis was restarted empty: the store's data (and its notion of the term) is gone.
    const deadline = performance.now() + 60_000;
    while (performance.now() < deadline && !electors.some((e) => e.isLeader && terms.length > 0)) await sleep(50);
    // Wait for the dust to settle: a leader holds, and has renewed at least once.
    await sleep(ttl * 2);
    const leaders = electors.filter((e) => e.isLeader).length;
    assert.equal(leaders, 1, `exactly one leader after the restart (have ${leaders})`);
    for (let i = 1; i < terms.length; i++) {
      assert.ok(terms[i]!.token > terms[i - 1]!.token, `term tokens strictly increase across the restart: ${terms.map((x) => x.token).join(' < ')}`);
    }
    const backAfter = (terms.length > before ? terms[terms.length - 1]!.at : performance.now()) - restartedAt;
    process.stdout.write(
      `# ${kind}: terms ${terms.map((x) => x.token).join(', ')}; leader back ${backAfter.toFixed(0)}ms after the restart began\n`,
    );
  } finally {
    await Promise.all(electors.map((e) => e.stop()));
    await Promise.all(clients.map((c) => c.close()));
    // A Leasehold given a store leaves it open: closed here, before the server goes (a Redis
    // client left open reconnects to a stopped server for ever, and holds the process open).
    await Promise.all(stores.map((s) => s.close()));
  }
}
