/**
 * PostgreSQL with ssl=on (a pg_createcluster cluster of its own, certificates made by openssl in
 * a temp dir): sslmode=verify-full with sslrootcert= connects (and the session is TLS, by
 * pg_stat_ssl); the wrong CA is a StoreUnavailableError that says TLS; a missing file is a
 * ConfigError naming the parameter; the CLI takes the same URL.
 * Port: LEASEHOLD_TEST_PG_SSL_PORT (default 26320). Needs root (pg_createcluster, chown).
 */
import assert from 'node:assert/strict';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { ConfigError, StoreUnavailableError } from '../../src/core/errors.js';
import { cli, firstError, freshCerts, randomName, roundTrip, tlsServices, type Certs, type Server } from './tls-helpers.js';

const PORT = Number(process.env['LEASEHOLD_TEST_PG_SSL_PORT'] ?? 26320);
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'postgres').split(',').includes('postgres');
const canCreate = existsSync('/usr/bin/pg_createcluster') && process.getuid?.() === 0;
const skip = !wanted ? 'postgres not selected' : !canCreate ? 'needs pg_createcluster and root' : false;

void describe('PostgreSQL over TLS (sslmode=verify-full&sslrootcert=)', { skip }, () => {
  let certs: Certs;
  let server: Server | undefined;
  const base = `postgres://postgres@127.0.0.1:${PORT}/postgres`;
  const url = (q: string): string => `${base}?schema=${randomName('lh_ssl_')}&${q}`;

  before(async () => {
    certs = await freshCerts();
    server = await (await tlsServices()).startPostgresSsl({ dir: certs.dir, port: PORT, certs });
  });
  after(async () => {
    await server?.stop();
    if (certs !== undefined) rmSync(certs.dir, { recursive: true, force: true });
  });

  void it('verify-full with the CA connects, over TLS', async () => {
    const good = url(`sslmode=verify-full&sslrootcert=${certs.ca}`);
    assert.ok((await roundTrip(good)) > 0n);
    // The same URL, straight through pg: the session really is encrypted.
    const c = new pg.Client({ connectionString: good.replace(/schema=[^&]*&/, '') });
    await c.connect();
    try {
      const r = await c.query<{ ssl: boolean }>('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
      assert.equal(r.rows[0]?.ssl, true);
    } finally {
      await c.end();
    }
  });

  void it('the wrong CA, or none, is a StoreUnavailableError that says TLS', async () => {
    for (const q of [`sslmode=verify-full&sslrootcert=${certs.otherCa}`, 'sslmode=verify-full']) {
      const e = await firstError(url(q));
      assert.ok(e instanceof StoreUnavailableError, `${q}: ${String(e)}`);
      assert.match(e.message, /TLS connection to PostgreSQL failed.*sslrootcert=/);
    }
  });

  void it('a missing file, or a certificate without its key, is a ConfigError naming it', async () => {
    const e1 = await firstError(url(`sslmode=verify-full&sslrootcert=${join(certs.dir, 'gone.pem')}`));
    assert.ok(e1 instanceof ConfigError, String(e1));
    assert.match(e1.message, /sslrootcert=.*gone\.pem cannot be read \(ENOENT\)/);
    const e2 = await firstError(url(`sslmode=verify-full&sslrootcert=${certs.ca}&sslcert=${certs.clientCert}`));
    assert.ok(e2 instanceof ConfigError, String(e2));
    assert.match(e2.message, /sslcert= without sslkey=/);
  });

  void it('the CLI takes the same URL', async () => {
    const good = url(`sslmode=verify-full&sslrootcert=${certs.ca}`);
    const m = await cli(['migrate', '--store', good]);
    assert.equal(m.code, 0, m.stderr);
    const s = await cli(['status', '--store', good]);
    assert.equal(s.code, 0, s.stderr);
    const bad = await cli(['status', '--store', url(`sslmode=verify-full&sslrootcert=${certs.otherCa}`)]);
    assert.equal(bad.code, 3, bad.stderr);
    assert.match(bad.stderr, /TLS connection to PostgreSQL failed/);
  });
});
