/**
 * etcd over TLS with client-certificate auth (etcd --client-cert-auth), certificates made by
 * openssl in a temp dir: the etcds:// URL's cacert=, cert= and key= connect; a missing or
 * non-PEM file is a ConfigError naming it (before any connection); a refused handshake is a
 * StoreUnavailableError that says TLS and what to check; the CLI takes the same URL.
 * Port: LEASEHOLD_TEST_ETCD_TLS_PORT (default 26300; peer port +1).
 */
import assert from 'node:assert/strict';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ConfigError, StoreUnavailableError } from '../../src/core/errors.js';
import { cli, firstError, freshCerts, randomName, roundTrip, tlsServices, type Certs, type Server } from './tls-helpers.js';

const PORT = Number(process.env['LEASEHOLD_TEST_ETCD_TLS_PORT'] ?? 26300);
const hasEtcd = existsSync('/usr/bin/etcd') || existsSync('/usr/local/bin/etcd');
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'etcd').split(',').includes('etcd');
const skip = !wanted ? 'etcd not selected' : !hasEtcd ? 'no etcd binary (apt-get install etcd-server)' : false;

void describe('etcd over TLS with client certificates (etcds://?cacert=&cert=&key=)', { skip }, () => {
  let certs: Certs;
  let server: Server | undefined;
  let base: string;
  const url = (q: string): string => `${base}?prefix=${randomName('lhtls')}&${q}`;

  before(async () => {
    certs = await freshCerts();
    server = await (await tlsServices()).startEtcdTls({ dir: certs.dir, port: PORT, certs });
    base = `etcds://127.0.0.1:${PORT}`;
  });
  after(async () => {
    await server?.stop();
    if (certs !== undefined) rmSync(certs.dir, { recursive: true, force: true });
  });

  void it('connects with the CA and a client certificate, and does real work', async () => {
    const token = await roundTrip(url(`cacert=${certs.ca}&cert=${certs.clientCert}&key=${certs.clientKey}`));
    assert.ok(token > 0n);
  });

  void it('a missing or non-PEM file is a ConfigError naming the file', async () => {
    const missing = join(certs.dir, 'no-such-ca.pem');
    const e1 = await firstError(url(`cacert=${missing}&cert=${certs.clientCert}&key=${certs.clientKey}`));
    assert.ok(e1 instanceof ConfigError, String(e1));
    assert.match(e1.message, /cacert=.*no-such-ca\.pem cannot be read \(ENOENT\)/);

    const notPem = join(certs.dir, 'not-pem.txt');
    writeFileSync(notPem, 'not a certificate\n');
    const e2 = await firstError(url(`cacert=${notPem}`));
    assert.ok(e2 instanceof ConfigError, String(e2));
    assert.match(e2.message, /not-pem\.txt holds no PEM certificate/);

    // The server's key with the client's certificate: refused before any handshake.
    const e3 = await firstError(url(`cacert=${certs.ca}&cert=${certs.clientCert}&key=${certs.serverKey}`));
    assert.ok(e3 instanceof ConfigError, String(e3));
    assert.match(e3.message, /key values mismatch/);

    const e4 = await firstError(url(`cacert=${certs.ca}&cert=${certs.clientCert}`));
    assert.ok(e4 instanceof ConfigError, String(e4));
    assert.match(e4.message, /cert= without key=/);

    const e5 = await firstError(`etcd://127.0.0.1:${PORT}?cacert=${certs.ca}`);
    assert.ok(e5 instanceof ConfigError, String(e5));
    assert.match(e5.message, /write etcds:\/\//);
  });

  void it('a refused handshake is retryable and says TLS: no client certificate, or the wrong CA', async () => {
    const noClientCert = await firstError(url(`cacert=${certs.ca}&timeout=3000`));
    assert.ok(noClientCert instanceof StoreUnavailableError, String(noClientCert));
    assert.match(noClientCert.message, /TLS handshake with etcd failed.*cert= and key=/s);

    const wrongCa = await firstError(url(`cacert=${certs.otherCa}&cert=${certs.clientCert}&key=${certs.clientKey}&timeout=3000`));
    assert.ok(wrongCa instanceof StoreUnavailableError, String(wrongCa));
    assert.match(wrongCa.message, /TLS handshake with etcd failed.*(verify|certificate)/s);
  });

  void it('the CLI takes the same URL', async () => {
    const good = url(`cacert=${certs.ca}&cert=${certs.clientCert}&key=${certs.clientKey}`);
    const m = await cli(['migrate', '--store', good]);
    assert.equal(m.code, 0, m.stderr);
    const s = await cli(['status', '--store', good]);
    assert.equal(s.code, 0, s.stderr);

    const bad = await cli(['status', '--store', url(`cacert=${join(certs.dir, 'gone.pem')}`)]);
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /cacert=.*gone\.pem cannot be read/);

    const refused = await cli(['status', '--store', url(`cacert=${certs.ca}&timeout=3000`)]);
    assert.equal(refused.code, 3, refused.stderr);
    assert.match(refused.stderr, /TLS handshake with etcd failed/);
  });
});
