/**
 * The SQLite store on either driver: node:sqlite (built into Node 22.13+ and 24) or
 * better-sqlite3 (a native package; the only one on Node 20). The same claims are run against
 * each driver this Node can load; the other is skipped with the reason (on Node 20 node:sqlite
 * does not exist; on 22/24 this checkout's better-sqlite3 is built for Node 20's ABI). The
 * conformance suite runs on whichever driver the Node picks: scripts/node-versions.mjs runs it
 * on 22 and 24, `npm test` on 20.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { FencedError, SchemaError, StoreUnavailableError } from '../../src/core/errors.js';
import { newNonce } from '../../src/core/identity.js';
import { SQLITE_DRIVERS, resolveSqliteDriver, type SqliteDriver, type SqliteDriverName } from '../../src/backends/sqlite/driver.js';
import { createSqliteFenceTable, fencedWriteSync } from '../../src/backends/sqlite/fence.js';
import { quickCheck } from '../../src/backends/sqlite/files.js';
import { loadNodeSqlite } from '../../src/backends/sqlite/node-sqlite.js';
import { SqliteStore, immediate } from '../../src/backends/sqlite/store.js';
import { assertOneLineError, Sandbox } from '../cli/helpers.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function file(name = 'leases.db'): string {
  const d = mkdtempSync(join(tmpdir(), 'lh-sqlite-driver-'));
  dirs.push(d);
  return join(d, name);
}

/** The driver, or why this Node cannot load it. */
function load(name: SqliteDriverName): SqliteDriver | string {
  try {
    return resolveSqliteDriver(name);
  } catch {
    return name === 'node:sqlite'
      ? `Node ${process.version} has no node:sqlite (22.13+ does)`
      : `better-sqlite3 does not load on Node ${process.version} (not installed, or built for another Node version)`;
  }
}
const DEFAULT: SqliteDriverName = loadNodeSqlite() !== undefined ? 'node:sqlite' : 'better-sqlite3';
const claim = (name: string, holder = 'h'): Parameters<SqliteStore['claim']>[0] => [{ name, holder, ttlMs: 30_000, expect: null, nextNonce: newNonce() }];

for (const name of SQLITE_DRIVERS) {
  const driver = load(name);
  void describe(`SQLite store on ${name}`, () => {
    /** Runs `body` with the driver, or skips with the reason it does not load here. */
    const withDriver =
      (body: (d: SqliteDriver) => Promise<void> | void) =>
      async (t: { skip(message: string): void }): Promise<void> => {
        if (typeof driver === 'string') {
          t.skip(driver);
          return;
        }
        await body(driver);
      };

    void it(
      'says which driver it runs on, and commits durably: WAL with synchronous = FULL',
      withDriver(async () => {
        const path = file();
        const store = new SqliteStore({ path, driver: name });
        const other = new SqliteStore({ path, driver: name });
        try {
          assert.equal(store.driver, name);
          assert.equal(store.database.pragma('journal_mode', { simple: true }), 'wal');
          // 2 = FULL: NORMAL could lose the last commits (a token bump) on power loss.
          assert.equal(store.database.pragma('synchronous', { simple: true }), 2);
          const [r] = await store.claim(claim('job'));
          assert.equal(r?.outcome, 'acquired');
          const [seen] = await other.list({ name: 'job' });
          assert.equal(seen?.holder, 'h', 'another connection sees the committed claim');
        } finally {
          await store.close();
          await other.close();
        }
      }),
    );

    void it(
      'tokens past 2^53 stay exact bigints through claim, list, history and the fence',
      withDriver(async () => {
        const store = new SqliteStore({ path: file(), driver: name });
        try {
          const floor = 2n ** 60n;
          await store.migrate({ minToken: floor });
          const [r] = await store.claim(claim('big'));
          assert.equal(r?.outcome, 'acquired');
          assert.equal(r?.token, floor + 1n);
          const [l] = await store.list({ name: 'big' });
          assert.equal(l?.token, floor + 1n);
          const h = await store.history({ name: 'big' });
          assert.equal(h.at(-1)?.token, floor + 1n);
          assert.equal(typeof h.at(-1)?.id, 'bigint');
          assert.equal(await store.nextToken({ name: 'big' }), floor + 2n);
          const db = store.database;
          assert.equal(fencedWriteSync(db, { resource: 'r', token: floor + 1n }, () => 'wrote'), 'wrote');
          assert.throws(
            () => fencedWriteSync(db, { resource: 'r', token: floor }, () => 'stale'),
            (e: unknown) => e instanceof FencedError && e.message.includes(String(floor + 1n)),
          );
        } finally {
          await store.close();
        }
      }),
    );

    void it(
      "another connection's write lock is seen as busy: a retryable StoreUnavailableError, then the claim lands",
      withDriver(async (d) => {
        const path = file();
        const store = new SqliteStore({ path, driver: name, busyTimeoutMs: 100 });
        const holder = new d.Database(path);
        try {
          holder.exec('BEGIN IMMEDIATE');
          await assert.rejects(store.claim(claim('locked')), (e: unknown) => {
            assert.ok(e instanceof StoreUnavailableError, String(e));
            assert.match(String((e.cause as { code?: unknown }).code), /^SQLITE_BUSY/);
            return true;
          });
          holder.exec('ROLLBACK');
          const [r] = await store.claim(claim('locked'));
          assert.equal(r?.outcome, 'acquired');
        } finally {
          holder.close();
          await store.close();
        }
      }),
    );

    void it(
      'a transaction that throws leaves nothing behind; a nested one rolls back alone',
      withDriver((d) => {
        const db = new d.Database(file());
        try {
          db.exec('CREATE TABLE t (k TEXT PRIMARY KEY)');
          const insert = db.prepare('INSERT INTO t (k) VALUES (?)');
          const failing = (k: string) => (): never => {
            insert.run(k);
            throw new Error(`${k}: rolled back`);
          };
          assert.throws(() => immediate(db, failing('a')), /a: rolled back/);
          immediate(db, () => {
            insert.run('outer');
            assert.throws(() => immediate(db, failing('inner')), /inner: rolled back/);
          });
          const rows = (db.prepare('SELECT k FROM t ORDER BY k').all() as { k: string }[]).map((r) => r.k);
          assert.deepEqual(rows, ['outer']);
          // The error codes the store's mapping reads, by the same names on both drivers.
          assert.throws(() => insert.run('outer'), { code: 'SQLITE_CONSTRAINT_PRIMARYKEY' });
          assert.throws(() => db.exec('SELECT * FROM missing'), { code: 'SQLITE_ERROR' });
        } finally {
          db.close();
        }
        assert.equal(db.open, false);
      }),
    );

    void it(
      'a file that is not a database: quick_check reports it, and the store refuses it',
      withDriver(() => {
        const path = file('garbage.db');
        writeFileSync(path, Buffer.alloc(8192, 7));
        assert.match(quickCheck(path).join(' '), /not a database/);
        assert.throws(() => new SqliteStore({ path, driver: name }), (e: unknown) => (e as { code?: string }).code === 'CONFIG' && /not a database/.test(String(e)));
        assert.throws(() => quickCheck(join(path, '..', 'absent.db')), { code: 'SQLITE_CANTOPEN' });
      }),
    );
  });
}

void describe('your own node:sqlite DatabaseSync', () => {
  const m = loadNodeSqlite();
  const skip = m === undefined ? `Node ${process.version} has no node:sqlite (22.13+ does)` : undefined;

  void it('serves as the store and as a fenced resource, and stays open after the store closes', async (t) => {
    if (m === undefined) return t.skip(skip);
    const path = file();
    const raw = new m.DatabaseSync(path);
    const store = new SqliteStore({ database: raw });
    assert.equal(store.driver, 'node:sqlite');
    assert.equal(store.path, path);
    const [r] = await store.claim(claim('own'));
    assert.equal(r?.outcome, 'acquired');
    await store.close();
    // isOpen arrived in Node 22.15: a query tells on every version.
    assert.deepEqual({ ...(raw.prepare('SELECT 1 AS one').get() as object) }, { one: 1 }, 'leasehold does not close a handle it was given');
    createSqliteFenceTable(raw);
    raw.exec('CREATE TABLE IF NOT EXISTS writes (token INTEGER)');
    fencedWriteSync(raw, { resource: 'res', token: 7n }, (db) => db.prepare('INSERT INTO writes (token) VALUES (?)').run(7n));
    assert.throws(() => fencedWriteSync(raw, { resource: 'res', token: 6n }, () => assert.fail('a stale write ran')), FencedError);
    assert.throws(() => fencedWriteSync(raw, { resource: 'res', token: 8n, table: 'nope' }, () => 0), SchemaError);
    assert.deepEqual(raw.prepare('SELECT token FROM writes').all().map((w) => (w as { token: number }).token), [7]);
    raw.close();
  });

  void it("loading it prints no ExperimentalWarning about SQLite (Node 22), and other warnings still print", (t) => {
    if (m === undefined) return t.skip(skip);
    const driverJs = new URL('../../src/backends/sqlite/driver.js', import.meta.url).href;
    const r = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { resolveSqliteDriver } = await import(${JSON.stringify(driverJs)});
         process.stdout.write(resolveSqliteDriver('node:sqlite').name);
         process.emitWarning('another experiment', 'ExperimentalWarning');`,
      ],
      { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } },
    );
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, 'node:sqlite');
    assert.doesNotMatch(r.stderr, /SQLite is an experimental feature/);
    assert.match(r.stderr, /ExperimentalWarning: another experiment/);
  });
});

void describe('choosing the driver: LEASEHOLD_SQLITE_DRIVER', () => {
  const sb = new Sandbox('sqlite-driver');
  after(() => rmSync(sb.dir, { recursive: true, force: true }));

  void it(`unset, this Node (${process.version}) uses ${DEFAULT}, and doctor says so`, async () => {
    const r = await sb.run(['doctor', '--json', '--store', `sqlite:${sb.path('a.db')}`]);
    const report = JSON.parse(r.stdout) as { checks: { check: string; status: string; detail: string; driver?: string }[] };
    const c = report.checks.find((x) => x.check === 'sqlite-driver');
    assert.equal(c?.status, 'ok', r.stdout);
    assert.equal(c?.driver, DEFAULT);
    assert.match(c?.detail ?? '', /SQLite \d+\.\d+/);
    const text = await sb.run(['doctor', '--store', `sqlite:${sb.path('a.db')}`]);
    assert.match(text.stdout, new RegExp(`^ok\\s+sqlite-driver\\s+${DEFAULT}`, 'm'));
  });

  void it('an unknown value is one line, exit 2, and nothing is created', async () => {
    const r = await sb.run(['status', '--store', `sqlite:${sb.path('b/x.db')}`], { LEASEHOLD_SQLITE_DRIVER: 'sqlite3' });
    assertOneLineError(r, 2, /LEASEHOLD_SQLITE_DRIVER is "sqlite3"; use node:sqlite, better-sqlite3 or auto/);
    assert.equal(existsSync(sb.path('b')), false);
  });

  void it('a driver this Node cannot load, when forced, is one line naming the way out; demo too', async (t) => {
    const missing = SQLITE_DRIVERS.find((n) => typeof load(n) === 'string');
    if (missing === undefined) return t.skip(`both drivers load on Node ${process.version}`);
    const env = { LEASEHOLD_SQLITE_DRIVER: missing };
    const way = missing === 'node:sqlite' ? /needs Node 22\.13 or later/ : /unset LEASEHOLD_SQLITE_DRIVER to use node:sqlite/;
    assertOneLineError(await sb.run(['status', '--store', `sqlite:${sb.path('c/x.db')}`], env), 2, way);
    assert.equal(existsSync(sb.path('c')), false);
    const demo = await sb.run(['demo'], env);
    assert.equal(demo.code, 2, demo.stderr);
    assert.match(demo.stderr, way);
    const doctor = await sb.run(['doctor', '--store', `sqlite:${sb.path('c/x.db')}`], env);
    assert.match(doctor.stdout, /^fail\s+sqlite-driver\s/m);
  });

  void it('forcing the driver this Node has anyway works, and doctor says it was forced', async () => {
    const r = await sb.run(['doctor', '--json', '--store', `sqlite:${sb.path('d.db')}`], { LEASEHOLD_SQLITE_DRIVER: DEFAULT });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const c = (JSON.parse(r.stdout) as { checks: { check: string; detail: string; driver?: string }[] }).checks.find((x) => x.check === 'sqlite-driver');
    assert.equal(c?.driver, DEFAULT);
    assert.match(c?.detail ?? '', new RegExp(`LEASEHOLD_SQLITE_DRIVER=${DEFAULT}`));
  });
});
