/**
 * MySQL/MariaDB over TLS with a real server: a MariaDB of its own (mariadb-install-db in a temp
 * dir, certificates made by openssl) on LEASEHOLD_TEST_MYSQL_TLS_PORT (default 3317), started
 * with ssl-cert/ssl-key/ssl-ca and require_secure_transport, so that the server refuses every
 * TCP session that is not TLS: a store call that works, on any of the store's connections (the
 * pool, the named-lock connections of ./freed.ts), went over TLS. The machine's own MariaDB
 * (3306) is not touched.
 *
 * Proves the URL parameters of src/backends/mysql/url.ts: sslmode=verify-full|verify-ca|require
 * with cacert= (and cert=/key= for a user that requires a client certificate); the session's
 * `Ssl_cipher`; the wrong CA as a StoreUnavailableError that says TLS; a server that wants TLS
 * and did not get it as a ConfigError that says to add sslmode=.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ConfigError, StoreUnavailableError } from '../../src/core/errors.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { openStore } from '../../src/backends/index.js';
import type { MysqlStore } from '../../src/backends/mysql/store.js';
import { cli, firstError, freshCerts, randomName, roundTrip, tlsServices, type Certs } from './tls-helpers.js';

const PORT = Number(process.env['LEASEHOLD_TEST_MYSQL_TLS_PORT'] ?? 3317);
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'mysql').split(',').includes('mysql');
const binaries = (await tlsServices() as unknown as { mariadbTlsBinaries(): unknown }).mariadbTlsBinaries() !== null;
const skip = !wanted ? 'mysql not selected (LEASEHOLD_TEST_STORES)' : !binaries ? 'needs mariadbd and mariadb-install-db (apt-get install mariadb-server)' : false;
if (skip !== false) console.log(`# mysql-tls skipped: ${skip}`);

interface MariadbTls {
  url: string;
  socket: string;
  client: string;
  stop(): Promise<void>;
}

void describe('MySQL/MariaDB over TLS (sslmode=verify-full&cacert=)', { skip }, () => {
  let certs: Certs;
  let server: MariadbTls | undefined;
  const url = (q: string, user = 'root'): string => `${server!.url.replace('root@', `${user}@`)}?${q}`;
  /** One statement over the server's socket, as its root. */
  const admin = (sql: string): void => {
    const r = spawnSync(server!.client, ['--no-defaults', '-uroot', `--socket=${server!.socket}`, '-e', sql], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  };

  before(async () => {
    certs = await freshCerts();
    const tls = (await tlsServices()) as unknown as { startMariadbTls(o: { dir: string; port: number; certs: Certs }): Promise<MariadbTls> };
    server = await tls.startMariadbTls({ dir: certs.dir, port: PORT, certs });
  });
  after(async () => {
    await server?.stop();
    if (certs !== undefined) rmSync(certs.dir, { recursive: true, force: true });
  });

  void it('verify-full with the CA connects, and the session is TLS (Ssl_cipher)', async () => {
    const good = url(`sslmode=verify-full&cacert=${certs.ca}`);
    assert.ok((await roundTrip(good)) > 0n);
    const store = (await openStore(good)) as MysqlStore;
    try {
      const rows = (await store.q("SHOW SESSION STATUS LIKE 'Ssl_cipher'")) as { Value: string }[];
      assert.notEqual(rows[0]?.Value ?? '', '', 'a cipher: the session is encrypted');
      const version = (await store.q("SHOW SESSION STATUS LIKE 'Ssl_version'")) as { Value: string }[];
      console.log(`# mysql-tls: ${rows[0]!.Value} over ${version[0]?.Value}`);
    } finally {
      await store.close();
    }
  });

  void it('a follower waiting over TLS is woken by the release through its named lock, long before the expiry', async () => {
    // The named-lock connections are connections of their own (src/backends/mysql/freed.ts); the
    // server refuses any that is not TLS, and a follower that cannot wait on the lock sleeps until
    // the expiry. Bound: a sixth of the TTL, far below the expiry and far above a loaded handover.
    const good = url(`sslmode=verify-full&cacert=${certs.ca}`);
    const ttl = 30_000;
    const a = new Leasehold({ store: await openStore(good) });
    const b = new Leasehold({ store: await openStore(good) });
    try {
      const name = randomName('tls-handover-');
      const la = a.lease(name, { ttl });
      await la.acquire();
      const lb = b.lease(name, { ttl });
      const following = lb.acquire({ wait: ttl * 2 });
      await new Promise((r) => setTimeout(r, 500));
      const t0 = performance.now();
      await la.release();
      await following;
      const ms = performance.now() - t0;
      assert.ok(ms < ttl / 6, `the follower took ${ms.toFixed(0)}ms, not woken by the lock`);
      await lb.release();
    } finally {
      await a.close();
      await b.close();
    }
  });

  void it('sslmode=require encrypts without checking the certificate; verify-ca checks the CA', async () => {
    assert.ok((await roundTrip(url('sslmode=require'))) > 0n);
    assert.ok((await roundTrip(url(`sslmode=verify-ca&cacert=${certs.ca}`))) > 0n);
  });

  void it('reached by a name the certificate does not carry: verify-full is refused; verify-ca connects the pool, the named-lock connections and a lease session', async () => {
    // 127.1 is 127.0.0.1 to the resolver but not a name in the certificate (127.0.0.1, localhost).
    const other = (q: string): string => url(q).replace('@127.0.0.1:', '@127.1:');
    // mysql2 3.x checks the name only with ssl.verifyIdentity: without it this connected.
    const e = await firstError(other(`sslmode=verify-full&cacert=${certs.ca}`));
    assert.ok(e instanceof StoreUnavailableError, `verify-full checks the name: ${String(e)}`);
    assert.match(e.message, /TLS/);
    const good = other(`sslmode=verify-ca&cacert=${certs.ca}`);
    const ttl = 30_000;
    const a = new Leasehold({ store: await openStore(good) });
    const b = new Leasehold({ store: await openStore(good) });
    try {
      // The named-lock connections: a follower that cannot wait on the lock sleeps to the expiry.
      const name = randomName('tls-ca-');
      const la = a.lease(name, { ttl });
      await la.acquire();
      const lb = b.lease(name, { ttl });
      const following = lb.acquire({ wait: ttl * 2 });
      await new Promise((r) => setTimeout(r, 500));
      const t0 = performance.now();
      await la.release();
      const term = await following;
      const ms = performance.now() - t0;
      // As in the verify-full case above: far below the expiry, far above a loaded handover.
      assert.ok(ms < ttl / 6, `the follower took ${ms.toFixed(0)}ms, not woken by the lock`);
      assert.ok(term.token > 0n);
      await lb.release();
      // A lease session is a connection of its own too.
      const session = a.lease(randomName('tls-ca-s-'), { ttl, liveness: 'session' });
      await session.acquire({ wait: false });
      await session.release();
    } finally {
      await a.close();
      await b.close();
    }
  });

  void it('a CA that did not sign the server, or the system roots, is a StoreUnavailableError that says TLS and names cacert=', async () => {
    for (const q of [`sslmode=verify-full&cacert=${certs.otherCa}`, 'sslmode=verify-full', `sslmode=verify-ca&cacert=${certs.otherCa}`]) {
      const e = await firstError(url(q));
      assert.ok(e instanceof StoreUnavailableError, `${q}: ${String(e)}`);
      assert.match(e.message, /TLS connection to MySQL failed.*cacert=/, q);
    }
  });

  void it('a server that requires TLS, reached without it, is a ConfigError that says to add sslmode=', async () => {
    const e = await firstError(url('sslmode=disable'));
    assert.ok(e instanceof ConfigError, String(e));
    assert.match(e.message, /sslmode=verify-full/);
  });

  void it('a user that requires a client certificate connects with cert= and key=, and is refused without them', async () => {
    const user = randomName('lh_x509_');
    admin(`CREATE USER '${user}'@'127.0.0.1' REQUIRE X509; GRANT ALL ON leasehold.* TO '${user}'@'127.0.0.1'`);
    assert.ok((await roundTrip(url(`sslmode=verify-full&cacert=${certs.ca}&cert=${certs.clientCert}&key=${certs.clientKey}`, user))) > 0n);
    const e = await firstError(url(`sslmode=verify-full&cacert=${certs.ca}`, user));
    assert.ok(e instanceof ConfigError, String(e));
    const missing = await firstError(url(`sslmode=verify-full&cacert=${join(certs.dir, 'gone.pem')}`));
    assert.ok(missing instanceof ConfigError, String(missing));
    assert.match(missing.message, /cacert=.*gone\.pem/);
  });

  void it('the CLI takes the same URL', async () => {
    const good = url(`sslmode=verify-full&cacert=${certs.ca}`);
    const m = await cli(['migrate', '--store', good]);
    assert.equal(m.code, 0, m.stderr);
    const s = await cli(['status', '--store', good]);
    assert.equal(s.code, 0, s.stderr);
    const bad = await cli(['status', '--store', url(`sslmode=verify-full&cacert=${certs.otherCa}`)]);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /TLS connection to MySQL failed/);
  });
});
