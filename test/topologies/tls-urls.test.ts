/**
 * The URL side of TLS and PgBouncer support, without servers: which parameters each store
 * takes, what they must be given with, and what a store hands its driver.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseEtcdUrl } from '../../src/backends/etcd/client.js';
import { parsePostgresUrl } from '../../src/backends/postgres/url.js';
import { parseRedisUrl } from '../../src/backends/redis/connect.js';
import { ConfigError } from '../../src/core/errors.js';

const refused = (f: () => unknown, re: RegExp): void => {
  assert.throws(f, (err: Error) => {
    assert.ok(err instanceof ConfigError, String(err));
    assert.match(err.message, re);
    return true;
  });
};

void describe('TLS and notify_url parameters in store URLs', () => {
  void it('etcd: cacert=, cert=, key= on etcds:// only, cert and key together', () => {
    const p = parseEtcdUrl('etcds://a:2379,b:2379?cacert=/x/ca.pem&cert=/x/c.pem&key=/x/k.pem&prefix=p');
    assert.deepEqual(p.tlsFiles, { cacert: '/x/ca.pem', cert: '/x/c.pem', key: '/x/k.pem' });
    assert.deepEqual(p.hosts, ['https://a:2379', 'https://b:2379']);
    assert.equal(parseEtcdUrl('etcds://a:2379').tlsFiles, undefined);
    refused(() => parseEtcdUrl('etcd://a:2379?cacert=/x/ca.pem'), /write etcds:\/\//);
    refused(() => parseEtcdUrl('etcds://a:2379?key=/x/k.pem'), /key= without cert=/);
    refused(() => parseEtcdUrl('etcds://a:2379?cacert='), /cacert= is empty/);
    refused(() => parseEtcdUrl('etcds://a:2379?ca=/x'), /"ca" is not understood.*cacert=, cert=, key=/);
  });

  void it('redis: cacert=, cert=, key= on rediss:// only; the driver URL keeps them for createOwnedDriver', () => {
    const p = parseRedisUrl('rediss://h:6380/0?prefix=p&cacert=/x/ca.pem');
    assert.equal(p.prefix, 'p');
    assert.match(p.url, /cacert=/);
    assert.doesNotMatch(p.url, /prefix=/);
    refused(() => parseRedisUrl('redis://h:6379/0?cacert=/x/ca.pem'), /write rediss:\/\//);
    refused(() => parseRedisUrl('rediss://h:6379/0?cert=/x/c.pem'), /cert= without key=/);
  });

  void it('postgres: ssl files are read at parse time, naming the parameter', () => {
    refused(() => parsePostgresUrl('postgres://u@h/db?sslmode=verify-full&sslrootcert=/no/such/ca.pem'), /sslrootcert=\/no\/such\/ca\.pem cannot be read \(ENOENT\)/);
    refused(() => parsePostgresUrl('postgres://u@h/db?sslkey=/x/k.pem'), /sslkey= without sslcert=/);
    // libpq's "system" names the system's roots, not a file.
    assert.match(parsePostgresUrl('postgres://u@h/db?sslmode=verify-full&sslrootcert=system').connectionString, /sslrootcert=system/);
  });

  void it('postgres: notify_url= is a postgres URL (or none), taken out of the pool URL', () => {
    const direct = 'postgres://u:secret@primary:5432/db?sslmode=disable';
    const p = parsePostgresUrl(`postgres://u:secret@bouncer:6432/db?schema=s&notify_url=${encodeURIComponent(direct)}`);
    assert.equal(p.notifyUrl, direct);
    assert.doesNotMatch(p.connectionString, /notify_url/);
    assert.doesNotMatch(p.description, /secret/);
    assert.match(p.description, /LISTEN at postgres:\/\/u:\*\*\*@primary:5432/);
    assert.equal(parsePostgresUrl('postgres://u@bouncer:6432/db?notify_url=none').notifyUrl, 'none');
    assert.equal(parsePostgresUrl('postgres://u@h/db').notifyUrl, undefined);
    refused(() => parsePostgresUrl('postgres://u@h/db?notify_url=redis://x'), /not a postgres:\/\/ URL/);
    // An error that quotes the store URL masks the notify_url's password too, plain or %-encoded.
    for (const inner of ['postgres://u:secret@p/db', encodeURIComponent('postgres://u:secret@p/db')]) {
      refused(() => parsePostgresUrl(`postgres://u@h:0/db?notify_url=${inner}`), /notify_url=postgres(:|%3A).*u(:|%3A)\*\*\*(@|%40)p.*port 0/);
      assert.throws(() => parsePostgresUrl(`postgres://u@h:0/db?notify_url=${inner}`), (e: Error) => !e.message.includes('secret'));
    }
    refused(() => parsePostgresUrl(`postgres://u@h/db?notify_url=${encodeURIComponent('postgres://u@p/db?schema=x')}`), /no schema=/);
    refused(() => parsePostgresUrl(`postgres://u@h/db?notify_url=${encodeURIComponent('postgres://u@p/db?prefx=1')}`), /"prefx" is not understood/);
  });
});
