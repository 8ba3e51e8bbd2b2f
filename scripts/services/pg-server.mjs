#!/usr/bin/env node
// A throwaway PostgreSQL server of a test's own: its own port, its own listen addresses and
// settings (keepalive, say), which the shared server on 5432 must never be given. Needs the
// PostgreSQL server binaries (Debian: postgresql-15 or newer); run as root, it runs the server as
// the postgres user. Data under os.tmpdir()/leasehold-pg-server-<port>/, removed on stop.
//
//   node scripts/services/pg-server.mjs start <port> [listen,addresses]   default 127.0.0.1
//   node scripts/services/pg-server.mjs stop <port>
//
// From a test: const s = await startPgServer({ port, listen: ['127.0.0.1', '10.1.0.1'],
//   settings: { tcp_keepalives_idle: 1 } }); s.url (database test, trust); s.stop()
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

function run(bin, args) {
  const cmd = join(binDir(), bin);
  const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args];
  return execFileSync(file, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function pgCtl(dataDir, logFile, action, extra = []) {
  const r = spawnSync(
    asRoot ? 'runuser' : join(binDir(), 'pg_ctl'),
    [...(asRoot ? ['-u', 'postgres', '--', join(binDir(), 'pg_ctl')] : []), '-D', dataDir, '-l', logFile, '-w', '-t', '30', ...extra, action],
    { encoding: 'utf8' },
  );
  return r.status === 0;
}

function layout(port) {
  const dir = join(tmpdir(), `leasehold-pg-server-${port}`);
  return { dir, data: join(dir, 'data'), log: join(dir, 'server.log') };
}

/** Stops the server on `port` (if this script started one there) and removes its data. */
export function stopPgServer({ port }) {
  const l = layout(port);
  if (existsSync(join(l.data, 'postmaster.pid'))) pgCtl(l.data, l.log, 'stop', ['-m', 'immediate']);
  rmSync(l.dir, { recursive: true, force: true });
}

/** Starts a fresh server on `port`, listening on `listen`, with `settings` in postgresql.conf; database `test`, trust auth. */
export async function startPgServer({ port, listen = ['127.0.0.1'], settings = {} }) {
  stopPgServer({ port });
  const l = layout(port);
  mkdirSync(l.dir, { recursive: true });
  if (asRoot) execFileSync('chown', ['postgres:postgres', l.dir]);
  run('initdb', ['-D', l.data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  const conf = [
    `port = ${port}`,
    `listen_addresses = '${listen.join(',')}'`,
    `unix_socket_directories = '${l.dir}'`,
    'fsync = off',
    ...Object.entries(settings).map(([k, v]) => `${k} = ${typeof v === 'number' ? v : `'${v}'`}`),
    '',
  ].join('\n');
  appendFileSync(join(l.data, 'postgresql.conf'), conf);
  // Trust from the addresses it listens on too (a test's network namespace), nothing wider.
  appendFileSync(join(l.data, 'pg_hba.conf'), listen.map((a) => `host all all ${a.includes(':') ? a : `${a.replace(/\.\d+$/, '.0')}/24`} trust\n`).join(''));
  if (!pgCtl(l.data, l.log, 'start')) throw new Error(`PostgreSQL on ${port} did not start; see ${l.log}`);
  run('psql', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-c', 'CREATE DATABASE test']);
  return {
    url: `postgres://postgres@127.0.0.1:${port}/test`,
    log: l.log,
    stop: () => stopPgServer({ port }),
  };
}

/**
 * Restarts the server this script started on `port`, down for `downMs` between a fast shutdown and
 * the start: the chaos harness's nemesis restarts a run's own server this way, from another process
 * than the one that started it (the layout is found from the port).
 */
export async function restartPgServer({ port, downMs = 0 }) {
  const l = layout(port);
  if (!existsSync(join(l.data, 'postgresql.conf'))) throw new Error(`no PostgreSQL of scripts/services/pg-server.mjs on ${port} (${l.data})`);
  if (!pgCtl(l.data, l.log, 'stop', ['-m', 'fast'])) throw new Error(`PostgreSQL on ${port} did not stop; see ${l.log}`);
  await new Promise((resolve) => setTimeout(resolve, downMs));
  if (!pgCtl(l.data, l.log, 'start')) throw new Error(`PostgreSQL on ${port} did not start again; see ${l.log}`);
}

/** Whether this script started a server on `port` that is still there (its data dir exists). */
export function isPgServer(port) {
  return existsSync(join(layout(port).data, 'postgresql.conf'));
}

async function main(cmd, port, listen) {
  if (cmd === 'start' && port !== undefined) {
    const s = await startPgServer({ port: Number(port), ...(listen === undefined ? {} : { listen: listen.split(',') }) });
    console.log(s.url);
  } else if (cmd === 'stop' && port !== undefined) {
    stopPgServer({ port: Number(port) });
  } else {
    console.error('usage: node scripts/services/pg-server.mjs start|stop <port> [listen,addresses]');
    process.exitCode = 2;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2], process.argv[3], process.argv[4]).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
