/**
 * PostgreSQL through PgBouncer in transaction mode (Debian's pgbouncer, started by
 * scripts/services/pgbouncer.mjs on its own port, in front of the shared test server).
 *
 * Leases stay correct through it: every claim and release is one statement, migrate one
 * transaction (its advisory lock is pg_advisory_xact_lock), and nothing relies on session
 * state. What does not survive transaction pooling is LISTEN: the store proves it with a probe
 * and says so (a ConfigError naming notify_url=), and a notify_url= straight to the server
 * restores prompt handover. Handover times are printed, not asserted (bench/ makes timing claims).
 * Liveness 'session' is refused through it (docs/liveness.md case 4): the connection's session is
 * not the process's, so "its session ended" would not mean "its holder died".
 *
 * Port: LEASEHOLD_TEST_PGBOUNCER_PORT (default 26330).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { ConfigError, LivenessError } from '../../src/core/errors.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Term } from '../../src/core/lease.js';
import { cli, randomName, ROOT } from './tls-helpers.js';

const PORT = Number(process.env['LEASEHOLD_TEST_PGBOUNCER_PORT'] ?? 26330);
const DIRECT = process.env['LEASEHOLD_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'postgres').split(',').includes('postgres');
const hasBouncer = existsSync('/usr/sbin/pgbouncer') || existsSync('/usr/bin/pgbouncer');
const skip = !wanted ? 'postgres not selected' : !hasBouncer ? 'no pgbouncer (apt-get install pgbouncer)' : false;
const TTL_MS = 4000;

interface Bouncer {
  stop(): Promise<void>;
}

void describe('PostgreSQL through PgBouncer, transaction pooling', { skip }, () => {
  let bouncer: Bouncer | undefined;
  const bounced = `postgres://postgres@127.0.0.1:${PORT}/test`;
  const schemas: string[] = [];
  const fresh = (): string => {
    const s = randomName('lh_pgb_');
    schemas.push(s);
    return s;
  };

  before(async () => {
    const mod = (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'pgbouncer.mjs')).href)) as {
      startPgBouncer(o: { port: number; poolMode: string }): Promise<Bouncer>;
    };
    bouncer = await mod.startPgBouncer({ port: PORT, poolMode: 'transaction' });
  });
  after(async () => {
    const c = new pg.Client({ connectionString: DIRECT });
    await c.connect();
    for (const s of schemas) await c.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await c.end();
    await bouncer?.stop();
  });

  void it('the connection really is pooled per transaction (session state does not stick)', async () => {
    // Two statements on one client connection, with other clients busy in between, land on
    // different server sessions: what the store must not rely on.
    const clients = await Promise.all(Array.from({ length: 4 }, async () => {
      const c = new pg.Client({ connectionString: bounced });
      await c.connect();
      return c;
    }));
    try {
      const pids = new Set<number>();
      for (let i = 0; i < 5; i++) {
        const r = await Promise.all(clients.map((c) => c.query<{ p: number }>('SELECT pg_backend_pid() AS p, pg_sleep(0.02)')));
        pids.add(r[0]!.rows[0]!.p);
      }
      assert.ok(pids.size > 1, `one client connection was served by ${pids.size} server session(s)`);
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  void it('migrate works through it, also two at once (pg_advisory_xact_lock, one transaction)', async () => {
    const schema = fresh();
    const url = `${bounced}?schema=${schema}`;
    const [a, b] = await Promise.all([cli(['migrate', '--store', url]), cli(['migrate', '--store', url])]);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(b.code, 0, b.stderr);
    const s = await cli(['status', '--store', url]);
    assert.equal(s.code, 0, s.stderr);
  });

  void it('a URL parameter PgBouncer will not pass on is a ConfigError, not an outage retried for ever', async () => {
    const store = await PostgresStore.create({ url: `${bounced}?schema=${fresh()}&statement_timeout=5000` });
    try {
      await assert.rejects(store.schemaStatus(), (err: Error) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.match(err.message, /refused the store URL's statement_timeout=.*ignore_startup_parameters/);
        return true;
      });
    } finally {
      await store.close();
    }
  });

  void it('without notify_url, the store proves LISTEN does not work here and says so', async () => {
    const store = await PostgresStore.create({ url: `${bounced}?schema=${fresh()}` });
    try {
      await store.migrate();
      await assert.rejects(store.watchFreed(() => {}), (err: Error) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.match(err.message, /notifications do not reach .*PgBouncer.*notify_url=/);
        return true;
      });
      // Said once, then at once (no second probe).
      const t0 = performance.now();
      await assert.rejects(store.watchFreed(() => {}), ConfigError);
      assert.ok(performance.now() - t0 < 1000);
    } finally {
      await store.close();
    }
    // Straight to the server, the same probe passes: notifications do arrive there.
    const direct = await PostgresStore.create({ url: `${DIRECT}?schema=${fresh()}` });
    try {
      await direct.migrate();
      const stop = await direct.watchFreed(() => {});
      await stop();
    } finally {
      await direct.close();
    }
  });

  void it('the conformance suite passes on postgres through it (with notify_url= to the server)', async () => {
    // The suite as its own process, pointed at PgBouncer: every store-level and engine-level
    // property it checks must hold through transaction pooling.
    const url = `${bounced}?notify_url=${encodeURIComponent(DIRECT)}`;
    const file = join(ROOT, 'dist', 'test', 'conformance', 'conformance.test.js');
    // Without the runner's NODE_TEST_CONTEXT, the child is a runner of its own, reporting TAP here.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_TEST')));
    const r = spawnSync(process.execPath, ['--test', '--test-reporter=tap', file], {
      env: { ...env, LEASEHOLD_TEST_STORES: 'postgres', LEASEHOLD_TEST_PG_URL: url },
      encoding: 'utf8',
      timeout: 180_000,
    });
    const summary = (r.stdout ?? '').split('\n').filter((l) => /^# (tests|pass|fail)|clean handover/.test(l));
    for (const l of summary) console.log(`# through PgBouncer: ${l.replace(/^#\s*(\\#\s*)?/, '')}`);
    assert.equal(r.status, 0, `conformance through PgBouncer failed:\n${(r.stdout ?? '').split('\n').filter((l) => /not ok|error/.test(l)).slice(0, 20).join('\n')}`);
    assert.ok(summary.some((l) => /^# pass [1-9]/.test(l)), 'the suite ran no tests');
  });

  void it("liveness 'session' through it is refused with a LivenessError (why 'pooler') before any term is granted", async () => {
    const url = `${bounced}?schema=${fresh()}&notify_url=${encodeURIComponent(DIRECT)}`;
    const store = await PostgresStore.create({ url });
    await store.migrate();
    const lh = new Leasehold({ store, closeStore: true });
    try {
      const lease = lh.lease('job', { ttl: '30s', liveness: 'session' });
      await assert.rejects(lease.acquire({ wait: '5s' }), (err: Error) => {
        assert.ok(err instanceof LivenessError, `${err.name}: ${err.message}`);
        assert.equal(err.why, 'pooler');
        assert.equal(err.code, 'LIVENESS');
        assert.equal(err.retryable, false);
        // It names the cause and what to do instead.
        assert.match(err.message, new RegExp(`port ${PORT}.*listens on 5432.*PgBouncer.*direct URL.*liveness 'ttl'`));
        return true;
      });
      // Refused before the first claim: no term was granted to anyone.
      assert.equal((await store.history({ name: 'job', limit: 10 })).length, 0);
      // The same lease in the default mode works through the pooler.
      const ttl = lh.lease('job', { ttl: '30s' });
      const term = await ttl.acquire({ wait: '5s' });
      assert.ok(term.token > 0n);
      await ttl.release();
    } finally {
      await lh.close();
    }
  });

  void it("liveness 'session' through a PgBouncer on its server's own port number (another address) is refused too: the server sees the pooler's client port, not ours", { timeout: 60_000 }, async () => {
    // A pooler on a host of its own commonly listens on 5432, as its server does: comparing the
    // ports cannot tell them apart. Here: a server of the test's own on 127.0.0.1:P, the pooler
    // on 127.0.0.2:P. Idle, transaction pooling serves both of the session's statements from one
    // server connection, so the two-statement check passes too.
    const p = PORT + 1;
    const own = (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'pg-server.mjs')).href)) as {
      startPgServer(o: { port: number }): Promise<{ url: string; stop(): void }>;
    };
    const mod = (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'pgbouncer.mjs')).href)) as {
      startPgBouncer(o: { port: number; poolMode: string; upstreamPort: number; listenHost: string }): Promise<Bouncer>;
    };
    const server = await own.startPgServer({ port: p });
    let pooler: Bouncer | undefined;
    try {
      pooler = await mod.startPgBouncer({ port: p, poolMode: 'transaction', upstreamPort: p, listenHost: '127.0.0.2' });
      const url = `postgres://postgres@127.0.0.2:${p}/test?schema=${fresh()}&notify_url=${encodeURIComponent(server.url)}`;
      const store = await PostgresStore.create({ url });
      await store.migrate();
      const lh = new Leasehold({ store, closeStore: true });
      try {
        await assert.rejects(lh.lease('job', { ttl: '30s', liveness: 'session' }).acquire({ wait: '5s' }), (err: Error) => {
          assert.ok(err instanceof LivenessError, `${err.name}: ${err.message}`);
          assert.equal(err.why, 'pooler');
          assert.match(err.message, /client port .* PgBouncer/);
          return true;
        });
      } finally {
        await lh.close();
      }
      // Straight to the same server the mode is accepted: the check does not refuse a direct connection.
      const directStore = await PostgresStore.create({ url: `${server.url}?schema=${fresh()}` });
      await directStore.migrate();
      const direct = new Leasehold({ store: directStore, closeStore: true });
      try {
        const term = await direct.lease('job', { ttl: '30s', liveness: 'session' }).acquire({ wait: '5s' });
        assert.ok(term.token > 0n);
      } finally {
        await direct.close();
      }
    } finally {
      await pooler?.stop();
      server.stop();
    }
  });

  void it("leasehold run --liveness session through it exits 2 with the reason on one line, and never starts the command", async () => {
    const schema = fresh();
    const url = `${bounced}?schema=${schema}&notify_url=${encodeURIComponent(DIRECT)}`;
    const m = await cli(['migrate', '--store', url]);
    assert.equal(m.code, 0, m.stderr);
    const r = await cli(['run', '--store', url, '--name', 'job', '--ttl', '30s', '--liveness', 'session', '--', process.execPath, '-e', 'console.log("STARTED")']);
    assert.equal(r.code, 2, `exit ${r.code}\n${r.stdout}\n${r.stderr}`);
    assert.doesNotMatch(r.stdout, /STARTED/);
    assert.match(r.stderr, /liveness 'session' needs a direct connection to PostgreSQL.*PgBouncer/);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  });

  for (const mode of ['notify_url (direct)', 'notify_url=none (expiry)', 'no notify_url (expiry, warned)'] as const) {
    void it(`two holders, a release, the follower takes over: ${mode}`, async () => {
      const schema = fresh();
      const q = mode.startsWith('notify_url (') ? `&notify_url=${encodeURIComponent(DIRECT)}` : mode.startsWith('notify_url=none') ? '&notify_url=none' : '';
      const url = `${bounced}?schema=${schema}${q}`;
      const setup = await PostgresStore.create({ url: `${bounced}?schema=${schema}` });
      await setup.migrate();
      await setup.close();

      const warnings: string[] = [];
      const logger = { debug() {}, info() {}, error() {}, warn: (_o: object, m?: string) => void warnings.push(m ?? '') };
      const terms: { who: string; token: bigint; at: number }[] = [];
      const open = async (who: string) => {
        const store = await PostgresStore.create({ url });
        const lh = new Leasehold({ store, closeStore: true, logger });
        const elector = lh.elect('job', {
          onElected(term: Term) {
            terms.push({ who, token: term.token, at: performance.now() });
          },
        }, { ttl: TTL_MS });
        return { lh, elector };
      };
      const a = await open('a');
      for (let i = 0; terms.length === 0; i++) {
        assert.ok(i < 200, 'a never led');
        await sleep(25);
      }
      const b = await open('b');
      await sleep(500); // b is following (busy) by now
      assert.equal(terms.length, 1);
      const releasedAt = performance.now();
      await a.elector.stop(); // releases
      for (let i = 0; terms.length < 2; i++) {
        assert.ok(i < 400, 'b never took over');
        await sleep(10);
      }
      const handover = Math.round(terms[1]!.at - releasedAt);
      console.log(`# PgBouncer (transaction) ${mode}: follower took over ${handover}ms after the release (TTL ${TTL_MS}ms)`);
      assert.equal(terms[1]!.who, 'b');
      assert.ok(terms[1]!.token > terms[0]!.token, `tokens ${terms[0]!.token} then ${terms[1]!.token}`);
      await b.elector.stop();
      await a.lh.close();
      await b.lh.close();
      if (mode.startsWith('no notify_url')) assert.ok(warnings.some((w) => /could not listen/.test(w)), `warnings: ${warnings.join('; ')}`);
      else assert.deepEqual(warnings.filter((w) => /could not listen/.test(w)), []);
    });
  }
});
