/**
 * Where idle-follower load is counted at the server. The shared servers also serve three other
 * workers' tests, so their global counters would count those too: the bench counts on a
 * namespace of its own. PostgreSQL: a database of its own on the shared server
 * (pg_stat_database.xact_commit). MySQL/MariaDB: a user and database of their own on the shared
 * server, counted in MariaDB's USER_STATISTICS (SHOW GLOBAL STATUS counts every client's
 * statements, the other workers' too). Redis and etcd: a private server of the same binary on a
 * bench port (Redis: the requests clients sent, seen through MONITOR; etcd's
 * grpc_server_msg_received_total), stopped afterwards.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Redis } from 'ioredis';
import { TEST_MYSQL_URL, TEST_PG_URL } from '../test/helpers/stores.js';
import { sleep } from './lib.js';

export interface CountedServer {
  /** A store URL for leasehold on this server. */
  url: string;
  /** Driver-level address for the peers. */
  address: string;
  /** Requests the server has handled so far (its own counter). */
  units(): Promise<number>;
  /** How long after a client is done its work shows in units(). */
  settleMs: number;
  stop(): Promise<void>;
}

const BENCH_PORT_BASE = Number(process.env['LEASEHOLD_BENCH_PORT_BASE'] ?? 26000);

export async function pgCounted(): Promise<CountedServer> {
  const db = `lh_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: TEST_PG_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${db}`);
  const base = new URL(TEST_PG_URL);
  base.pathname = `/${db}`;
  return {
    url: `${base.href}${base.search === '' ? '?' : '&'}schema=lh`,
    address: base.href,
    async units() {
      // A backend reports its counts when it goes idle, at most once a second: settleMs covers it.
      const r = await admin.query<{ n: string }>('SELECT xact_commit AS n FROM pg_stat_database WHERE datname = $1', [db]);
      return Number(r.rows[0]?.n ?? 0);
    },
    settleMs: 1200,
    async stop() {
      await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
      await admin.end();
    },
  };
}

/**
 * Statements the bench's own user sent (SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS),
 * each statement of a multi-statement batch counted. userstat is switched on for the figure and
 * put back after; the counting queries run as root, so they are not in the count.
 */
export async function mysqlCounted(): Promise<CountedServer> {
  const { createConnection } = await import('mysql2/promise');
  const tag = randomBytes(4).toString('hex');
  const [db, user, password] = [`lh_bench_${tag}`, `lh_bench_${tag}`, randomBytes(12).toString('hex')];
  const root = TEST_MYSQL_URL.replace(/^mariadb:/, 'mysql:');
  const admin = await createConnection(root);
  const [vars] = (await admin.query("SHOW GLOBAL VARIABLES LIKE 'userstat'")) as unknown as [{ Value: string }[]];
  const before = vars[0]?.Value ?? 'OFF';
  await admin.query(`CREATE DATABASE ${db}`);
  await admin.query(`CREATE USER ?@'%' IDENTIFIED BY ?`, [user, password]);
  await admin.query(`GRANT ALL ON ${db}.* TO ?@'%'`, [user]);
  await admin.query('SET GLOBAL userstat = 1');
  const base = new URL(root);
  base.username = user;
  base.password = password;
  base.pathname = `/${db}`;
  return {
    url: base.href,
    address: base.href,
    async units() {
      const [rows] = (await admin.query(
        'SELECT SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS AS n FROM information_schema.USER_STATISTICS WHERE USER = ?',
        [user],
      )) as unknown as [{ n: string | number }[]];
      return Number(rows[0]?.n ?? 0);
    },
    settleMs: 100,
    async stop() {
      await admin.query(`SET GLOBAL userstat = ${before === 'ON' ? 1 : 0}`).catch(() => undefined);
      await admin.query(`DROP USER IF EXISTS ?@'%'`, [user]).catch(() => undefined);
      await admin.query(`DROP DATABASE IF EXISTS ${db}`).catch(() => undefined);
      await admin.end();
    },
  };
}

async function waitFor(check: () => Promise<boolean>, what: string, timeoutMs = 15_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > until) throw new Error(`${what} did not come up within ${timeoutMs}ms`);
    await sleep(100);
  }
}

function stopChild(child: ChildProcess, dir: string): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      rmSync(dir, { recursive: true, force: true });
      resolve();
    };
    if (child.exitCode !== null || child.signalCode !== null) return done();
    child.once('exit', done);
    child.kill('SIGTERM');
  });
}

export async function redisCounted(): Promise<CountedServer> {
  const port = BENCH_PORT_BASE + 1;
  const dir = mkdtempSync(join(tmpdir(), 'lh-bench-redis-'));
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  const admin = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
  admin.on('error', () => {});
  await waitFor(async () => (await admin.ping()) === 'PONG', `redis-server on ${port}`);
  let requests = 0;
  const monitor = await admin.monitor();
  monitor.on('monitor', (_time: string, _args: string[], source: string) => {
    if (source !== 'lua') requests++;
  });
  return {
    url: `redis://127.0.0.1:${port}/0`,
    address: `redis://127.0.0.1:${port}/0`,
    // Requests, not INFO commandstats: commandstats (and total_commands_processed) also count
    // every command a Lua script runs inside the server, so one EVALSHA of the claim script
    // (TIME, GET, GET, HMGET inside) read as five. MONITOR marks those as coming from "lua".
    units() {
      return Promise.resolve(requests);
    },
    settleMs: 100,
    async stop() {
      monitor.disconnect();
      admin.disconnect();
      await stopChild(child, dir);
    },
  };
}

export async function etcdCounted(): Promise<CountedServer> {
  const client = BENCH_PORT_BASE + 10;
  const peer = BENCH_PORT_BASE + 11;
  const dir = mkdtempSync(join(tmpdir(), 'lh-bench-etcd-'));
  const c = `http://127.0.0.1:${client}`;
  const p = `http://127.0.0.1:${peer}`;
  const child = spawn(
    'etcd',
    ['--name', 'bench', '--data-dir', join(dir, 'data'), '--listen-client-urls', c, '--advertise-client-urls', c, '--listen-peer-urls', p,
      '--initial-advertise-peer-urls', p, '--initial-cluster', `bench=${p}`],
    { stdio: 'ignore' },
  );
  await waitFor(async () => (await fetch(`${c}/health`)).ok, `etcd on ${client}`);
  return {
    url: `etcd://127.0.0.1:${client}`,
    address: `127.0.0.1:${client}`,
    async units() {
      const text = await (await fetch(`${c}/metrics`)).text();
      let n = 0;
      for (const m of text.matchAll(/^grpc_server_msg_received_total\{[^}]*\} (\S+)$/gm)) n += Number(m[1]);
      return n;
    },
    settleMs: 100,
    async stop() {
      await stopChild(child, dir);
    },
  };
}
