/**
 * Redis over TLS (redis-server --tls-port, no plain port), certificates made by openssl in a
 * temp dir: rediss://...?cacert= connects with either client package; with
 * --tls-auth-clients yes, cert= and key= are needed; a missing file is a ConfigError naming
 * it, a refused handshake a StoreUnavailableError carrying the TLS reason; the CLI takes the
 * same URL. Ports: LEASEHOLD_TEST_REDIS_TLS_PORT (default 26310, and +1 for the mTLS server).
 */
import assert from 'node:assert/strict';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRedisStore } from '../../src/backends/redis/index.js';
import { ConfigError, StoreUnavailableError } from '../../src/core/errors.js';
import { cli, firstError, freshCerts, randomName, roundTrip, tlsServices, type Certs, type Server } from './tls-helpers.js';

const PORT = Number(process.env['LEASEHOLD_TEST_REDIS_TLS_PORT'] ?? 26310);
const hasRedis = existsSync('/usr/bin/redis-server') || existsSync('/usr/local/bin/redis-server');
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'redis').split(',').includes('redis');

void describe('Redis over TLS (rediss://?cacert=[&cert=&key=])', { skip: !wanted ? 'redis not selected' : !hasRedis ? 'no redis-server' : false }, () => {
  let certs: Certs;
  const servers: Server[] = [];
  const url = (port: number, q: string): string => `rediss://127.0.0.1:${port}/0?prefix=${randomName('lhtls')}&${q}`;
  let tlsMissing: string | undefined;

  before(async () => {
    certs = await freshCerts();
    const mod = await tlsServices();
    try {
      servers.push(await mod.startRedisTls({ dir: certs.dir, port: PORT, certs }));
      servers.push(await mod.startRedisTls({ dir: certs.dir, port: PORT + 1, certs, requireClientCert: true }));
    } catch (err) {
      // A redis-server built without TLS (BUILD_TLS=no) refuses --tls-port: say so, do not fail.
      if (!/tls/i.test((err as Error).message)) throw err;
      tlsMissing = `this redis-server has no TLS: ${(err as Error).message.split('\n')[0]}`;
    }
  });
  after(async () => {
    for (const s of servers) await s.stop();
    if (certs !== undefined) rmSync(certs.dir, { recursive: true, force: true });
  });

  void it('connects with the CA, through ioredis and through node-redis', async (t) => {
    if (tlsMissing !== undefined) return t.skip(tlsMissing);
    assert.ok((await roundTrip(url(PORT, `cacert=${certs.ca}`))) > 0n);
    for (const clientPackage of ['ioredis', 'redis'] as const) {
      // The pub/sub connection (a duplicate of the client) must carry the TLS options too.
      const store = await createRedisStore({ url: url(PORT, `cacert=${certs.ca}`), clientPackage });
      try {
        await store.migrate();
        let heard!: (name: string) => void;
        const freed = new Promise<string>((resolve) => (heard = resolve));
        const stop = await store.watchFreed!((name) => heard(name));
        const [r] = await store.claim([{ name: 'n', holder: 'h', ttlMs: 5000, expect: null, nextNonce: 'x' }]);
        assert.equal(r?.outcome, 'acquired', clientPackage);
        assert.equal(await store.release({ name: 'n', holder: 'h', expect: ['x'] }), true);
        assert.equal(await freed, 'n', clientPackage);
        await stop();
      } finally {
        await store.close();
      }
    }
  });

  void it('with client-certificate auth: cert= and key= connect, none is refused', async (t) => {
    if (tlsMissing !== undefined) return t.skip(tlsMissing);
    assert.ok((await roundTrip(url(PORT + 1, `cacert=${certs.ca}&cert=${certs.clientCert}&key=${certs.clientKey}`))) > 0n);
    const refused = await firstError(url(PORT + 1, `cacert=${certs.ca}`));
    assert.ok(refused instanceof StoreUnavailableError, String(refused));
  });

  void it('the wrong CA is a StoreUnavailableError that gives the TLS reason', async (t) => {
    if (tlsMissing !== undefined) return t.skip(tlsMissing);
    const e = await firstError(url(PORT, `cacert=${certs.otherCa}`));
    assert.ok(e instanceof StoreUnavailableError, String(e));
    assert.match(e.message, /certificate/);
  });

  void it('bad files and parameters are ConfigErrors before any connection', async () => {
    const e1 = await firstError(url(PORT, `cacert=${join(certs.dir, 'gone.pem')}`));
    assert.ok(e1 instanceof ConfigError, String(e1));
    assert.match(e1.message, /cacert=.*gone\.pem cannot be read \(ENOENT\)/);
    const e2 = await firstError(url(PORT, `cacert=${certs.ca}&key=${certs.clientKey}`));
    assert.ok(e2 instanceof ConfigError, String(e2));
    assert.match(e2.message, /key= without cert=/);
    const e3 = await firstError(`redis://127.0.0.1:${PORT}/0?cacert=${certs.ca}`);
    assert.ok(e3 instanceof ConfigError, String(e3));
    assert.match(e3.message, /write rediss:\/\//);
  });

  void it('the CLI takes the same URL', async (t) => {
    if (tlsMissing !== undefined) return t.skip(tlsMissing);
    const good = url(PORT + 1, `cacert=${certs.ca}&cert=${certs.clientCert}&key=${certs.clientKey}`);
    const m = await cli(['migrate', '--store', good]);
    assert.equal(m.code, 0, m.stderr);
    const s = await cli(['status', '--store', good]);
    assert.equal(s.code, 0, s.stderr);
    const bad = await cli(['status', '--store', url(PORT, `cacert=${join(certs.dir, 'gone.pem')}`)]);
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /gone\.pem cannot be read/);
  });
});
