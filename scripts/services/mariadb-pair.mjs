#!/usr/bin/env node
// A throwaway MariaDB primary and asynchronous replica on loopback, for failover tests: the
// replica's SQL thread can be stopped (so it misses the primary's last commits, as a lagging
// replica does), the primary killed with SIGKILL, the replica promoted. Both are private to this
// script: their own data dirs, sockets and ports under os.tmpdir()/leasehold-mariadb-pair-<port>/;
// the machine's own MariaDB (3306) is never touched. Needs Debian's mariadb-server binaries
// (mariadbd, mariadb-install-db, the mariadb client). Run as root, the servers run as the user
// the machine's MariaDB runs as (mysql), which owns their data dirs.
//
//   node scripts/services/mariadb-pair.mjs start [port]   primary on port (default 3307), replica on port+1
//   node scripts/services/mariadb-pair.mjs stop [port]    kill both, remove their data
//
// From a test: const p = await startMariadbPair({ port: 3307 });
//   p.url (both hosts, primary first), p.primaryUrl, p.replicaUrl; p.waitReplicaCaughtUp();
//   p.stopReplicaSql(); p.killPrimary(); p.promote(); p.gtid(); p.stop()
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { commandLine, readPid } from './proc.mjs';

const HOST = '127.0.0.1';
const DATABASE = 'test';
const DEFAULT_PORT = Number(process.env.LEASEHOLD_TEST_MYSQL_REPLICA_PORT ?? 3307);
const silent = () => {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;

/** The server, installer and client binaries, or null when one is missing. */
export function mariadbBinaries() {
  const first = (paths) => paths.find((p) => existsSync(p));
  const server = first(['/usr/sbin/mariadbd', '/usr/sbin/mysqld', '/usr/local/sbin/mariadbd']);
  const install = first(['/usr/bin/mariadb-install-db', '/usr/bin/mysql_install_db', '/usr/local/bin/mariadb-install-db']);
  const client = first(['/usr/bin/mariadb', '/usr/bin/mysql', '/usr/local/bin/mariadb']);
  return server === undefined || install === undefined || client === undefined ? null : { server, install, client };
}

/**
 * Who the servers run as: when root, the user the machine's MariaDB runs as (a server run as root
 * needs --user=root, and its files would then not match the machine's); otherwise ourselves.
 */
function serverUser() {
  if (!asRoot) return null;
  const ps = spawnSync('ps', ['-o', 'user=', '-C', 'mariadbd,mysqld'], { encoding: 'utf8' });
  const seen = (ps.stdout ?? '').split('\n').map((s) => s.trim()).find((u) => u !== '' && u !== 'root');
  if (seen !== undefined) return seen;
  return spawnSync('id', ['-u', 'mysql']).status === 0 ? 'mysql' : 'root';
}

function layout(port) {
  const dir = join(tmpdir(), `leasehold-mariadb-pair-${port}`);
  const server = (name, p, id) => ({
    name,
    port: p,
    serverId: id,
    data: join(dir, name),
    socket: join(dir, `${name}.sock`),
    pidFile: join(dir, `${name}.pid`),
    log: join(dir, `${name}.err`),
  });
  return { dir, primary: server('primary', port, 1), replica: server('replica', port + 1, 2) };
}

/** Still the mariadbd we started on that data dir (pids are reused). */
function isOurs(pid, s) {
  const cmd = commandLine(pid);
  return cmd !== null && cmd.some((a) => /mariadbd|mysqld/.test(a)) && cmd.includes(`--datadir=${s.data}`);
}

function killNow(s) {
  const pid = readPid(s.pidFile);
  if (pid === null || !isOurs(pid, s)) return false;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return false;
  }
  // The kernel closes its sockets as it dies; the port is free once it is gone.
  const deadline = Date.now() + 10_000;
  while (isOurs(pid, s) && Date.now() < deadline) spawnSync('sleep', ['0.05']);
  return true;
}

/** Kills both servers (if running) and removes their data. Synchronous: safe in an exit handler. */
export function stopMariadbPair({ port = DEFAULT_PORT } = {}) {
  const l = layout(port);
  killNow(l.primary);
  killNow(l.replica);
  rmSync(l.dir, { recursive: true, force: true });
}

function tail(file, lines = 15) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function portOpen(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: HOST, port });
    const done = (open) => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** Runs SQL on one of the pair over its socket; the first column of each row, tab-separated rows. */
function sql(bins, s, statement, { allowFailure = false } = {}) {
  const r = spawnSync(bins.client, ['--no-defaults', '-uroot', `--socket=${s.socket}`, '-N', '-B', '-e', statement], { encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0 && !allowFailure) throw new Error(`${s.name} (${HOST}:${s.port}): ${statement}: ${(r.stderr || r.error?.message || '').trim()}`);
  return r.status === 0 ? r.stdout.trim() : null;
}

export async function startMariadbPair({ port = DEFAULT_PORT, log = silent, stopOnExit = true } = {}) {
  const bins = mariadbBinaries();
  if (bins === null) throw new Error('no MariaDB server binaries (mariadbd, mariadb-install-db, mariadb); install mariadb-server (Debian)');
  stopMariadbPair({ port });
  const l = layout(port);
  for (const s of [l.primary, l.replica]) {
    if (await portOpen(s.port)) throw new Error(`something already listens on ${HOST}:${s.port}, not started by this script; choose another port (LEASEHOLD_TEST_MYSQL_REPLICA_PORT)`);
  }
  const user = serverUser();
  mkdirSync(l.dir, { recursive: true });
  if (user !== null) spawnSync('chown', [user, l.dir]);
  // The exit handler stops what was started even when the caller never gets to stop().
  const onExit = () => stopMariadbPair({ port });
  if (stopOnExit) process.once('exit', onExit);
  const userArgs = user === null ? [] : [`--user=${user}`];
  try {
    // One install, copied: mariadb-install-db takes seconds, a copy of its 30 MB a fraction of one.
    // A root with no password on loopback, as the machine's own server has: the tests' URLs name root.
    const r = spawnSync(
      bins.install,
      // --tmpdir: the bootstrap server clears its tmpdir's #sql* files too (the machine's MariaDB uses /tmp).
      ['--no-defaults', `--datadir=${l.primary.data}`, `--tmpdir=${l.dir}`, ...userArgs, '--auth-root-authentication-method=normal', '--skip-test-db', '--skip-name-resolve', '--innodb-log-file-size=16M'],
      { encoding: 'utf8' },
    );
    if (r.status !== 0) throw new Error(`${bins.install} failed: ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join('\n')}`);
    const cp = spawnSync('cp', ['-a', l.primary.data, l.replica.data], { encoding: 'utf8' });
    if (cp.status !== 0) throw new Error(`could not copy the installed data dir: ${cp.stderr.trim()}`);
    const start = async (s, extra) => {
      // --no-defaults first: nothing from /etc/mysql (the machine's port, socket, data dir) applies.
      const args = [
        '--no-defaults',
        `--datadir=${s.data}`,
        ...userArgs,
        `--port=${s.port}`,
        `--bind-address=${HOST}`,
        `--socket=${s.socket}`,
        `--pid-file=${join(l.dir, `${s.name}.server.pid`)}`,
        `--log-error=${s.log}`,
        // Its own temporary directory: a starting server removes every #sql* file in its tmpdir,
        // and the machine's MariaDB keeps its internal temporary tables in /tmp.
        `--tmpdir=${l.dir}`,
        `--server-id=${s.serverId}`,
        '--skip-name-resolve',
        // Small and unsafe on a crash of the machine: a test server. A kill -9 of the server
        // alone loses nothing once a commit returns (the OS still has the writes).
        '--innodb-buffer-pool-size=32M',
        '--innodb-log-file-size=16M',
        '--innodb-flush-log-at-trx-commit=2',
        '--sync-binlog=0',
        '--performance-schema=OFF',
        '--gtid-strict-mode=1',
        ...extra,
      ];
      const out = openSync(join(l.dir, `${s.name}.out`), 'a');
      const child = spawn(bins.server, args, { detached: true, stdio: ['ignore', out, out] });
      closeSync(out);
      child.unref();
      if (child.pid === undefined) throw new Error(`could not start the ${s.name}; see ${s.log}`);
      writeFileSync(s.pidFile, `${child.pid}\n`);
      let exited = null;
      child.once('exit', (code, signal) => {
        exited = code ?? signal;
      });
      const deadline = Date.now() + 30_000;
      while (sql(bins, s, 'SELECT 1', { allowFailure: true }) === null) {
        if (exited !== null) throw new Error(`the ${s.name} exited (${exited}) before it answered; last log lines:\n${tail(s.log)}`);
        if (Date.now() > deadline) throw new Error(`the ${s.name} did not answer within 30s; last log lines:\n${tail(s.log)}`);
        await sleep(100);
      }
    };
    await Promise.all([
      start(l.primary, [`--log-bin=${join(l.primary.data, 'bin')}`, '--binlog-format=ROW']),
      // read_only until promoted; it does not stop root (SUPER), which is why leasehold's
      // connector reads @@read_only at session setup instead of waiting for error 1290.
      start(l.replica, ['--read-only=1', '--skip-slave-start', `--relay-log=${join(l.replica.data, 'relay')}`]),
    ]);
    sql(
      bins,
      l.replica,
      `CHANGE MASTER TO MASTER_HOST='${HOST}', MASTER_PORT=${l.primary.port}, MASTER_USER='root', MASTER_PASSWORD='', ` +
        'MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE',
    );
    sql(bins, l.primary, `CREATE DATABASE ${DATABASE}`);
  } catch (err) {
    stopMariadbPair({ port });
    process.off('exit', onExit);
    throw err;
  }

  const gtid = () => ({
    primary: sql(bins, l.primary, 'SELECT @@gtid_binlog_pos', { allowFailure: true }),
    replica: sql(bins, l.replica, 'SELECT @@gtid_current_pos', { allowFailure: true }),
  });
  /** Until the replica has applied everything the primary has written (MASTER_GTID_WAIT). */
  const waitReplicaCaughtUp = (timeoutS = 20) => {
    const pos = sql(bins, l.primary, 'SELECT @@gtid_binlog_pos');
    const r = sql(bins, l.replica, `SELECT MASTER_GTID_WAIT('${pos}', ${timeoutS})`);
    if (r !== '0') throw new Error(`the replica did not apply ${pos} within ${timeoutS}s (it is at ${gtid().replica}); see ${l.replica.log}`);
    return pos;
  };
  const pair = {
    database: DATABASE,
    primaryPort: l.primary.port,
    replicaPort: l.replica.port,
    primaryUrl: `mysql://root@${HOST}:${l.primary.port}/${DATABASE}`,
    replicaUrl: `mysql://root@${HOST}:${l.replica.port}/${DATABASE}`,
    /** Both, the primary first: what a client that must follow a failover is given. */
    url: `mysql://root@${HOST}:${l.primary.port},${HOST}:${l.replica.port}/${DATABASE}`,
    dir: l.dir,
    gtid,
    waitReplicaCaughtUp,
    /**
     * The replica keeps receiving the primary's binlog but applies none of it: what it holds at
     * promotion is what it had applied, and RESET SLAVE ALL throws the rest away (a lagging
     * replica promoted after its primary died).
     */
    stopReplicaSql: () => void sql(bins, l.replica, 'STOP SLAVE SQL_THREAD'),
    /** A crash: SIGKILL, no shutdown, nothing more sent to the replica. */
    killPrimary: () => killNow(l.primary),
    /** The replica becomes a writable primary of its own. */
    promote: () => void sql(bins, l.replica, 'STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0'),
    /** SQL on one of them, over its socket. */
    sql: (which, statement) => sql(bins, which === 'primary' ? l.primary : l.replica, statement),
    stop: () => {
      stopMariadbPair({ port });
      process.off('exit', onExit);
    },
  };
  log(`[mariadb-pair] primary ${HOST}:${l.primary.port}, async replica ${HOST}:${l.replica.port}${user === null ? '' : ` (as ${user})`} in ${l.dir}`);
  return pair;
}

async function main(cmd, p) {
  const port = p === undefined ? DEFAULT_PORT : Number(p);
  switch (cmd) {
    case 'start': {
      // From the command line the servers outlive this script: stop them with `stop`.
      const pair = await startMariadbPair({ port, log: console.log, stopOnExit: false });
      console.log(pair.url);
      return;
    }
    case 'stop':
      stopMariadbPair({ port });
      return;
    default:
      console.error('usage: node scripts/services/mariadb-pair.mjs start|stop [port]');
      process.exitCode = 2;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2], process.argv[3]).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
