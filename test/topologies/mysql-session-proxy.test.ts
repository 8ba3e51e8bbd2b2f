/**
 * Liveness 'session' on MySQL/MariaDB through a proxy that listens on its server's own port
 * number (another address), as ProxySQL or MaxScale on a host of their own listen on 3306: the
 * `@@port` comparison cannot tell it from the server, and an idle proxy that keeps one server
 * connection per client passes the "two statements, one connection id" check too. The client
 * port the server sees is the proxy's, not this process's socket's: refused, LivenessError
 * 'pooler'. Its own MariaDB (scripts/services/mariadb-pair.mjs, port
 * LEASEHOLD_TEST_MYSQL_PROXY_PORT, default 27230, and the next), the proxy on 127.0.0.2.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { MysqlStore } from '../../src/backends/mysql/store.js';
import { LivenessError } from '../../src/core/errors.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { TcpProxy } from '../helpers/proxy.js';
import { ROOT } from './tls-helpers.js';

const PORT = Number(process.env['LEASEHOLD_TEST_MYSQL_PROXY_PORT'] ?? 27230);
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'mysql').split(',').includes('mysql');

interface Pair {
  primaryUrl: string;
  stop(): void;
}

void describe("liveness 'session' on MySQL through a proxy on the server's port number", { skip: wanted ? false : 'mysql not selected' }, () => {
  let pair: Pair;
  let proxy: TcpProxy;
  before(async () => {
    const mod = (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'mariadb-pair.mjs')).href)) as {
      startMariadbPair(o: { port: number }): Promise<Pair>;
    };
    pair = await mod.startMariadbPair({ port: PORT });
    proxy = await new TcpProxy('127.0.0.1', PORT).start(PORT, '127.0.0.2');
  });
  after(async () => {
    await proxy?.stop();
    pair?.stop();
  });

  void it('is refused (LivenessError pooler): the server sees the proxy\'s client port; straight to the server it is accepted', async () => {
    const direct = pair.primaryUrl;
    const viaProxy = new URL(direct);
    viaProxy.hostname = '127.0.0.2';
    assert.equal(viaProxy.port, String(PORT));
    const setup = await MysqlStore.create({ url: direct });
    await setup.migrate();
    await setup.close();

    const lh = new Leasehold({ store: await MysqlStore.create({ url: viaProxy.toString() }), closeStore: true });
    try {
      await assert.rejects(lh.lease('job', { ttl: '30s', liveness: 'session' }).acquire({ wait: '5s' }), (err: Error) => {
        assert.ok(err instanceof LivenessError, `${err.name}: ${err.message}`);
        assert.equal(err.why, 'pooler');
        assert.match(err.message, /client port \d+, this process's socket is on port \d+/);
        return true;
      });
    } finally {
      await lh.close();
    }
    const ok = new Leasehold({ store: await MysqlStore.create({ url: direct }), closeStore: true });
    try {
      const term = await ok.lease('job', { ttl: '30s', liveness: 'session' }).acquire({ wait: '5s' });
      assert.ok(term.token > 0n);
    } finally {
      await ok.close();
    }
  });
});
