#!/usr/bin/env node
// The machine's MariaDB on 127.0.0.1:3306, for the MySQL store's tests: started if it is
// installed and stopped, installed from Debian (mariadb-server) if it is missing. Unlike etcd,
// this is the machine's own server, not a throwaway: the tests create and drop databases of
// their own in it, and this script never stops it.
//
//   node scripts/services/mariadb.mjs ensure
//
// Or from a test runner: `await ensureMariadb({ log })` -> { ok, reason? }.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { pathToFileURL } from 'node:url';

const HOST = '127.0.0.1';
const PORT = 3306;
const DAEMON = '/usr/sbin/mariadbd';

function portOpen(timeoutMs = 500) {
  return new Promise((resolve) => {
    const s = net.connect({ host: HOST, port: PORT });
    const done = (ok) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(timeoutMs, () => done(false));
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

/** Waits until the server accepts connections (it also listens a moment before it answers). */
async function waitOpen(ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await portOpen()) return true;
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}

export async function ensureMariadb({ log = () => {} } = {}) {
  if (await portOpen()) return { ok: true, started: false };
  const root = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!existsSync(DAEMON)) {
    if (!root) return { ok: false, reason: `nothing listens on ${HOST}:${PORT} and MariaDB is not installed (installing it needs root: apt-get install mariadb-server)` };
    log('MariaDB is not installed: installing the Debian package mariadb-server');
    const apt = spawnSync('sh', ['-c', '(apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server'], { stdio: 'inherit' });
    if (apt.status !== 0) return { ok: false, reason: 'apt-get install mariadb-server failed' };
    if (!(await portOpen())) spawnSync('start-stop-daemon', ['--start', '--oknodo', '--background', '--exec', DAEMON], { stdio: 'inherit' });
    if (!(await waitOpen(30_000))) return { ok: false, reason: `mariadb-server was installed but does not listen on ${HOST}:${PORT}` };
    // A fresh Debian install lets root in through the socket only; the tests connect over TCP
    // as root with no password, as this project's machines are set up.
    spawnSync('mariadb', ['-e', "ALTER USER root@localhost IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD(''); CREATE USER IF NOT EXISTS root@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE IF NOT EXISTS test"], { stdio: 'inherit' });
    return { ok: true, started: true };
  }
  if (!root) return { ok: false, reason: `MariaDB is installed but not running on ${HOST}:${PORT}; starting it needs root` };
  log(`MariaDB is not running on ${HOST}:${PORT}: starting ${DAEMON}`);
  // As the machine starts it (the package's own datadir and socket, run as the mysql user).
  spawnSync('start-stop-daemon', ['--start', '--oknodo', '--background', '--exec', DAEMON], { stdio: 'inherit' });
  if (!(await waitOpen(30_000))) return { ok: false, reason: `${DAEMON} was started but does not listen on ${HOST}:${PORT} after 30s` };
  return { ok: true, started: true };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const r = await ensureMariadb({ log: (m) => process.stdout.write(`${m}\n`) });
  process.stdout.write(r.ok ? `MariaDB answers on ${HOST}:${PORT}\n` : `${r.reason}\n`);
  process.exit(r.ok ? 0 : 1);
}
