/**
 * redis+sentinel:// URLs: the Sentinels, the master name and the database are parsed without a
 * server, and every malformed part is a ConfigError that names it and shows a correct URL.
 * Connecting through Sentinel is tested in test/topologies/redis-sentinel.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import { parseRedisUrl } from '../../src/backends/redis/connect.js';
import { ioredisSentinelOptions, parseSentinelUrl } from '../../src/backends/redis/sentinel.js';
import { RedisStore } from '../../src/backends/redis/store.js';

const EXAMPLE = /redis\+sentinel:\/\/\[user:password@\]host1:26379,host2:26379,host3:26379\/mymaster/;

const refused = (url: string, pattern: RegExp, example = true): void => {
  assert.throws(
    () => parseRedisUrl(url),
    (e: unknown) => {
      assert.ok(e instanceof ConfigError, `${url}: ${String(e)}`);
      assert.match(e.message, pattern, url);
      if (example) assert.match(e.message, EXAMPLE, `${url}: the message shows a correct URL`);
      assert.doesNotMatch(e.message, /s3cret/, `${url}: the password is not in the message`);
      return true;
    },
  );
};

void describe('redis+sentinel:// URLs', () => {
  void it('name the Sentinels, the master, the database and the credentials', () => {
    const t = parseSentinelUrl('redis+sentinel://app:s3cret@10.0.0.1:26379,sentinel-2,[::1]:26380/mymaster/3?prefix=jobs');
    assert.deepEqual(t.sentinels, [
      { host: '10.0.0.1', port: 26379 },
      { host: 'sentinel-2', port: 26379 },
      { host: '::1', port: 26380 },
    ]);
    assert.equal(t.name, 'mymaster');
    assert.equal(t.db, 3);
    assert.equal(t.username, 'app');
    assert.equal(t.password, 's3cret');
    assert.equal(t.tls, false);
    assert.equal(t.prefix, 'jobs');
    const p = parseRedisUrl('redis+sentinel://app:s3cret@10.0.0.1:26379,sentinel-2/mymaster/3?prefix=jobs');
    assert.equal(p.prefix, 'jobs');
    assert.equal(p.url, 'redis+sentinel://app:s3cret@10.0.0.1:26379,sentinel-2/mymaster/3');
    assert.equal(p.redacted, 'redis+sentinel://app:***@10.0.0.1:26379,sentinel-2/mymaster/3');
  });

  void it('default to database 0, no credentials, and decode %-escaped ones', () => {
    const t = parseSentinelUrl('redis+sentinel://127.0.0.1:26400/mymaster');
    assert.equal(t.db, undefined);
    assert.equal(t.username, undefined);
    assert.equal(t.password, undefined);
    const o = ioredisSentinelOptions(t, undefined, 1000, () => 1);
    assert.equal(o['db'], 0);
    assert.equal(o['role'], 'master');
    assert.equal(o['failoverDetector'], true);
    assert.equal('password' in o, false);
    assert.equal(parseSentinelUrl('redis+sentinel://:p%40ss%2Fw@h/m/').password, 'p@ss/w');
    assert.equal(parseSentinelUrl('redis+sentinel://:p%40ss%2Fw@h/m/').username, undefined);
  });

  void it('drop the connection on READONLY (a demoted primary), and never resend the command', () => {
    const o = ioredisSentinelOptions(parseSentinelUrl('redis+sentinel://h/m'), undefined, 1000, () => 1);
    const reconnect = o['reconnectOnError'] as (e: Error) => unknown;
    assert.equal(reconnect(new Error("READONLY You can't write against a read only replica.")), 1);
    assert.equal(reconnect(new Error('ERR something else')), false);
  });

  void it('take TLS files on rediss+sentinel://, for the Sentinels and the servers', () => {
    const t = parseSentinelUrl('rediss+sentinel://h1,h2/mymaster?cacert=/ca.pem&prefix=x');
    assert.equal(t.tls, true);
    assert.deepEqual(t.tlsPaths, { cacert: '/ca.pem' });
    assert.equal(parseRedisUrl('rediss+sentinel://h1,h2/mymaster?cacert=/ca.pem&prefix=x').url, 'rediss+sentinel://h1,h2/mymaster?cacert=%2Fca.pem');
    const ca = Buffer.from('x');
    const o = ioredisSentinelOptions(t, { ca }, 1000, () => 1);
    assert.equal(o['enableTLSForSentinelMode'], true);
    assert.deepEqual(o['tls'], { ca });
    assert.deepEqual(o['sentinelTLS'], { ca });
    // No files: TLS with the system's roots, still TLS.
    assert.deepEqual(ioredisSentinelOptions(parseSentinelUrl('rediss+sentinel://h/m'), undefined, 1000, () => 1)['tls'], {});
  });

  void it('refuse a URL with no Sentinel, no master name, a bad port or a bad database, showing a correct one', () => {
    refused('redis+sentinel:///mymaster', /names no Sentinel/);
    refused('redis+sentinel://user:s3cret@/mymaster', /names no Sentinel/);
    refused('redis+sentinel://h1:26379,h2:26379', /names no master/);
    refused('redis+sentinel://h1:26379/', /names no master/);
    refused('redis+sentinel://h1:26379//0', /names no master/);
    refused('redis+sentinel://h1:26379,h2:abc/mymaster', /Sentinel h2 the port "abc"; a port is 1-65535/);
    refused('redis+sentinel://h1:0/mymaster', /the port "0"/);
    refused('redis+sentinel://h1:70000/mymaster', /the port "70000"/);
    refused('redis+sentinel://h1:/mymaster', /the port ""/);
    refused('redis+sentinel://h1,,h2/mymaster', /empty Sentinel address \(a stray comma\?\)/);
    refused('redis+sentinel://:s3cret@h1:1:2/mymaster', /not host\[:port\]/);
    refused('redis+sentinel://h1/my%20master', /names the master "my master"/);
    refused('redis+sentinel://h1/mymaster/x', /"x" where the database number goes/);
    refused('redis+sentinel://h1/mymaster/-1', /"-1" where the database number goes/);
    refused('redis+sentinel://h1/mymaster/0/1', /more than a master name and a database number/);
    refused('redis+sentinel://h1/mymaster/16', /database 16 is out of range: .*use 0-15/, false);
  });

  void it('refuse unknown or repeated parameters, TLS files without TLS, a fragment and a bad prefix', () => {
    refused('redis+sentinel://h1/mymaster?prefx=a', /parameter "prefx" is not understood/, false);
    refused('redis+sentinel://h1/mymaster?prefix=a&prefix=b', /parameter "prefix" is given twice/, false);
    refused('redis+sentinel://:s3cret@h1/mymaster?cacert=/ca.pem', /TLS files .* but the redis\+sentinel:\/\/ scheme; write rediss\+sentinel:\/\//, false);
    refused('rediss+sentinel://h1/mymaster?cert=/c.pem', /cert= without key=/, false);
    refused('redis+sentinel://:s3cret@h1/mymaster#x', /#fragment/, false);
    refused('redis+sentinel://h1/mymaster?prefix=a%20b', /prefix "a b" is not allowed/, false);
  });

  void it('are dispatched to the Redis store, and a plain Redis URL still points at Sentinel for Sentinel', async () => {
    // Parsing fails before any connection: the scheme reached the Redis store's parser.
    await assert.rejects(openStore('redis+sentinel://h1:26379'), (e: unknown) => e instanceof ConfigError && /names no master/.test(e.message));
    await assert.rejects(openStore('rediss+sentinel://h1/m/99'), (e: unknown) => e instanceof ConfigError && /database 99 is out of range/.test(e.message));
    assert.throws(() => parseRedisUrl('http://h/0'), (e: unknown) => e instanceof ConfigError && /for Sentinel, write redis\+sentinel:\/\//.test(e.message));
  });

  void it('refuse node-redis for Sentinel, telling the user to install ioredis', async () => {
    await assert.rejects(
      RedisStore.create({ url: 'redis+sentinel://127.0.0.1:1/mymaster', clientPackage: 'redis' }),
      (e: unknown) => e instanceof ConfigError && /needs the ioredis package.*npm install ioredis/.test(e.message),
    );
  });
});
