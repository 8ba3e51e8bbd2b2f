#!/usr/bin/env node
// A throwaway PgBouncer on loopback in front of a PostgreSQL (default: the shared test server,
// 127.0.0.1:5432, trust auth), for test/topologies/pgbouncer.test.ts and for trying leasehold
// through transaction pooling by hand.
//
//   node scripts/services/pgbouncer.mjs start [port] [pool_mode]   default 26330, transaction
//   node scripts/services/pgbouncer.mjs stop [port]
//
// Then postgres://postgres@127.0.0.1:26330/test reaches database `test` through it. Or from a
// test: `const b = await startPgBouncer({ port: 26330 }); ...; await b.stop()`.
// PgBouncer refuses to run as root: it runs as the postgres user. State (config, pid, log) lives
// under os.tmpdir()/leasehold-pgbouncer-<port>/; stop only kills the recorded pid while it is
// still a pgbouncer on that config.
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { commandLine, readPid } from './proc.mjs';

const HOST = '127.0.0.1';
const silent = () => {};

function stateDir(port) {
  return join(tmpdir(), `leasehold-pgbouncer-${port}`);
}

/** Still the PgBouncer started with `config` (pids are reused). */
function isOurs(pid, config) {
  return commandLine(pid)?.includes(config) === true;
}

async function listening(port, host = HOST) {
  return new Promise((resolve) => {
    const s = connect({ host, port }, () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

export async function stopPgBouncer({ port = 26330, log = silent } = {}) {
  const dir = stateDir(port);
  const config = join(dir, 'pgbouncer.ini');
  const pid = readPid(join(dir, 'pgbouncer.pid.own'));
  if (pid !== null && isOurs(pid, config)) {
    log(`[pgbouncer] stopping pid ${pid}`);
    process.kill(pid, 'SIGTERM');
    const end = Date.now() + 5000;
    while (isOurs(pid, config) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    if (isOurs(pid, config)) process.kill(pid, 'SIGKILL');
  }
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Starts PgBouncer on port (stopping an earlier one on the same port), pooling `database` of the
 * upstream server in poolMode, and waits until it listens. Every client database name maps to
 * the upstream's database of the same name (`* =` fallback), so schemas and tables are the
 * upstream's.
 */
export async function startPgBouncer({
  port = 26330,
  upstreamHost = HOST,
  upstreamPort = 5432,
  poolMode = 'transaction',
  poolSize = 10,
  // Another loopback address lets it listen on the port number its upstream uses (as a pooler on
  // a host of its own does), which a check that compares ports cannot tell from the server.
  listenHost = HOST,
  log = silent,
} = {}) {
  const bin = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer'].find((p) => existsSync(p));
  if (bin === undefined) throw new Error('no pgbouncer binary: apt-get install pgbouncer');
  await stopPgBouncer({ port, log });
  const dir = stateDir(port);
  mkdirSync(dir, { recursive: true });
  const config = join(dir, 'pgbouncer.ini');
  writeFileSync(join(dir, 'userlist.txt'), '"postgres" ""\n');
  writeFileSync(
    config,
    [
      '[databases]',
      `* = host=${upstreamHost} port=${upstreamPort}`,
      '[pgbouncer]',
      `listen_addr = ${listenHost}`,
      `listen_port = ${port}`,
      "unix_socket_dir = ''",
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      `pool_mode = ${poolMode}`,
      `default_pool_size = ${poolSize}`,
      'max_client_conn = 500',
      `logfile = ${join(dir, 'pgbouncer.log')}`,
      `pidfile = ${join(dir, 'pgbouncer.pid')}`,
      'admin_users = postgres',
      '',
    ].join('\n'),
  );
  // PgBouncer will not run as root; as postgres, it must be able to write its log and pid here.
  const uid = Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout.trim());
  const gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout.trim());
  const asPostgres = process.getuid?.() === 0 && Number.isInteger(uid);
  if (asPostgres) for (const f of ['', 'pgbouncer.ini', 'userlist.txt']) chownSync(join(dir, f), uid, gid);
  const out = openSync(join(dir, 'stdout.log'), 'a');
  const child = spawn(bin, [config], { detached: true, stdio: ['ignore', out, out], ...(asPostgres ? { uid, gid } : {}) });
  closeSync(out);
  child.unref();
  if (child.pid === undefined) throw new Error(`could not start pgbouncer; see ${dir}`);
  writeFileSync(join(dir, 'pgbouncer.pid.own'), `${child.pid}\n`);
  const end = Date.now() + 10_000;
  while (!(await listening(port, listenHost))) {
    if (Date.now() > end || !isOurs(child.pid, config)) {
      let why = '';
      for (const f of ['stdout.log', 'pgbouncer.log']) {
        try {
          why += readFileSync(join(dir, f), 'utf8');
        } catch {
          // not written
        }
      }
      throw new Error(`pgbouncer did not listen on ${listenHost}:${port}: ${why.trim().split('\n').slice(-10).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  log(`[pgbouncer] pid ${child.pid} on ${listenHost}:${port}, ${poolMode} pooling, in front of ${upstreamHost}:${upstreamPort}`);
  return { pid: child.pid, port, stop: () => stopPgBouncer({ port, log }) };
}

async function main(cmd, port, mode) {
  const log = (m) => console.log(m);
  const p = port === undefined ? 26330 : Number(port);
  if (cmd === 'start') await startPgBouncer({ port: p, poolMode: mode ?? 'transaction', log });
  else if (cmd === 'stop') await stopPgBouncer({ port: p, log });
  else {
    console.error('usage: node scripts/services/pgbouncer.mjs start|stop [port] [pool_mode]');
    process.exitCode = 2;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2], process.argv[3], process.argv[4]).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
