#!/usr/bin/env node
// A throwaway PostgreSQL primary and streaming standby on loopback, for failover tests (stop the
// primary, promote the standby). Asynchronous by default; synchronous on request (the primary's
// synchronous_standby_names names the standby, synchronous_commit = on: a commit returns once
// the standby has flushed it, and waits while the standby is down). Needs the PostgreSQL server
// binaries (Debian: postgresql-15 or newer); run as root, it runs the servers as the postgres user.
//
//   node scripts/services/pg-replicas.mjs start [port] [--sync]   primary on port (default 24432), standby on port+1
//   node scripts/services/pg-replicas.mjs stop [port]             stop both, remove their data
//
// From a test: const r = await startPgReplicas({ port: 24432, synchronous: true });
//   r.primaryUrl, r.standbyUrl; r.stopPrimary(); r.stopStandby(); r.startStandby(); r.promote(); r.stop()
import { execFileSync, spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

function binDir() {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))) : [];
  versions.sort((a, b) => Number(b) - Number(a));
  if (versions.length === 0) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql; install postgresql (Debian)');
  return join(root, versions[0], 'bin');
}

const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;

function run(bin, args, opts = {}) {
  const cmd = join(binDir(), bin);
  const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args];
  return execFileSync(file, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...opts });
}

function layout(port) {
  const dir = join(tmpdir(), `leasehold-pg-replicas-${port}`);
  return { dir, primary: join(dir, 'primary'), standby: join(dir, 'standby'), log: (n) => join(dir, `${n}.log`) };
}

function pgCtl(dataDir, logFile, action, extra = []) {
  const r = spawnSync(
    asRoot ? 'runuser' : join(binDir(), 'pg_ctl'),
    [...(asRoot ? ['-u', 'postgres', '--', join(binDir(), 'pg_ctl')] : []), '-D', dataDir, '-l', logFile, '-w', '-t', '30', ...extra, action],
    { encoding: 'utf8' },
  );
  return r.status === 0;
}

/** Stops both servers (if running) and removes the data. */
export function stopPgReplicas({ port = 24432 } = {}) {
  const l = layout(port);
  for (const [name, d] of [['standby', l.standby], ['primary', l.primary]]) {
    if (existsSync(join(d, 'postmaster.pid'))) pgCtl(d, l.log(name), 'stop', ['-m', 'immediate']);
  }
  rmSync(l.dir, { recursive: true, force: true });
}

/** The standby's name in synchronous_standby_names (its walreceiver's application_name is its cluster_name). */
const STANDBY_NAME = 'leasehold_standby';

function psql(port, sql) {
  return run('psql', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-d', 'postgres', '-Atc', sql]).trim();
}

export async function startPgReplicas({ port = 24432, synchronous = false, log = () => {} } = {}) {
  stopPgReplicas({ port });
  const l = layout(port);
  mkdirSync(l.dir, { recursive: true });
  if (asRoot) execFileSync('chown', ['postgres:postgres', l.dir]);
  run('initdb', ['-D', l.primary, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  // Asynchronous streaming replication, loopback only; fsync off: a test server, not a store.
  const conf = [
    `port = ${port}`,
    "listen_addresses = '127.0.0.1'",
    `unix_socket_directories = '${l.dir}'`,
    'wal_level = replica',
    'max_wal_senders = 5',
    'fsync = off',
    'synchronous_commit = on',
    '',
  ].join('\n');
  appendFileSync(join(l.primary, 'postgresql.conf'), conf);
  if (!pgCtl(l.primary, l.log('primary'), 'start')) throw new Error(`the primary did not start; see ${l.log('primary')}`);
  run('psql', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-c', 'CREATE DATABASE test']);
  run('pg_basebackup', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-D', l.standby, '-R', '-X', 'stream', '-c', 'fast']);
  appendFileSync(join(l.standby, 'postgresql.conf'), `port = ${port + 1}\ncluster_name = '${STANDBY_NAME}'\n`);
  const startStandby = () => {
    if (!pgCtl(l.standby, l.log('standby'), 'start')) throw new Error(`the standby did not start; see ${l.log('standby')}`);
  };
  startStandby();
  if (synchronous) {
    // Only now: set before the standby existed, CREATE DATABASE above would have waited for it.
    psql(port, `ALTER SYSTEM SET synchronous_standby_names = '${STANDBY_NAME}'`);
    psql(port, 'SELECT pg_reload_conf()');
    for (let i = 0; ; i++) {
      if (psql(port, `SELECT sync_state FROM pg_stat_replication WHERE application_name = '${STANDBY_NAME}'`) === 'sync') break;
      if (i > 100) throw new Error(`the standby did not become synchronous; see ${l.log('standby')}`);
      await new Promise((res) => setTimeout(res, 100));
    }
  }
  log(`[pg-replicas] primary 127.0.0.1:${port}, ${synchronous ? 'synchronous' : 'async'} standby 127.0.0.1:${port + 1} (${l.dir})`);
  return {
    primaryUrl: `postgres://postgres@127.0.0.1:${port}/test`,
    standbyUrl: `postgres://postgres@127.0.0.1:${port + 1}/test`,
    /** A crash: no shutdown checkpoint, nothing more sent to the standby. */
    stopPrimary: () => pgCtl(l.primary, l.log('primary'), 'stop', ['-m', 'immediate']),
    stopStandby: () => pgCtl(l.standby, l.log('standby'), 'stop', ['-m', 'fast']),
    startStandby,
    promote: () => {
      if (!pgCtl(l.standby, l.log('standby'), 'promote')) throw new Error(`the standby was not promoted; see ${l.log('standby')}`);
    },
    /** The standby's replication state as the primary sees it ('sync', 'async', or '' when it is not connected). */
    syncState: () => psql(port, `SELECT sync_state FROM pg_stat_replication WHERE application_name = '${STANDBY_NAME}'`),
    stop: () => stopPgReplicas({ port }),
  };
}

async function main(cmd, ...args) {
  const synchronous = args.includes('--sync');
  const p = args.find((a) => a !== '--sync');
  const port = p === undefined ? 24432 : Number(p);
  switch (cmd) {
    case 'start': {
      const r = await startPgReplicas({ port, synchronous, log: console.log });
      console.log(r.primaryUrl);
      console.log(r.standbyUrl);
      return;
    }
    case 'stop':
      stopPgReplicas({ port });
      return;
    default:
      console.error('usage: node scripts/services/pg-replicas.mjs start|stop [port] [--sync]');
      process.exitCode = 2;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2], ...process.argv.slice(3)).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
