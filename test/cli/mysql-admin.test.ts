/**
 * The admin commands on a MySQL URL, as a user runs them (subprocesses, the real MariaDB): what
 * test/cli/admin.test.ts proves on SQLite and PostgreSQL. Before `migrate` every command says to
 * run it; after it, `run`, `status`, `history`, `release --force` and `doctor` answer; a
 * `mariadb://` URL is the same store; and without the optional `mysql2` package a MySQL URL
 * gets one line saying `npm install mysql2`.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openStore } from '../../src/backends/index.js';
import { mysqlAdmin, selectedStores, TEST_MYSQL_URL } from '../helpers/stores.js';
import { Sandbox, assertNoLeftovers, assertOneLineError } from './helpers.js';

interface DoctorReport {
  ok: boolean;
  store: string;
  checks: Array<{ check: string; status: 'ok' | 'warn' | 'fail' | 'skip'; detail: string; skewMs?: number; latencyMs?: number }>;
}

const skip = selectedStores().includes('mysql') ? false : 'mysql not selected (LEASEHOLD_TEST_STORES)';
const sb = new Sandbox('mysql-admin');
afterEach(() => assertNoLeftovers());
after(() => sb.cleanup());

function check(report: DoctorReport, name: string): DoctorReport['checks'][number] {
  const c = report.checks.find((x) => x.check === name);
  assert.ok(c, `doctor reports "${name}": ${JSON.stringify(report.checks)}`);
  return c;
}

void describe('status, history, release, migrate and doctor on MySQL', { skip }, () => {
  const db = `lh_t_${randomBytes(5).toString('hex')}`;
  const store = TEST_MYSQL_URL.replace(/\/[^/?]*(\?|$)/, `/${db}$1`);
  before(async () => {
    await mysqlAdmin(`CREATE DATABASE ${db}`);
  });
  after(async () => {
    await mysqlAdmin(`DROP DATABASE IF EXISTS ${db}`);
  });

  void it('before migrate: run, status, history and release exit 3 and say to run `leasehold migrate`; doctor fails the schema check', async () => {
    for (const args of [
      ['run', '--name', 'early', '--store', store, '--', 'true'],
      ['status', '--store', store],
      ['history', '--store', store],
      ['release', 'early', '--force', '--reason', 'x', '--store', store],
    ]) {
      assertOneLineError(await sb.run(args), 3, /leasehold migrate/);
    }
    const d = await sb.run(['doctor', '--json', '--store', store]);
    assert.equal(d.code, 1, d.stdout + d.stderr);
    const report = JSON.parse(d.stdout) as DoctorReport;
    assert.equal(check(report, 'store').status, 'ok');
    assert.equal(check(report, 'schema').status, 'fail');
    assert.match(check(report, 'schema').detail, /leasehold migrate/);
  });

  void it('migrate creates the tables once; running it again is a no-op', async () => {
    const first = await sb.run(['migrate', '--store', store]);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /migrated from version 0 to \d+/);
    const again = await sb.run(['migrate', '--store', store]);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /already at version \d+/);
  });

  void it('run on mysql:// and on mariadb:// is one store: history lists each term with a larger token, status the lease', async () => {
    const maria = store.replace(/^mysql:/, 'mariadb:');
    for (const url of [store, maria, store]) {
      const r = await sb.run(['run', '--name', 'hist', '--store', url, '--ttl', '2s', '--quiet', '--', 'true']);
      assert.equal(r.code, 0, r.stderr);
    }
    const h = await sb.run(['history', 'hist', '--json', '--store', maria]);
    assert.equal(h.code, 0, h.stderr);
    const rows = JSON.parse(h.stdout) as Array<{ event: string; token: string }>;
    assert.deepEqual(rows.map((r) => r.event), ['acquired', 'released', 'acquired', 'released', 'acquired', 'released']);
    const tokens = rows.filter((r) => r.event === 'acquired').map((r) => BigInt(r.token));
    assert.ok(tokens[0]! < tokens[1]! && tokens[1]! < tokens[2]!, `tokens increase: ${tokens.join(' < ')}`);
    const s = await sb.run(['status', '--json', '--store', store]);
    assert.equal(s.code, 0, s.stderr);
    const listed = JSON.parse(s.stdout) as Array<{ name: string; holder: string | null }>;
    assert.deepEqual(listed.map((l) => [l.name, l.holder]), [['hist', null]]);
  });

  void it('release --force ends a live term (history says revoked, with the reason); a lease never held exits 1', async () => {
    const lib = await openStore(store);
    try {
      const [r] = await lib.claim([{ name: 'held', holder: 'someone', ttlMs: 60_000, expect: null, nextNonce: 'n-held' }]);
      assert.equal(r!.outcome, 'acquired');
      const rel = await sb.run(['release', 'held', '--force', '--reason', 'maintenance window', '--store', store]);
      assert.equal(rel.code, 0, rel.stderr);
      const [row] = await lib.list({ name: 'held' });
      assert.equal(row?.holder, null, 'the term ended');
      const last = (await lib.history({ name: 'held', limit: 1 }))[0];
      assert.equal(last?.event, 'revoked');
      assert.equal(last?.detail, 'maintenance window');
    } finally {
      await lib.close();
    }
    assertOneLineError(await sb.run(['release', 'ghost', '--force', '--reason', 'cleanup', '--store', store]), 1, /no lease named "ghost"/);
  });

  void it('doctor after migrate: reachable, schema current, durability read, clock skew measured; exit 0', async () => {
    const r = await sb.run(['doctor', '--json', '--store', store]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const report = JSON.parse(r.stdout) as DoctorReport;
    assert.match(report.store, /^mysql /);
    assert.equal(check(report, 'store').status, 'ok');
    assert.equal(check(report, 'schema').status, 'ok');
    assert.match(check(report, 'durability').detail, /innodb_flush_log_at_trx_commit = \d/);
    assert.equal(typeof check(report, 'clock-skew').skewMs, 'number');
  });

  void it('an unreachable MySQL: status exits 3 with one line, doctor exits 3', async () => {
    const dead = 'mysql://root@127.0.0.1:1/test?connect_timeout=1';
    assertOneLineError(await sb.run(['status', '--store', dead]), 3, /MySQL is unavailable/);
    const d = await sb.run(['doctor', '--store', dead]);
    assert.equal(d.code, 3);
    assert.match(d.stdout, /^fail\s+store\s+/m);
  });
});

void describe('a MySQL URL without the mysql2 package', () => {
  /** dist/test/cli/x.js -> the repository root. */
  const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
  let app: string;
  before(() => {
    // `node_modules/leasehold` as npm lays it out from the tarball, with no mysql2 anywhere up the tree.
    app = mkdtempSync(join(tmpdir(), 'lh-no-mysql2-'));
    const pkg = join(app, 'node_modules', 'leasehold');
    mkdirSync(pkg, { recursive: true });
    cpSync(join(ROOT, 'dist', 'src'), join(pkg, 'dist', 'src'), { recursive: true });
    cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
    cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  });
  after(() => rmSync(app, { recursive: true, force: true }));

  void it('every command that opens the store says, in one line, to npm install mysql2 (exit 2), before connecting', () => {
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LEASEHOLD_') && k !== 'NODE_PATH' && k !== 'NODE_OPTIONS') env[k] = v;
    env['XDG_STATE_HOME'] = join(app, 'state');
    // Port 1: nothing listens there, so an answer that needed a connection could not be this one.
    for (const url of ['mysql://root@127.0.0.1:1/test', 'mariadb://root@127.0.0.1:1/test']) {
      for (const args of [['status', '--store', url], ['migrate', '--store', url], ['run', '--name', 'x', '--store', url, '--', 'true']]) {
        const r = spawnSync(process.execPath, [join(app, 'node_modules', 'leasehold', 'bin', 'leasehold.js'), ...args], {
          cwd: app,
          env,
          encoding: 'utf8',
          timeout: 30_000,
        });
        const what = `${args[0]!} on ${url}`;
        assert.equal(r.status, 2, `${what}: exit ${r.status}; stderr: ${r.stderr}`);
        const lines = r.stderr.split('\n').filter((l) => l !== '');
        assert.equal(lines.length, 1, `${what}: one line on stderr, got:\n${r.stderr}`);
        assert.match(lines[0]!, /^leasehold: .*needs the "mysql2" package: npm install mysql2/, what);
      }
    }
  });
});
