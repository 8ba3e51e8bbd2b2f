/**
 * Servers of a chaos run's own, so that a run whose nemesis restarts its store does not restart the
 * machine's shared one: chaos-private.test runs in the parallel phase beside files that use the
 * shared servers. Each is on a fixed loopback port of its own (below) and is found again by the
 * nemesis from the URL the run is given (services.ts): PostgreSQL by pg-server.mjs's data dir for
 * the port, Redis by its port (a fresh empty server, as for the shared one), etcd by
 * scripts/services/etcd.mjs's LEASEHOLD_ETCD_SERVICE_PORT and _DIR.
 */
import { execFile, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { TEST_PG_URL } from '../helpers/stores.js';
import { TEST_REDIS_URL } from '../helpers/redis-store.js';
import { TEST_ETCD_URL } from '../helpers/etcd-store.js';
import { mysqlConnection, TEST_MYSQL_URL } from '../helpers/stores.js';
import { startPrivateMariadb, whyNoPrivateMariadb } from '../helpers/private-mariadb.js';
import { waitUntil } from './services.js';
import type { StoreKind } from './types.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const exec = promisify(execFile);

/** Ports no other test uses (the topologies keep to 24xxx, 26050-27990, 3307-3318; store-restart 25442, 26489, 22391, 3319). */
export const OWN_PORTS = { postgres: 25432, redis: 26479, etcd: 22379, mysql: 3321 } as const;

export type OwnPorts = Record<'postgres' | 'redis' | 'etcd' | 'mysql', number>;

export interface OwnServer {
  /** The store URL (the test database, no schema or prefix). */
  url: string;
  /** The environment that points a chaos run (store and, for PostgreSQL, the resource) at it. */
  env: Record<string, string>;
  /** Down and up again, `downMs` between: PostgreSQL fast, MariaDB clean, Redis empty, etcd on the same data. */
  restart(downMs: number): Promise<void>;
  stop(): Promise<void>;
}

async function redisAnswers(port: number): Promise<boolean> {
  const r = await exec('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'ping'], { timeout: 2000 }).catch(() => null);
  return r !== null && r.stdout.includes('PONG');
}

/**
 * Starts a server of its own for `kind` on `ports` (chaos runs: OWN_PORTS; serial/store-restart
 * passes its own), or says why it cannot here.
 */
export async function startOwnServer(kind: StoreKind, ports: OwnPorts = OWN_PORTS): Promise<OwnServer | { unsupported: string }> {
  switch (kind) {
    case 'postgres': {
      const port = ports.postgres;
      const mod = (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'pg-server.mjs')).href)) as {
        startPgServer(o: { port: number }): Promise<{ url: string; stop(): void }>;
        restartPgServer(o: { port: number; downMs: number }): Promise<void>;
      };
      const s = await mod.startPgServer({ port }).catch((err: Error) => ({ error: err.message }));
      if ('error' in s) return { unsupported: `no PostgreSQL of its own: ${s.error}` };
      return { url: s.url, env: { LEASEHOLD_TEST_PG_URL: s.url }, restart: (downMs) => mod.restartPgServer({ port, downMs }), stop: async () => s.stop() };
    }
    case 'redis': {
      if (spawnSync('sh', ['-c', 'command -v redis-server && command -v redis-cli']).status !== 0) return { unsupported: 'redis-server/redis-cli are not installed' };
      const port = ports.redis;
      // The directory services.ts restarts it in (a port other than 6379 gets /tmp/lh-chaos-redis-<port>).
      const dir = `/tmp/lh-chaos-redis-${port}`;
      // As the machine starts its Redis: nothing kept on disk, so a restart comes back empty.
      const start = async (): Promise<void> => {
        mkdirSync(dir, { recursive: true });
        await exec('redis-server', ['--daemonize', 'yes', '--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', dir, '--logfile', join(dir, 'redis.log')]);
        await waitUntil('a Redis of its own', () => redisAnswers(port), 20_000);
      };
      const shutdown = async (): Promise<void> => {
        await exec('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'shutdown', 'nosave'], { timeout: 10_000 }).catch(() => undefined);
        await waitUntil('its Redis shut down', async () => !(await redisAnswers(port)), 10_000);
      };
      await shutdown();
      await start();
      const url = `redis://127.0.0.1:${port}`;
      return {
        url,
        env: { LEASEHOLD_TEST_REDIS_URL: url },
        restart: async (downMs) => {
          await shutdown();
          await new Promise((r) => setTimeout(r, downMs));
          await start();
        },
        stop: async () => {
          await shutdown().catch(() => undefined);
          rmSync(dir, { recursive: true, force: true });
        },
      };
    }
    case 'etcd': {
      const port = ports.etcd;
      const env = { LEASEHOLD_ETCD_SERVICE_PORT: String(port), LEASEHOLD_ETCD_SERVICE_DIR: join(tmpdir(), `leasehold-chaos-etcd-${port}`) };
      const script = join(ROOT, 'scripts', 'services', 'etcd.mjs');
      const etcd = (cmd: string, timeout: number): Promise<unknown> => exec(process.execPath, [script, cmd], { env: { ...process.env, ...env }, timeout });
      const started = await etcd('start', 60_000).catch((err: Error) => ({ error: err.message }));
      if (typeof started === 'object' && started !== null && 'error' in started) return { unsupported: `no etcd of its own: ${String(started.error)}` };
      const url = `etcd://127.0.0.1:${port}`;
      return {
        url,
        env: { ...env, LEASEHOLD_TEST_ETCD_URL: url },
        // Killed and started again on the same data dir (revisions, keys and leases survive); down
        // only as long as that takes (etcd.mjs restart has no pause), whatever `downMs` asks.
        restart: async () => void (await etcd('restart', 60_000)),
        stop: async () => {
          await etcd('stop', 30_000).catch(() => undefined);
          rmSync(env.LEASEHOLD_ETCD_SERVICE_DIR, { recursive: true, force: true });
        },
      };
    }
    case 'mysql': {
      const why = await whyNoPrivateMariadb();
      if (why !== undefined) return { unsupported: `no MariaDB of its own: ${why}` };
      // Restarted by the nemesis in the run's process, found by its port (services.ts).
      const s = await startPrivateMariadb(ports.mysql, []);
      return { url: s.url, env: { LEASEHOLD_TEST_MYSQL_URL: s.url }, restart: (downMs) => s.restart(downMs), stop: async () => s.stop() };
    }
    default:
      return { unsupported: `${kind} has no server to restart` };
  }
}

/**
 * Something that changes when the server restarts and only then (PostgreSQL's postmaster start
 * time, Redis's run_id, etcd's process start time, MariaDB's pid), read from the server `env` points at (the
 * shared one when `env` is empty): the test checks that the nemesis restarted the run's own server
 * and never the shared one.
 */
export async function serverIncarnation(kind: StoreKind, env: Record<string, string> = {}): Promise<string> {
  switch (kind) {
    case 'postgres': {
      const c = new pg.Client({ connectionString: env['LEASEHOLD_TEST_PG_URL'] ?? TEST_PG_URL });
      await c.connect();
      try {
        return String((await c.query<{ t: string }>('SELECT pg_postmaster_start_time()::text AS t')).rows[0]?.t);
      } finally {
        await c.end();
      }
    }
    case 'redis': {
      const u = new URL(env['LEASEHOLD_TEST_REDIS_URL'] ?? TEST_REDIS_URL);
      const r = await exec('redis-cli', ['-h', u.hostname, '-p', u.port || '6379', 'info', 'server'], { timeout: 5000 });
      return /run_id:(\w+)/.exec(r.stdout)?.[1] ?? '';
    }
    case 'etcd': {
      const u = new URL((env['LEASEHOLD_TEST_ETCD_URL'] ?? TEST_ETCD_URL).replace(/^etcds?:/, 'http:'));
      const text = await (await fetch(`http://${u.hostname}:${u.port || '2379'}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
      return /^process_start_time_seconds (\S+)$/m.exec(text)?.[1] ?? '';
    }
    case 'mysql': {
      // The server's pid, from the pid file it names: a clean restart gets a new process.
      const c = await mysqlConnection(env['LEASEHOLD_TEST_MYSQL_URL'] ?? TEST_MYSQL_URL);
      try {
        const [rows] = await c.query('SELECT @@pid_file AS f');
        return readFileSync(String(rows[0]?.['f']), 'utf8').trim();
      } finally {
        await c.end();
      }
    }
    default:
      throw new Error(`no incarnation for ${kind}`);
  }
}
