/**
 * Store URLs: every part is checked before anything connects, and a part a store would ignore
 * or misread is a ConfigError naming it and what is accepted instead. The forms the README and
 * the tests use stay valid.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { ConfigError } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import { parseEtcdUrl } from '../../src/backends/etcd/client.js';
import { parseMysqlUrl } from '../../src/backends/mysql/url.js';
import { parsePostgresUrl } from '../../src/backends/postgres/url.js';
import { parseRedisUrl } from '../../src/backends/redis/connect.js';
import { parseSqliteUrl } from '../../src/backends/sqlite/url.js';
import { freshRedisPrefix, deleteRedisKeys } from '../helpers/redis-store.js';
import { selectedStores } from '../helpers/stores.js';

const refused = (parse: (url: string) => unknown, url: string, pattern: RegExp): void => {
  assert.throws(
    () => parse(url),
    (e: unknown) => {
      assert.ok(e instanceof ConfigError, `${url}: ${String(e)}`);
      assert.match(e.message, pattern, url);
      return true;
    },
  );
};

void describe('redis:// URLs', () => {
  void it('refuse a database index past 15, which the drivers would quietly turn into database 0', () => {
    refused(parseRedisUrl, 'redis://127.0.0.1/99999', /database 99999 is out of range: .*use 0-15 \(or pass your own client/);
    refused(parseRedisUrl, 'rediss://127.0.0.1/16', /database 16 is out of range/);
    refused(parseRedisUrl, 'redis://127.0.0.1/-1', /not a database number/);
    assert.equal(parseRedisUrl('redis://127.0.0.1:6379/15').url, 'redis://127.0.0.1:6379/15');
  });

  void it('refuse an unknown or repeated parameter, a fragment and port 0', () => {
    refused(parseRedisUrl, 'redis://127.0.0.1/0?prefx=a', /parameter "prefx" is not understood; the Redis store .*takes prefix=/);
    refused(parseRedisUrl, 'redis://127.0.0.1/0?prefix=a&prefix=b', /parameter "prefix" is given twice/);
    refused(parseRedisUrl, 'redis://127.0.0.1/0#frag', /#fragment/);
    refused(parseRedisUrl, 'redis://127.0.0.1:0/0', /port 0/);
  });

  void it('a database in range is the one used (a real Redis)', { skip: selectedStores().includes('redis') ? false : 'redis not selected' }, async () => {
    const prefix = freshRedisPrefix();
    const store = await openStore(`redis://127.0.0.1:6379/15?prefix=${prefix}`);
    const db15 = new Redis('redis://127.0.0.1:6379/15', { lazyConnect: true, maxRetriesPerRequest: 0 });
    db15.on('error', () => {});
    try {
      await store.migrate();
      assert.deepEqual(await db15.keys(`{${prefix}}:*`), [`{${prefix}}:layout`]);
    } finally {
      await store.close();
      await db15.unlink(`{${prefix}}:layout`).catch(() => 0);
      db15.disconnect();
      await deleteRedisKeys(prefix);
    }
  });
});

void describe('postgres:// URLs', () => {
  void it('refuse parameters the pg driver would silently ignore, naming the ones it takes', () => {
    refused(parsePostgresUrl, 'postgres://u@h/db?connect_timeout=5', /"connect_timeout" is not understood; the PostgreSQL store takes schema=, host=, port=.*sslmode=/);
    refused(parsePostgresUrl, 'postgres://u@h/db?schema=a&schema=b', /"schema" is given twice/);
    refused(parsePostgresUrl, 'postgres://u@h/db?shema=x', /"shema" is not understood/);
    refused(parsePostgresUrl, 'postgres://u@h/db#x', /#fragment/);
    // libpq multi-host forms are accepted (test/stores/pg-multi-host.test.ts); a bad list is refused there.
    refused(parsePostgresUrl, 'postgres://u@h1:5432,,h2:5433/db?target_session_attrs=read-write', /host list .* has an empty entry/);
    refused(parsePostgresUrl, 'postgres://u@h:0/db', /port 0/);
    refused(parsePostgresUrl, 'postgres://u:secret@h/db?bogus=1#frag', /^(?!.*secret)/);
  });

  void it('accept what people write', () => {
    for (const url of [
      'postgres://postgres@127.0.0.1:5432/test',
      'postgres://postgres@127.0.0.1:5432/test?schema=lh_x',
      'postgresql://u:p@db.internal/app?sslmode=verify-full&application_name=billing',
      'postgres:///app?host=/var/run/postgresql',
    ]) {
      assert.doesNotThrow(() => parsePostgresUrl(url), url);
    }
  });
});

void describe('mysql:// and mariadb:// URLs', () => {
  void it('refuse a malformed URL, a missing database or user, and an unusable database name', () => {
    refused(parseMysqlUrl, 'mysql:/h/db', /is not a MySQL URL; write mysql:\/\/user@host:3306\/database/);
    refused(parseMysqlUrl, 'mysql://root@h', /names no database/);
    refused(parseMysqlUrl, 'mysql://root@h/', /names no database/);
    refused(parseMysqlUrl, 'mysql://h/db', /names no user/);
    refused(parseMysqlUrl, 'mysql://root@h/d-b', /database name "d-b" is not supported/);
    refused(parseMysqlUrl, 'mysql://root@h/db#x', /#fragment/);
  });

  void it('refuse a bad port or host in the host list, on any host, and a host listed twice', () => {
    refused(parseMysqlUrl, 'mysql://root@h:0/db', /port "0" for host "h" is not a port/);
    refused(parseMysqlUrl, 'mysql://root@h:99999/db', /port "99999" for host "h" is not a port/);
    refused(parseMysqlUrl, 'mysql://root@h:abc/db', /port "abc" for host "h"/);
    refused(parseMysqlUrl, 'mysql://root@a:3306,b:x/db', /port "x" for host "b"/);
    refused(parseMysqlUrl, 'mysql://root@a:3306,,b/db', /has no host/);
    refused(parseMysqlUrl, 'mysql://root@a:3306,/db', /has no host/);
    refused(parseMysqlUrl, 'mysql://root@a,A:3306/db', /lists host a:3306 twice/);
    refused(parseMysqlUrl, 'mysql://u:secret@h:0/db', /^(?!.*secret)/);
  });

  void it('refuse an unknown or repeated parameter, naming the ones it takes', () => {
    refused(parseMysqlUrl, 'mysql://root@h/db?sslmod=require', /"sslmod" is not understood; the MySQL store takes sslmode=, cacert=, cert=, key=, connect_timeout=/);
    refused(parseMysqlUrl, 'mysql://root@h/db?schema=x', /"schema" is not understood/);
    refused(parseMysqlUrl, 'mysql://root@h/db?sslmode=require&sslmode=disable', /"sslmode" is given twice/);
    refused(parseMysqlUrl, 'mysql://root@h/db?connect_timeout=0', /connect_timeout="0" is not a number of seconds > 0/);
  });

  void it('take the four sslmode values and refuse the others', () => {
    for (const mode of ['prefer', 'allow', 'verify_ca', 'REQUIRE', '']) {
      refused(parseMysqlUrl, `mysql://root@h/db?sslmode=${mode}`, /is not one of disable, require, verify-ca, verify-full/);
    }
    refused(parseMysqlUrl, 'mysql://root@h/db?sslmode=disable&cacert=/nonexistent.pem', /sslmode=disable with TLS files/);
    assert.equal(parseMysqlUrl('mysql://root@h/db').target.ssl, undefined);
    assert.equal(parseMysqlUrl('mysql://root@h/db?sslmode=disable').target.ssl, undefined);
    for (const mode of ['require', 'verify-ca', 'verify-full'] as const) assert.equal(parseMysqlUrl(`mysql://root@h/db?sslmode=${mode}`).target.ssl?.mode, mode);
  });

  void it('read the host list in order, 3306 where no port is given', () => {
    const { target, description } = parseMysqlUrl('mysql://root@127.0.0.1:3307,127.0.0.1:3308/test?connect_timeout=1.5');
    assert.deepEqual(target.hosts, [
      { host: '127.0.0.1', port: 3307 },
      { host: '127.0.0.1', port: 3308 },
    ]);
    assert.equal(target.connectTimeoutMs, 1500);
    assert.match(description, /hosts in order 127\.0\.0\.1:3307,127\.0\.0\.1:3308/);
    const v6 = parseMysqlUrl('mariadb://u:secret@[::1]:3307,db2/app');
    assert.deepEqual(v6.target.hosts, [
      { host: '::1', port: 3307 },
      { host: 'db2', port: 3306 },
    ]);
    assert.equal(v6.target.password, 'secret');
    assert.match(v6.description, /^mariadb (?!.*secret).*hosts in order \[::1\]:3307,db2:3306/);
    assert.deepEqual(parseMysqlUrl('mysql://root@h/db').target.hosts, [{ host: 'h', port: 3306 }]);
  });
});

void describe('etcd:// URLs', () => {
  void it('refuse a bad endpoint: a repeated member, an invalid host name or address, a port out of range', () => {
    refused(parseEtcdUrl, 'etcd://127.0.0.1:2379,127.0.0.1:2379', /endpoint 127\.0\.0\.1:2379 is listed twice/);
    refused(parseEtcdUrl, 'etcd://a:2379,A', /endpoint a:2379 is listed twice/);
    refused(parseEtcdUrl, 'etcd://-bad-:2379', /"-bad-:2379" has no valid host name or IP address/);
    refused(parseEtcdUrl, 'etcd://a..b', /no valid host name/);
    refused(parseEtcdUrl, 'etcd://999.1.1.1', /no valid host name or IP address/);
    refused(parseEtcdUrl, 'etcd://[zz::1]:2379', /no valid host name or IP address/);
    refused(parseEtcdUrl, 'etcd://a:0', /port 1-65535/);
    refused(parseEtcdUrl, 'etcd://a:65536', /port 1-65535/);
  });

  void it('refuse a repeated parameter and a timeout no timer can hold', () => {
    refused(parseEtcdUrl, 'etcd://a?prefix=x&prefix=y', /"prefix" is given twice/);
    refused(parseEtcdUrl, 'etcd://a?timeout=1e3', /whole number of milliseconds from 1 to 2147483647/);
    refused(parseEtcdUrl, 'etcd://a?timeout=99999999999', /from 1 to 2147483647/);
    refused(parseEtcdUrl, 'etcd://a?tiemout=5', /"tiemout" is not understood; the etcd store takes prefix=, timeout=/);
    refused(parseEtcdUrl, 'etcd://%zz@a', /malformed %-escape/);
  });

  void it('accept what people write', () => {
    assert.deepEqual(parseEtcdUrl('etcd://127.0.0.1:2379').hosts, ['127.0.0.1:2379']);
    assert.deepEqual(parseEtcdUrl('etcd://u:secret@a:1,b?prefix=/x/&timeout=250').hosts, ['a:1', 'b:2379']);
    assert.deepEqual(parseEtcdUrl('etcds://etcd-0.etcd.svc.cluster.local:2379,[::1]:2379').hosts, [
      'https://etcd-0.etcd.svc.cluster.local:2379',
      'https://[::1]:2379',
    ]);
  });
});

void describe('sqlite: URLs', () => {
  void it('refuse parameters, which would have become part of the file name, and a host', () => {
    refused(parseSqliteUrl, 'sqlite:/tmp/leases.db?mode=ro', /has a "\?" in it; the SQLite store takes no URL parameters/);
    refused(parseSqliteUrl, 'sqlite:/tmp/leases.db#x', /has a "#" in it/);
    refused(parseSqliteUrl, 'sqlite://tmp/leases.db', /names a host; write sqlite:\/absolute\/path\.db/);
  });

  void it('accept what people write', () => {
    assert.equal(parseSqliteUrl('sqlite:/tmp/leases.db'), '/tmp/leases.db');
    assert.equal(parseSqliteUrl('sqlite:///tmp/leases.db'), '/tmp/leases.db');
    assert.equal(parseSqliteUrl('sqlite:leases.db'), 'leases.db');
    assert.equal(parseSqliteUrl('sqlite::memory:'), ':memory:');
  });
});

void describe('openStore refuses a bad part before it connects, on every scheme', () => {
  void it('with a ConfigError', async () => {
    for (const url of [
      'redis://127.0.0.1:6379/99999',
      'postgres://postgres@127.0.0.1:5432/test?connect_timeout=5',
      'etcd://127.0.0.1:2379,127.0.0.1:2379',
      'sqlite:/tmp/leases.db?mode=ro',
      'mysql://root@127.0.0.1:3306/test?sslmode=prefer',
      'mariadb://root@127.0.0.1:3307,127.0.0.1:3307/test',
    ]) {
      await assert.rejects(openStore(url), (e: unknown) => e instanceof ConfigError && e.code === 'CONFIG', url);
    }
  });
});
