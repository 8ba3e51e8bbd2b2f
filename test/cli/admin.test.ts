import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { after, afterEach, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, assertOneLineError, dropSchema, freshSchema, pgUrl } from './helpers.js';

interface DoctorReport {
  ok: boolean;
  exitCode: number;
  store: string;
  checks: Array<{ check: string; status: 'ok' | 'warn' | 'fail' | 'skip'; detail: string; skewMs?: number; latencyMs?: number }>;
}

const sb = new Sandbox('admin');
afterEach(() => assertNoLeftovers());
after(() => sb.cleanup());

/** A port on which nothing listens: bound, closed, and (almost certainly) still free. */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

function check(report: DoctorReport, name: string): DoctorReport['checks'][number] {
  const c = report.checks.find((x) => x.check === name);
  assert.ok(c, `doctor reports "${name}": ${JSON.stringify(report.checks)}`);
  return c;
}

void describe('status, history, release, migrate and doctor on SQLite', () => {
  const store = `sqlite:${sb.path('admin.db')}`;

  void it('status on an empty store: [] with --json, "no leases" without', async () => {
    const j = await sb.run(['status', '--json', '--store', store]);
    assert.equal(j.code, 0, j.stderr);
    assert.deepEqual(JSON.parse(j.stdout), []);
    const t = await sb.run(['status', '--store', store]);
    assert.equal(t.code, 0);
    assert.match(t.stdout, /^no leases/);
  });

  void it('with no --store and no LEASEHOLD_STORE, the default is a SQLite file under XDG_STATE_HOME', async () => {
    const r = await sb.run(['run', '--name', 'default-store', '--ttl', '2s', '--quiet', '--', 'sh', '-c', 'echo "$LEASEHOLD_STORE"']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), `sqlite:${sb.path('state/leasehold/leasehold.db')}`);
    assert.ok(sb.has('state/leasehold/leasehold.db'));
    const s = await sb.run(['status', '--json']);
    assert.deepEqual((JSON.parse(s.stdout) as Array<{ name: string }>).map((x) => x.name), ['default-store']);
  });

  void it('history --json lists every change of holder with string tokens; --limit keeps the most recent', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await sb.run(['run', '--name', 'hist', '--store', store, '--ttl', '2s', '--quiet', '--', 'true']);
      assert.equal(r.code, 0, r.stderr);
    }
    const all = await sb.run(['history', 'hist', '--json', '--store', store]);
    const rows = JSON.parse(all.stdout) as Array<{ event: string; token: string; at: string; atMs: number; id: string }>;
    assert.deepEqual(rows.map((r) => `${r.event}:${r.token}`), ['acquired:1', 'released:1', 'acquired:2', 'released:2', 'acquired:3', 'released:3']);
    assert.ok(rows.every((r) => typeof r.token === 'string' && typeof r.id === 'string' && new Date(r.at).getTime() === r.atMs));
    const last2 = JSON.parse((await sb.run(['history', 'hist', '--json', '--limit', '2', '--store', store])).stdout) as Array<{ event: string; token: string }>;
    assert.deepEqual(last2.map((r) => `${r.event}:${r.token}`), ['acquired:3', 'released:3']);
    const text = await sb.run(['history', '--store', store]);
    assert.match(text.stdout, /^AT \(STORE CLOCK\)\s+NAME\s+EVENT/);
  });

  void it('release of a lease that never existed exits 1 with a clear line', async () => {
    const r = await sb.run(['release', 'ghost', '--force', '--reason', 'cleanup', '--store', store]);
    assertOneLineError(r, 1, /no lease named "ghost"/);
  });

  void it('migrate on SQLite reports the schema already current (it migrates itself on open)', async () => {
    const r = await sb.run(['migrate', '--store', store]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /schema already at version \d+/);
  });

  void it('doctor on SQLite: every check ok or warn, exit 0', async () => {
    const r = await sb.run(['doctor', '--json', '--store', store]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const report = JSON.parse(r.stdout) as DoctorReport;
    assert.equal(report.ok, true);
    for (const name of ['config', 'default-store', 'setpriv', 'store', 'schema', 'clock-skew']) assert.notEqual(check(report, name).status, 'fail');
    assert.equal(check(report, 'store').status, 'ok');
    assert.equal(check(report, 'schema').status, 'ok');
    assert.ok(Math.abs(check(report, 'clock-skew').skewMs ?? Infinity) < 1000, 'SQLite uses this host\'s clock');
    const text = await sb.run(['doctor', '--store', store]);
    assert.equal(text.code, 0);
    assert.match(text.stdout, /^ok\s+store\s+sqlite /m);
    assert.match(text.stdout, /^ok\s+schema\s+version \d+/m);
  });

  void it('doctor fails the config check on a bad LEASEHOLD_* variable', async () => {
    const r = await sb.run(['doctor', '--json', '--store', store], { LEASEHOLD_TTL: '3s', LEASEHOLD_RENEW: '2s' });
    assert.equal(r.code, 1);
    const c = check(JSON.parse(r.stdout) as DoctorReport, 'config');
    assert.equal(c.status, 'fail');
    assert.match(c.detail, /more than half the ttl/);
  });

  void it('doctor with an invalid store URL exits 2', async () => {
    const r = await sb.run(['doctor', '--store', 'foo://x']);
    assert.equal(r.code, 2);
    assert.match(r.stdout, /^fail\s+store\s+.*unknown scheme "foo"/m);
  });
});

void describe('status, history, release, migrate and doctor on PostgreSQL', () => {
  const schema = freshSchema();
  const store = pgUrl(schema);
  after(async () => dropSchema(schema));

  void it('before migrate: run, status and release exit 3 and say to run `leasehold migrate`', async () => {
    for (const args of [
      ['run', '--name', 'early', '--store', store, '--', 'true'],
      ['status', '--store', store],
      ['history', '--store', store],
      ['release', 'early', '--force', '--reason', 'x', '--store', store],
    ]) {
      const r = await sb.run(args);
      assertOneLineError(r, 3, /leasehold migrate/);
    }
  });

  void it('doctor before migrate: the schema check fails with the hint, exit 1', async () => {
    const r = await sb.run(['doctor', '--json', '--store', store]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const report = JSON.parse(r.stdout) as DoctorReport;
    assert.equal(check(report, 'store').status, 'ok');
    const s = check(report, 'schema');
    assert.equal(s.status, 'fail');
    assert.match(s.detail, /leasehold migrate/);
  });

  void it('migrate creates the schema once; running it again is a no-op', async () => {
    const first = await sb.run(['migrate', '--store', store]);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /migrated from version 0 to \d+/);
    const again = await sb.run(['migrate', '--store', store]);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /already at version \d+/);
  });

  void it('--schema on migrate and status picks the schema for a URL without ?schema=', async () => {
    const other = freshSchema();
    try {
      const base = new URL(store);
      base.searchParams.delete('schema');
      const m = await sb.run(['migrate', '--store', base.toString(), '--schema', other]);
      assert.equal(m.code, 0, m.stderr);
      const s = await sb.run(['status', '--json', '--store', base.toString()], { LEASEHOLD_SCHEMA: other });
      assert.equal(s.code, 0, s.stderr);
      assert.deepEqual(JSON.parse(s.stdout), []);
    } finally {
      await dropSchema(other);
    }
  });

  void it('doctor after migrate: reachable, schema current, clock skew measured; exit 0', async () => {
    const r = await sb.run(['doctor', '--json', '--store', store]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const report = JSON.parse(r.stdout) as DoctorReport;
    assert.equal(check(report, 'store').status, 'ok');
    assert.equal(typeof check(report, 'store').latencyMs, 'number');
    assert.equal(check(report, 'schema').status, 'ok');
    assert.equal(typeof check(report, 'clock-skew').skewMs, 'number');
    assert.match(report.store, /^postgres /);
  });

  void it('an unreachable PostgreSQL: run and status exit 3 with one line, doctor exits 3', async () => {
    const port = await deadPort();
    const dead = `postgres://postgres@127.0.0.1:${port}/test?schema=${schema}`;
    assertOneLineError(await sb.run(['run', '--name', 'x', '--store', dead, '--no-wait', '--', 'true']), 3, /PostgreSQL is unavailable/);
    assertOneLineError(await sb.run(['status', '--store', dead]), 3, /unavailable/);
    const d = await sb.run(['doctor', '--store', dead]);
    assert.equal(d.code, 3);
    assert.match(d.stdout, /^fail\s+store\s+/m);
  });
});
