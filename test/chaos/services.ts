/**
 * The machinery around the stores: restarting them, finding libfaketime. Every restart is of a
 * server on a loopback address, found from the URL the run uses; nothing here touches a host
 * that is not this one.
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { isLoopback } from './proxy.js';
import type { StoreKind } from './types.js';
import { TEST_MYSQL_URL, TEST_PG_URL, mysqlAdmin } from '../helpers/stores.js';
import { isPrivateMariadb, restartPrivateMariadb } from '../helpers/private-mariadb.js';
import { TEST_REDIS_URL } from '../helpers/redis-store.js';
import { TEST_ETCD_URL } from '../helpers/etcd-store.js';
import { restartMariadb, whyNotRestartMariadb } from '../helpers/mariadb.js';

/** The libfaketime preload library (multi-threaded build: Node has threads), or null. */
export function findFaketime(): string | null {
  for (const dir of ['/usr/lib', '/usr/local/lib']) {
    let entries: string[] = [];
    try {
      entries = readdirSync(dir);
    } catch {
      continue;
    }
    for (const e of [...entries.map((x) => join(dir, x, 'faketime')), join(dir, 'faketime')]) {
      for (const so of ['libfaketimeMT.so.1', 'libfaketime.so.1']) {
        const p = join(e, so);
        if (existsSync(p)) return p;
      }
    }
  }
  return null;
}

function run(cmd: string, args: string[], timeoutMs = 30_000): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : 1;
      resolve({ code, out: `${stdout}${stderr}`.trim() });
    });
  });
}

function hostPort(url: string, defaultPort: number): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: u.port === '' ? defaultPort : Number(u.port) };
}

export async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await check().catch(() => false)) return;
    await sleep(100);
  }
  throw new Error(`${what} did not come back within ${timeoutMs}ms`);
}

export async function pgAnswers(url = TEST_PG_URL): Promise<boolean> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
  c.on('error', () => {});
  try {
    await c.connect();
    await c.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}

function redisPing(port: number): Promise<boolean> {
  return run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'ping'], 2000).then((r) => r.code === 0 && r.out.includes('PONG'));
}

interface EtcdService {
  canRestartEtcd(): boolean;
  restartEtcd(opts: { downMs?: number; timeoutMs?: number }): Promise<void>;
  etcdHealthy(timeoutMs?: number): Promise<boolean>;
}

/** A module of scripts/services/ (plain JavaScript, no types): loaded by URL. */
async function serviceModule<T>(file: string): Promise<T> {
  const here = fileURLToPath(import.meta.url); // dist/test/chaos/services.js
  return (await import(pathToFileURL(join(here, '..', '..', '..', '..', 'scripts', 'services', file)).href)) as T;
}

interface PgServerService {
  isPgServer(port: number): boolean;
  restartPgServer(o: { port: number; downMs: number }): Promise<void>;
}

/** How to restart the store a run uses, or why it cannot be restarted here. */
export interface Restarter {
  describe: string;
  restart(downMs: number): Promise<void>;
}

export async function storeRestarter(kind: StoreKind): Promise<Restarter | { unsupported: string }> {
  const root = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!root && kind !== 'sqlite' && kind !== 'etcd') return { unsupported: `restarting ${kind} needs root (pg_ctlcluster, redis-server in a system dir, start-stop-daemon)` };
  switch (kind) {
    case 'sqlite':
      return { unsupported: 'SQLite is a file, not a server: there is nothing to restart' };
    case 'postgres': {
      const { host, port } = hostPort(TEST_PG_URL, 5432);
      if (!isLoopback(host)) return { unsupported: `PostgreSQL at ${host} is not on loopback` };
      // A run's own server (scripts/services/pg-server.mjs, as chaos-private.test starts): restarted
      // by its data dir, found from the port.
      const own = await serviceModule<PgServerService>('pg-server.mjs');
      if (own.isPgServer(port)) {
        return {
          describe: `scripts/services/pg-server.mjs restart ${port}`,
          async restart(downMs: number) {
            await own.restartPgServer({ port, downMs });
            await waitUntil('PostgreSQL', () => pgAnswers(), 30_000);
          },
        };
      }
      const ls = spawnSync('pg_lsclusters', ['--no-header'], { encoding: 'utf8' });
      if (ls.status !== 0) return { unsupported: 'pg_lsclusters is not available (not a Debian-style PostgreSQL)' };
      const line = ls.stdout
        .split('\n')
        .map((l) => l.trim().split(/\s+/))
        .find((f) => f[2] === String(port));
      if (line === undefined) return { unsupported: `no local PostgreSQL cluster listens on port ${port}` };
      const [version, cluster] = line as [string, string];
      return {
        describe: `pg_ctlcluster ${version} ${cluster} restart`,
        async restart() {
          const r = await run('pg_ctlcluster', ['--skip-systemctl-redirect', version, cluster, 'restart'], 60_000);
          if (r.code !== 0) throw new Error(`pg_ctlcluster restart failed: ${r.out}`);
          await waitUntil('PostgreSQL', () => pgAnswers(), 30_000);
        },
      };
    }
    case 'redis': {
      const { host, port } = hostPort(TEST_REDIS_URL, 6379);
      if (!isLoopback(host)) return { unsupported: `Redis at ${host} is not on loopback` };
      if (spawnSync('sh', ['-c', 'command -v redis-server && command -v redis-cli']).status !== 0) {
        return { unsupported: 'redis-server/redis-cli are not installed' };
      }
      // The CI Redis (6379) is restarted exactly as CI starts it; another port gets a private dir.
      const shared = port === 6379;
      const dir = shared ? '/var/lib/redis' : `/tmp/lh-chaos-redis-${port}`;
      const logfile = shared ? '/var/log/redis/ci.log' : join(dir, 'redis.log');
      const bind = shared ? ['127.0.0.1', '-::1'] : ['127.0.0.1'];
      return {
        describe: `redis-cli -p ${port} shutdown nosave; redis-server --port ${port} (empty)`,
        async restart(downMs: number) {
          await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'shutdown', 'nosave'], 10_000);
          await waitUntil('Redis shutdown', async () => !(await redisPing(port)), 10_000);
          await sleep(downMs);
          mkdirSync(dir, { recursive: true });
          const r = await run('redis-server', [
            '--daemonize', 'yes', '--bind', ...bind, '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', dir, '--logfile', logfile,
          ]);
          if (r.code !== 0) throw new Error(`redis-server did not start: ${r.out}`);
          await waitUntil('Redis', () => redisPing(port), 20_000);
        },
      };
    }
    case 'etcd': {
      const { host, port } = hostPort(TEST_ETCD_URL.replace(/^etcds?:/, 'http:'), 2379);
      // scripts/services/etcd.mjs runs on 2379, or on LEASEHOLD_ETCD_SERVICE_PORT (a run's own etcd).
      const servicePort = Number(process.env['LEASEHOLD_ETCD_SERVICE_PORT'] ?? 2379);
      if (!isLoopback(host) || port !== servicePort) return { unsupported: `etcd at ${host}:${port} is not the one scripts/services/etcd.mjs runs` };
      const svc = await serviceModule<EtcdService>('etcd.mjs');
      if (!svc.canRestartEtcd()) return { unsupported: 'the running etcd was not started by scripts/services/etcd.mjs, so it cannot be restarted' };
      return {
        describe: 'scripts/services/etcd.mjs restart',
        async restart(downMs: number) {
          await svc.restartEtcd({ downMs, timeoutMs: 30_000 });
        },
      };
    }
    case 'mysql': {
      // A run's own server (test/helpers/private-mariadb.ts, as chaos.test starts): restarted by
      // its port, with a clean shutdown as start-stop-daemon --stop gives the shared one.
      const { host, port } = hostPort(TEST_MYSQL_URL.replace(/^mariadb:/, 'mysql:'), 3306);
      if (isLoopback(host) && isPrivateMariadb(port)) {
        return {
          describe: `a clean shutdown and start of the private MariaDB on ${port}`,
          async restart(downMs: number) {
            await restartPrivateMariadb(port, downMs, 90_000);
          },
        };
      }
      const why = whyNotRestartMariadb();
      if (why !== undefined) return { unsupported: why };
      return {
        describe: 'start-stop-daemon --stop/--start /usr/sbin/mariadbd (clean shutdown)',
        async restart(downMs: number) {
          await restartMariadb({ downMs, timeoutMs: 90_000 });
        },
      };
    }
  }
}

/** Can the run reach the store it was asked for? A reason when not. */
export async function storeUnreachable(kind: StoreKind): Promise<string | null> {
  switch (kind) {
    case 'sqlite':
      return null;
    case 'postgres':
      return (await pgAnswers()) ? null : `PostgreSQL does not answer at ${TEST_PG_URL.replace(/:[^:@/]*@/, ':***@')}`;
    case 'redis': {
      const { port } = hostPort(TEST_REDIS_URL, 6379);
      return (await redisPing(port)) ? null : `Redis does not answer at ${TEST_REDIS_URL}`;
    }
    case 'etcd': {
      const { host, port } = hostPort(TEST_ETCD_URL.replace(/^etcds?:/, 'http:'), 2379);
      const ok = await fetch(`http://${host}:${port}/health`, { signal: AbortSignal.timeout(1500) })
        .then((r) => r.ok)
        .catch(() => false);
      return ok ? null : `etcd does not answer at ${TEST_ETCD_URL} (start it with node scripts/services/etcd.mjs start)`;
    }
    case 'mysql':
      return mysqlAdmin('DO 1').then(
        () => null,
        (err: unknown) => `MySQL does not answer at ${TEST_MYSQL_URL} (${(err as Error).message})`,
      );
  }
}
