/**
 * libpq's multi-host PostgreSQL URLs (src/backends/postgres/multi-host.ts): the parsing, and,
 * on the shared test server, the choice of host by target_session_attrs, the error when no
 * host qualifies, and a read-only server's answer (SQLSTATE 25006) taken as the store being
 * unavailable for that call, never as a claim that landed. Failover between real replicas:
 * test/topologies/pg-multi-host.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, StoreUnavailableError } from '../../src/core/errors.js';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { parsePostgresUrl } from '../../src/backends/postgres/url.js';
import { leavesHost } from '../../src/backends/postgres/multi-host.js';
import { selectedStores } from '../helpers/stores.js';

const refused = (url: string, pattern: RegExp): void => {
  assert.throws(
    () => parsePostgresUrl(url),
    (e: unknown) => {
      assert.ok(e instanceof ConfigError, `${url}: ${String(e)}`);
      assert.match(e.message, pattern, url);
      return true;
    },
  );
};

void describe('multi-host postgres:// URLs: parsing', () => {
  void it('a host list in the URL: one connection string per host, in order, with every other parameter', () => {
    const p = parsePostgresUrl('postgres://u:secret@h1:5432,h2:5433/db?target_session_attrs=read-write&schema=lh_x&sslmode=disable&application_name=app');
    assert.deepEqual(p.target, {
      attrs: 'read-write',
      urls: ['postgres://u:secret@h1:5432/db?sslmode=disable&application_name=app', 'postgres://u:secret@h2:5433/db?sslmode=disable&application_name=app'],
    });
    assert.equal(p.schema, 'lh_x');
    assert.equal(p.connectionString, 'postgres://u:secret@h1:5432,h2:5433/db?sslmode=disable&application_name=app');
    assert.doesNotMatch(p.description, /secret/);
    assert.match(p.description, /hosts in order h1:5432, h2:5433, target_session_attrs=read-write/);
  });

  void it('defaults: read-write with several hosts (a lease needs writes), any (pg as before) with one', () => {
    assert.equal(parsePostgresUrl('postgres://u@h1,h2/db').target.attrs, 'read-write');
    assert.deepEqual(parsePostgresUrl('postgres://u@h1,h2/db').target.urls, ['postgres://u@h1/db', 'postgres://u@h2/db']);
    assert.deepEqual(parsePostgresUrl('postgres://u@h/db').target, { urls: ['postgres://u@h/db'], attrs: 'any' });
    // One host with target_session_attrs is checked as libpq does: refused unless it qualifies.
    assert.deepEqual(parsePostgresUrl('postgres://u@h/db?target_session_attrs=primary').target, { urls: ['postgres://u@h/db'], attrs: 'primary' });
    assert.equal(parsePostgresUrl('postgres://u@h1,h2/db?target_session_attrs=any').target.attrs, 'any');
  });

  void it('IPv6 hosts, hosts without ports, and libpq\'s host=/port= lists', () => {
    assert.deepEqual(parsePostgresUrl('postgres://u@[::1]:5432,[::1]:5433,db3/app').target.urls, [
      'postgres://u@[::1]:5432/app',
      'postgres://u@[::1]:5433/app',
      'postgres://u@db3/app',
    ]);
    assert.deepEqual(parsePostgresUrl('postgres:///db?host=h1,h2&port=5432,5433').target.urls, [
      'postgres:///db?host=h1&port=5432',
      'postgres:///db?host=h2&port=5433',
    ]);
    assert.deepEqual(parsePostgresUrl('postgres:///db?host=h1,h2&port=6000').target.urls, ['postgres:///db?host=h1&port=6000', 'postgres:///db?host=h2&port=6000']);
  });

  void it('refuses a bad host list, naming the entry', () => {
    refused('postgres://u@h1,,h2/db', /host list "h1,,h2" has an empty entry/);
    refused('postgres://u@h1,/db', /has an empty entry/);
    refused('postgres://u@h1:abc,h2/db', /"h1:abc" in the host list "h1:abc,h2" is not a host\[:port\]/);
    refused('postgres://u@h1:0,h2/db', /"h1:0" .* has port 0/);
    refused('postgres://u@h1:70000,h2/db', /has port 70000/);
    refused('postgres://u@h1,h2 x/db', /not a host\[:port\]/);
    refused('postgres:///db?host=h1,,h2', /host=.* has an empty entry/);
    refused('postgres:///db?host=h1,h2,h3&port=1,2', /lists 3 hosts and port= 2 ports/);
    refused('postgres:///db?host=h1,h2&port=x', /port= "x" for host "h1" is not a port/);
    refused('postgres://u@h1,h2/db?host=h3,h4', /names hosts twice/);
  });

  void it('refuses target_session_attrs a lease store cannot use, and values libpq does not know', () => {
    for (const v of ['read-only', 'standby', 'prefer-standby']) refused(`postgres://u@h1,h2/db?target_session_attrs=${v}`, /cannot take writes.*use target_session_attrs=read-write/);
    refused('postgres://u@h1,h2/db?target_session_attrs=readwrite', /"readwrite" is not a value libpq knows; use read-write/);
    refused('postgres://u@h/db?target_session_attrs=', /"" is not a value libpq knows/);
    refused('postgres://u@h1,h2/db?target_session_attrs=any&target_session_attrs=primary', /"target_session_attrs" is given twice/);
  });

  void it('mixed with other parameters: each still checked, none passed to pg that it would misread', () => {
    refused('postgres://u@h1,h2/db?target_session_attrs=read-write&connect_timeout=5', /"connect_timeout" is not understood/);
    refused('postgres://u@h1,h2/db?schema=bad-name', /schema/);
    refused('postgres://u:secret@h1,h2/db?bogus=1', /^(?!.*secret)/);
    refused('postgres://u@h1,h2/db#x', /#fragment/);
    refused('postgres://u@h1,h2/db?sslkey=/x/k.pem', /sslkey= without sslcert=/);
    for (const url of parsePostgresUrl('postgres://u@h1,h2/db?target_session_attrs=primary&schema=s&statement_timeout=5000').target.urls) {
      assert.doesNotMatch(url, /target_session_attrs|schema=/);
      assert.match(url, /statement_timeout=5000/);
    }
    // notify_url= may list hosts too; the store URL's own list is separate.
    const direct = 'postgres://u:secret@p1:5432,p2:5432/db?target_session_attrs=primary';
    const p = parsePostgresUrl(`postgres://u@bouncer:6432/db?notify_url=${encodeURIComponent(direct)}`);
    assert.deepEqual(p.target, { urls: ['postgres://u@bouncer:6432/db'], attrs: 'any' });
    assert.deepEqual(p.notifyTarget, { target: { urls: ['postgres://u:secret@p1:5432/db', 'postgres://u:secret@p2:5432/db'], attrs: 'primary' } });
    assert.doesNotMatch(p.description, /secret/);
    refused(`postgres://u@h/db?notify_url=${encodeURIComponent('postgres://u@p1,p2/db?target_session_attrs=standby')}`, /cannot take writes/);
  });

  void it('which errors make the pool choose a host again', () => {
    assert.equal(leavesHost(Object.assign(new Error('cannot execute UPDATE in a read-only transaction'), { code: '25006' })), true);
    assert.equal(leavesHost(Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' })), true);
    assert.equal(leavesHost(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })), true);
    assert.equal(leavesHost(new Error('Connection terminated unexpectedly')), true);
    assert.equal(leavesHost(new Error('Query read timeout')), true);
    // The host is fine, only busy or refusing one statement: stay.
    assert.equal(leavesHost(Object.assign(new Error('could not serialize access'), { code: '40001' })), false);
    assert.equal(leavesHost(Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' })), false);
    assert.equal(leavesHost(Object.assign(new Error('syntax error'), { code: '42601' })), false);
  });
});

const PG = process.env['LEASEHOLD_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const serverSkip = selectedStores().includes('postgres') ? false : 'postgres not selected';
// Ports of this test's own range that nothing listens on: connection refused at once.
const DEAD = [24458, 24459].map((p) => `127.0.0.1:${p}`);
const schemaName = (): string => `lh_mh_${Math.random().toString(36).slice(2, 8)}`;

void describe('multi-host postgres:// URLs: on the shared server', { skip: serverSkip }, () => {
  const base = new URL(PG);
  const live = base.host;
  const withHosts = (hosts: string[], query: string): string => `postgres://${base.username}@${hosts.join(',')}${base.pathname}?${query}`;
  // The same server with every session read-only: what a standby or a demoted primary answers.
  const readOnly = 'options=' + encodeURIComponent('-c default_transaction_read_only=on');

  void it('the first host that accepts and qualifies is used; hosts that refuse are passed over', async () => {
    const schema = schemaName();
    const store = await PostgresStore.create({ url: withHosts([...DEAD, live], `target_session_attrs=read-write&schema=${schema}`) });
    try {
      await store.migrate();
      const [r] = await store.claim([{ name: 'job', holder: 'h', ttlMs: 60_000, expect: null, nextNonce: 'n1' }]);
      assert.equal(r!.outcome, 'acquired');
      const port = await store.fleetQuery('SELECT inet_server_port() AS p', []);
      assert.equal(String(port.rows[0]!['p']), base.port || '5432');
    } finally {
      await store.fleetQuery(`DROP SCHEMA "${schema}" CASCADE`, []).catch(() => {});
      await store.close();
    }
  });

  void it('no host qualifies: StoreUnavailableError listing each host and why', async () => {
    const store = await PostgresStore.create({ url: withHosts([DEAD[0]!, live], `target_session_attrs=read-write&${readOnly}`), connectTimeoutMs: 2000 });
    try {
      await assert.rejects(store.now(), (err: Error) => {
        assert.ok(err instanceof StoreUnavailableError, String(err));
        assert.match(err.message, new RegExp(`no PostgreSQL host of the store URL is read-write \\(${DEAD[0]}: .*ECONNREFUSED.*; ${live}: read-only \\(default_transaction_read_only is on\\), not read-write\\)`));
        assert.ok(err.cause instanceof AggregateError && err.cause.errors.length === 2, 'the cause holds each host\'s error');
        return true;
      });
    } finally {
      await store.close();
    }
  });

  void it('every host refusing for a reason waiting will not fix (no such database) is a ConfigError, not an outage retried for ever', async () => {
    const store = await PostgresStore.create({ url: `postgres://${base.username}@${live},${live}/lh_no_such_db_${Math.random().toString(36).slice(2, 8)}` });
    try {
      await assert.rejects(store.now(), (err: Error) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.match(err.message, /no PostgreSQL host of the store URL could be used .*does not exist.*check the store URL/);
        return true;
      });
    } finally {
      await store.close();
    }
  });

  void it('a read-only server answers a claim with 25006: unavailable for that call (never a claim that landed), and the pool leaves it', async () => {
    const schema = schemaName();
    const setup = await PostgresStore.create({ url: `${PG}${PG.includes('?') ? '&' : '?'}schema=${schema}` });
    await setup.migrate();
    const [held] = await setup.claim([{ name: 'job', holder: 'h', ttlMs: 60_000, expect: null, nextNonce: 'n1' }]);
    assert.equal(held!.outcome, 'acquired');
    try {
      // primary passes a read-only primary (libpq's rule): the writes then fail.
      const url = withHosts([live], `target_session_attrs=primary&schema=${schema}&${readOnly}`);
      const store = await PostgresStore.create({ url });
      try {
        const renewal = store.claim([{ name: 'job', holder: 'h', ttlMs: 60_000, expect: ['n1'], nextNonce: 'n2' }]);
        await assert.rejects(renewal, (err: Error) => {
          assert.ok(err instanceof StoreUnavailableError, String(err));
          assert.match(err.message, /read-only here .*read-only transaction.*target_session_attrs=read-write/);
          return true;
        });
        const acquisition = store.claim([{ name: 'other', holder: 'h', ttlMs: 60_000, expect: null, nextNonce: 'm1' }]);
        await assert.rejects(acquisition, StoreUnavailableError);
        assert.equal((store as unknown as { pool: { host: string | undefined } }).pool.host, undefined, 'the pool on the read-only host was dropped');
      } finally {
        await store.close();
      }
      // The same with one plain host (pg's own pool): unavailable too, not a StoreError.
      const plain = await PostgresStore.create({ url: withHosts([live], `schema=${schema}&${readOnly}`) });
      try {
        await assert.rejects(plain.claim([{ name: 'job', holder: 'h', ttlMs: 60_000, expect: ['n1'], nextNonce: 'n3' }]), StoreUnavailableError);
      } finally {
        await plain.close();
      }
      // Nothing landed: the term still has the nonce it had.
      const [again] = await setup.claim([{ name: 'job', holder: 'h', ttlMs: 60_000, expect: ['n1'], nextNonce: 'n4' }]);
      assert.equal(again!.outcome, 'renewed');
    } finally {
      await setup.fleetQuery(`DROP SCHEMA "${schema}" CASCADE`, []).catch(() => {});
      await setup.close();
    }
  });
});
