#!/usr/bin/env node
// Throwaway TLS servers on loopback, for the TLS topology tests (test/topologies/tls.test.ts)
// and for trying leasehold's TLS URL parameters by hand. Every server gets its certificates
// from makeCerts(), made by openssl into a directory the caller owns (a test's temp dir).
//
//   node scripts/services/tls.mjs certs DIR            ca.pem, server.pem/-key.pem (127.0.0.1,
//                                                      localhost), client.pem/-key.pem, and
//                                                      other-ca.pem (a CA nobody signed with)
//   node scripts/services/tls.mjs etcd DIR PORT        etcd, client-cert-auth, on PORT (peer PORT+1)
//   node scripts/services/tls.mjs redis DIR PORT       redis-server with only a TLS port
//   node scripts/services/tls.mjs postgres DIR PORT    a pg_createcluster cluster with ssl=on
//   node scripts/services/tls.mjs mariadb DIR PORT     mariadbd (mariadb-install-db) with require_secure_transport
//
// Or from a test: `const certs = makeCerts(dir); const s = await startEtcdTls({ dir, port, certs })`
// then `await s.stop()`. Pids are recorded in DIR; stop only kills a recorded pid that is still
// the server started there (pids get reused).
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, closeSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { commandLine, killPid, readPid } from './proc.mjs';

const HOST = '127.0.0.1';
const silent = () => {};

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  if (r.error !== undefined || r.status !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.error?.message ?? `exit ${r.status}`}): ${r.stderr}`);
  }
  return r.stdout;
}

/**
 * A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, all signed
 * by that CA; plus a second CA that signed nothing (to present as the wrong trust root).
 * Returns the paths.
 */
export function makeCerts(dir) {
  mkdirSync(dir, { recursive: true });
  const p = (f) => join(dir, f);
  const ossl = (...args) => run('openssl', args, { cwd: dir });
  for (const ca of ['ca', 'other-ca']) {
    ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', `/CN=leasehold test ${ca}`,
      '-keyout', p(`${ca}-key.pem`), '-out', p(`${ca}.pem`));
  }
  const leaf = (name, cn, ext) => {
    writeFileSync(p(`${name}.ext`), ext);
    ossl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${cn}`, '-keyout', p(`${name}-key.pem`), '-out', p(`${name}.csr`));
    ossl('x509', '-req', '-in', p(`${name}.csr`), '-CA', p('ca.pem'), '-CAkey', p('ca-key.pem'), '-CAcreateserial',
      '-days', '2', '-extfile', p(`${name}.ext`), '-out', p(`${name}.pem`));
  };
  leaf('server', 'localhost', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n');
  leaf('client', 'leasehold', 'extendedKeyUsage=clientAuth\n');
  return {
    dir,
    ca: p('ca.pem'),
    otherCa: p('other-ca.pem'),
    serverCert: p('server.pem'),
    serverKey: p('server-key.pem'),
    clientCert: p('client.pem'),
    clientKey: p('client-key.pem'),
  };
}

/** Alive and its command line names `marker` (its data dir or config file). */
function isOurs(pid, marker) {
  return commandLine(pid)?.some((a) => a.includes(marker)) === true;
}

function tail(file, lines = 15) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** Waits until something accepts TCP connections on port (the TLS handshake is the client's business). */
async function waitForPort(port, what, logFile, timeoutMs = 20_000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const ok = await new Promise((resolve) => {
      const s = connect({ host: HOST, port }, () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} did not listen on ${HOST}:${port} within ${timeoutMs}ms; log:\n${tail(logFile)}`);
}

/** Spawns a detached server, records its pid under dir/<name>.pid, and returns a stop(). */
async function daemon({ dir, name, bin, args, port, marker, log, spawnOptions = {} }) {
  const pidFile = join(dir, `${name}.pid`);
  const old = readPid(pidFile);
  if (old !== null && isOurs(old, marker)) await killPid(old, () => !isOurs(old, marker));
  const logFile = join(dir, `${name}.log`);
  const out = openSync(logFile, 'a');
  const child = spawn(bin, args, { detached: true, stdio: ['ignore', out, out], ...spawnOptions });
  closeSync(out);
  child.unref();
  if (child.pid === undefined) throw new Error(`could not start ${name}; see ${logFile}`);
  writeFileSync(pidFile, `${child.pid}\n`);
  log(`[tls] ${name} pid ${child.pid} on ${HOST}:${port}`);
  await waitForPort(port, name, logFile);
  const pid = child.pid;
  return {
    pid,
    logFile,
    async stop() {
      if (isOurs(pid, marker)) await killPid(pid, () => !isOurs(pid, marker));
    },
  };
}

function which(names, hint) {
  for (const n of names) if (existsSync(n)) return n;
  throw new Error(`none of ${names.join(', ')} exists; ${hint}`);
}

/** One etcd member serving clients over TLS on port, requiring a client certificate signed by the CA. */
export async function startEtcdTls({ dir, port, certs, log = silent }) {
  const bin = which(['/usr/bin/etcd', '/usr/local/bin/etcd'], 'install etcd-server');
  const dataDir = join(dir, `etcd-${port}.data`);
  rmSync(dataDir, { recursive: true, force: true });
  const args = [
    '--name', `tls${port}`,
    '--data-dir', dataDir,
    '--listen-client-urls', `https://${HOST}:${port}`,
    '--advertise-client-urls', `https://${HOST}:${port}`,
    '--listen-peer-urls', `http://${HOST}:${port + 1}`,
    '--initial-advertise-peer-urls', `http://${HOST}:${port + 1}`,
    '--initial-cluster', `tls${port}=http://${HOST}:${port + 1}`,
    '--cert-file', certs.serverCert,
    '--key-file', certs.serverKey,
    '--trusted-ca-file', certs.ca,
    '--client-cert-auth',
    '--logger', 'zap',
    '--log-level', 'warn',
  ];
  const d = await daemon({ dir, name: `etcd-${port}`, bin, args, port, marker: dataDir, log });
  return { ...d, endpoint: `${HOST}:${port}` };
}

/** redis-server with TLS only (no plain port); clients must present a certificate when requireClientCert. */
export async function startRedisTls({ dir, port, certs, requireClientCert = false, log = silent }) {
  const bin = which(['/usr/bin/redis-server', '/usr/local/bin/redis-server'], 'install redis-server');
  const workDir = join(dir, `redis-${port}.data`);
  mkdirSync(workDir, { recursive: true });
  const args = [
    '--port', '0',
    '--bind', HOST,
    '--tls-port', String(port),
    '--tls-cert-file', certs.serverCert,
    '--tls-key-file', certs.serverKey,
    '--tls-ca-cert-file', certs.ca,
    '--tls-auth-clients', requireClientCert ? 'yes' : 'no',
    '--dir', workDir,
    '--save', '',
    '--appendonly', 'no',
  ];
  return daemon({ dir, name: `redis-${port}`, bin, args, port, marker: `${port}`, log, spawnOptions: { cwd: workDir } });
}

function pgVersion() {
  const out = run('pg_lsclusters', ['-h']);
  const versions = out.split('\n').map((l) => l.split(/\s+/)[0]).filter((v) => /^\d+$/.test(v ?? ''));
  if (versions.length === 0) throw new Error('no PostgreSQL installed (pg_lsclusters lists no cluster)');
  return versions.sort((a, b) => Number(b) - Number(a))[0];
}

/**
 * A PostgreSQL cluster of its own (pg_createcluster, trust auth on loopback, ssl=on with the
 * server certificate), named lh_tls_<port>. stop() drops it again, data and config.
 */
export async function startPostgresSsl({ dir, port, certs, log = silent }) {
  const version = pgVersion();
  const name = `lh_tls_${port}`;
  spawnSync('pg_dropcluster', ['--stop', version, name], { encoding: 'utf8' });
  // The server reads its key as the postgres user, and refuses a key others can read.
  const sslDir = join(dir, `pg-${port}-ssl`);
  mkdirSync(sslDir, { recursive: true, mode: 0o700 });
  for (const [from, to] of [[certs.serverCert, 'server.pem'], [certs.serverKey, 'server-key.pem'], [certs.ca, 'ca.pem']]) {
    copyFileSync(from, join(sslDir, to));
  }
  const uid = Number(run('id', ['-u', 'postgres']).trim());
  const gid = Number(run('id', ['-g', 'postgres']).trim());
  for (const f of ['', 'server.pem', 'server-key.pem', 'ca.pem']) chownSync(join(sslDir, f), uid, gid);
  run('chmod', ['600', join(sslDir, 'server-key.pem')]);
  run('chmod', ['o+x', dir]);
  run('pg_createcluster', [version, name, '-p', String(port), '--start-conf', 'manual', '--', '--auth=trust']);
  // pg_createcluster's -o quotes values unevenly (an IP address is written bare, a path twice
  // quoted): the settings go in a conf.d file instead, which Debian's postgresql.conf includes.
  writeFileSync(
    `/etc/postgresql/${version}/${name}/conf.d/leasehold-tls.conf`,
    [
      `listen_addresses = '${HOST}'`,
      'ssl = on',
      `ssl_cert_file = '${join(sslDir, 'server.pem')}'`,
      `ssl_key_file = '${join(sslDir, 'server-key.pem')}'`,
      `ssl_ca_file = '${join(sslDir, 'ca.pem')}'`,
      '',
    ].join('\n'),
  );
  run('pg_ctlcluster', [version, name, 'start']);
  log(`[tls] postgres ${version}/${name} on ${HOST}:${port}`);
  await waitForPort(port, `postgres ${name}`, `/var/log/postgresql/postgresql-${version}-${name}.log`);
  return {
    name,
    async stop() {
      spawnSync('pg_dropcluster', ['--stop', version, name], { encoding: 'utf8' });
    },
  };
}

/** Debian's MariaDB server binaries, or null when they are not installed. */
export function mariadbTlsBinaries() {
  const first = (paths) => paths.find((x) => existsSync(x));
  const server = first(['/usr/sbin/mariadbd', '/usr/sbin/mysqld']);
  const install = first(['/usr/bin/mariadb-install-db', '/usr/bin/mysql_install_db']);
  const client = first(['/usr/bin/mariadb', '/usr/bin/mysql']);
  return server && install && client ? { server, install, client } : null;
}

/**
 * A MariaDB of its own (a data dir made by mariadb-install-db under DIR), listening on PORT with
 * ssl-cert/ssl-key/ssl-ca and require_secure_transport: a TCP session that is not TLS is refused
 * (3159), so every connection that works, a store's named-lock connections included, is
 * encrypted. Root without a password, and a database `leasehold` (made over the socket, which
 * counts as secure). Run as root, the server runs as the user `mysql` (it refuses root without
 * --user=root), which owns its data dir and a copy of the key. The machine's own MariaDB is
 * never touched.
 */
export async function startMariadbTls({ dir, port, certs, log = silent }) {
  const bins = mariadbTlsBinaries();
  if (bins === null) throw new Error('no MariaDB server binaries (mariadbd, mariadb-install-db, mariadb); apt-get install mariadb-server');
  const base = join(dir, `mariadb-${port}`);
  const data = join(base, 'data');
  const socket = join(base, 'mysqld.sock');
  const pidFile = join(base, 'server.pid');
  const logFile = join(base, 'error.log');
  mkdirSync(base, { recursive: true, mode: 0o700 });
  for (const [from, to] of [[certs.serverCert, 'server.pem'], [certs.serverKey, 'server-key.pem'], [certs.ca, 'ca.pem']]) copyFileSync(from, join(base, to));
  const asRoot = process.getuid?.() === 0;
  const userArgs = asRoot ? ['--user=mysql'] : [];
  if (asRoot) {
    run('chmod', ['o+x', dir]);
    run('chown', ['-R', 'mysql', base]);
  }
  // --tmpdir: the bootstrap server clears its tmpdir's #sql* files too (the machine's MariaDB uses /tmp).
  run(bins.install, ['--no-defaults', `--datadir=${data}`, `--tmpdir=${base}`, ...userArgs, '--auth-root-authentication-method=normal', '--skip-test-db', '--skip-name-resolve']);
  const args = [
    '--no-defaults',
    `--datadir=${data}`,
    ...userArgs,
    `--port=${port}`,
    `--bind-address=${HOST}`,
    `--socket=${socket}`,
    `--pid-file=${pidFile}`,
    `--log-error=${logFile}`,
    // Its own temporary directory: a starting server removes every #sql* file in its tmpdir,
    // and the machine's MariaDB keeps its internal temporary tables in /tmp.
    `--tmpdir=${base}`,
    '--skip-name-resolve',
    '--innodb-buffer-pool-size=16M',
    '--performance-schema=OFF',
    `--ssl-cert=${join(base, 'server.pem')}`,
    `--ssl-key=${join(base, 'server-key.pem')}`,
    `--ssl-ca=${join(base, 'ca.pem')}`,
    '--require-secure-transport=ON',
  ];
  const out = openSync(join(base, 'server.out'), 'a');
  const child = spawn(bins.server, args, { detached: true, stdio: ['ignore', out, out] });
  closeSync(out);
  child.unref();
  writeFileSync(join(base, 'started.pid'), `${child.pid}\n`);
  const ours = () => commandLine(child.pid)?.includes(`--datadir=${data}`) === true;
  const stop = async () => {
    if (ours()) await killPid(child.pid, () => !ours(), { timeoutMs: 10_000 });
    rmSync(base, { recursive: true, force: true });
  };
  try {
    await waitForPort(port, `mariadbd on ${base}`, logFile, 30_000);
    // Listening precedes accepting logins by a moment: the socket answers once it is ready.
    const end = Date.now() + 30_000;
    for (;;) {
      const r = spawnSync(bins.client, ['--no-defaults', '-uroot', `--socket=${socket}`, '-e', 'CREATE DATABASE IF NOT EXISTS leasehold'], { encoding: 'utf8' });
      if (r.status === 0) break;
      if (Date.now() > end) throw new Error(`mariadbd on ${base} did not accept a login: ${r.stderr}\n${tail(logFile)}`);
      await new Promise((res) => setTimeout(res, 100));
    }
  } catch (err) {
    await stop();
    throw err;
  }
  log(`[tls] mariadb on ${HOST}:${port} (${base})`);
  return { url: `mysql://root@${HOST}:${port}/leasehold`, socket, client: bins.client, stop };
}

async function main(cmd, dir, port) {
  const log = (m) => console.log(m);
  if (dir === undefined) throw new Error('usage: node scripts/services/tls.mjs certs|etcd|redis|postgres|stop DIR [PORT]');
  const certs = () => (existsSync(join(dir, 'ca.pem')) ? {
    dir, ca: join(dir, 'ca.pem'), otherCa: join(dir, 'other-ca.pem'), serverCert: join(dir, 'server.pem'),
    serverKey: join(dir, 'server-key.pem'), clientCert: join(dir, 'client.pem'), clientKey: join(dir, 'client-key.pem'),
  } : makeCerts(dir));
  switch (cmd) {
    case 'certs':
      console.log(certs());
      return;
    case 'etcd':
      await startEtcdTls({ dir, port: Number(port ?? 26300), certs: certs(), log });
      return;
    case 'redis':
      await startRedisTls({ dir, port: Number(port ?? 26310), certs: certs(), log });
      return;
    case 'postgres':
      await startPostgresSsl({ dir, port: Number(port ?? 26320), certs: certs(), log });
      return;
    case 'mariadb':
      await startMariadbTls({ dir, port: Number(port ?? 3317), certs: certs(), log });
      return;
    default:
      throw new Error('usage: node scripts/services/tls.mjs certs|etcd|redis|postgres|mariadb DIR [PORT]');
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2], process.argv[3], process.argv[4]).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
