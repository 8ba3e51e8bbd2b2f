/**
 * fencedMysqlTransaction on the real MariaDB: the token mark refuses an older term and rolls
 * back with it, the term check refuses a clone of a term, a lock conflict before fn is retried,
 * and a writer frozen inside fn loses its connection after idleTimeout so a newer term proceeds.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import type * as Mysql2 from 'mysql2';
import type * as Mysql2Promise from 'mysql2/promise';
import { Leasehold } from '../../src/core/leasehold.js';
import { FenceOwnedError, FencedError, LeaseLostError, StoreUnavailableError } from '../../src/core/errors.js';
import { MYSQL_SCHEMA_VERSION } from '../../src/backends/mysql/schema.js';
import { migration005 } from '../../src/backends/mysql/sql/005-fence-lease.js';
import { fencedMysqlTransaction } from '../../src/fence/index.js';
import { resumeLease, snapshotLease } from '../../src/testing/index.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const require = createRequire(import.meta.url);
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

void describe('mysql: fencedMysqlTransaction', { skip: !selectedStores().includes('mysql') }, () => {
  let t: TestStore;
  let pool: Mysql2Promise.Pool;
  let cbPool: Mysql2.Pool;
  const count = async (resource: string): Promise<number> => {
    const [rows] = await pool.query<Mysql2Promise.RowDataPacket[]>('SELECT COUNT(*) AS n FROM writes WHERE resource = ?', [resource]);
    return Number(rows[0]!['n']);
  };
  const mark = async (resource: string): Promise<bigint | null> => {
    const [rows] = await pool.query<Mysql2Promise.RowDataPacket[]>('SELECT CAST(token AS CHAR) AS token FROM leasehold_fences WHERE resource = ?', [resource]);
    return rows[0] === undefined ? null : BigInt(String(rows[0]['token']));
  };

  before(async () => {
    t = await makeTestStore('mysql');
    const uri = t.url.replace(/^mariadb:/, 'mysql:');
    pool = (require('mysql2/promise') as typeof Mysql2Promise).createPool({ uri, connectionLimit: 4 });
    cbPool = (require('mysql2') as typeof Mysql2).createPool({ uri, connectionLimit: 2 });
    await pool.query('CREATE TABLE writes (id INT AUTO_INCREMENT PRIMARY KEY, resource VARCHAR(200), token BIGINT) ENGINE = InnoDB');
  });
  after(async () => {
    await pool?.end();
    await new Promise<void>((r) => (cbPool === undefined ? r() : cbPool.end(() => r())));
    await t?.cleanup();
  });

  const write = (resource: string, token: bigint, opts: { fail?: boolean; idleTimeout?: number | false } = {}) =>
    fencedMysqlTransaction(pool, { resource, token, ...(opts.idleTimeout === undefined ? {} : { idleTimeout: opts.idleTimeout }) }, async (tx) => {
      await tx.query('INSERT INTO writes (resource, token) VALUES (?, ?)', [resource, token.toString()]);
      if (opts.fail === true) throw new Error('the work failed');
    });

  void it('accepts an equal or higher token, refuses a lower one with FencedError, and a failed fn leaves neither writes nor mark', async () => {
    const r = uniq('tok');
    await write(r, 10n);
    await write(r, 10n);
    await write(r, 11n);
    assert.equal(await mark(r), 11n);
    await assert.rejects(write(r, 9n), (err: unknown) => err instanceof FencedError && err.highWater === 11n && err.token === 9n);
    await assert.rejects(write(r, 12n, { fail: true }), /the work failed/);
    assert.equal(await mark(r), 11n, 'the failed transaction did not advance the mark');
    assert.equal(await count(r), 3, 'only the three accepted writes');
  });

  void it('an older term waiting on the mark is refused once the newer commits, and its fn never runs', async () => {
    const r = uniq('wait');
    let releaseNewer!: () => void;
    const held = new Promise<void>((res) => (releaseNewer = res));
    let newerInside!: () => void;
    const inside = new Promise<void>((res) => (newerInside = res));
    const newer = fencedMysqlTransaction(pool, { resource: r, token: 20n }, async (tx) => {
      await tx.query('INSERT INTO writes (resource, token) VALUES (?, 20)', [r]);
      newerInside();
      await held;
    });
    await inside;
    let olderRan = false;
    const older = fencedMysqlTransaction(pool, { resource: r, token: 19n }, async () => {
      olderRan = true;
    }).then(
      () => undefined,
      (err: unknown) => err,
    );
    await sleep(200);
    releaseNewer();
    await newer;
    const err = await older;
    assert.ok(err instanceof FencedError && err.highWater === 20n, String(err));
    assert.equal(olderRan, false);
    assert.equal(await count(r), 1);
  });

  void it('works with a callback Pool and puts the session back (autocommit, idle bound) before the connection returns', async () => {
    const r = uniq('cb');
    const one = (require('mysql2') as typeof Mysql2).createPool({ uri: t.url.replace(/^mariadb:/, 'mysql:'), connectionLimit: 1 });
    try {
      await fencedMysqlTransaction(one, { resource: r, token: 5n, idleTimeout: '3s' }, (tx) =>
        new Promise<void>((res, rej) => tx.query('INSERT INTO writes (resource, token) VALUES (?, 5)', [r], (err) => (err === null ? res() : rej(err)))),
      );
      const rows = await new Promise<Mysql2.RowDataPacket[]>((res, rej) =>
        one.query<Mysql2.RowDataPacket[]>('SELECT @@autocommit AS ac, @@idle_transaction_timeout AS itt', (err, rs) => (err === null ? res(rs) : rej(err))),
      );
      assert.deepEqual({ ac: Number(rows[0]!['ac']), itt: Number(rows[0]!['itt']) }, { ac: 1, itt: 0 });
      assert.equal(await count(r), 1);
    } finally {
      await new Promise<void>((res) => one.end(() => res()));
    }
  });

  void it('a transaction ended inside fn is refused at the end, and what fn wrote after it is rolled back', async () => {
    const r = uniq('ended');
    await assert.rejects(
      fencedMysqlTransaction(pool, { resource: r, token: 3n }, async (tx) => {
        await tx.query('ROLLBACK'); // as InnoDB does on a deadlock that fn then swallows
        await tx.query('INSERT INTO writes (resource, token) VALUES (?, 3)', [r]);
      }),
      (err: unknown) => err instanceof StoreUnavailableError && /rolled back inside fn/.test(err.message),
    );
    assert.equal(await count(r), 0, 'the unfenced insert was not committed');
    assert.equal(await mark(r), null);
  });

  void it('a lock-wait timeout on the mark is retried before fn runs; one inside fn is not', { timeout: 30_000 }, async () => {
    const r = uniq('lockwait');
    await write(r, 1n);
    const blocker = await pool.getConnection();
    const fenceConn = await pool.getConnection();
    try {
      await fenceConn.query('SET SESSION innodb_lock_wait_timeout = 1');
      await blocker.query('START TRANSACTION');
      await blocker.query('SELECT token FROM leasehold_fences WHERE resource = ? FOR UPDATE', [r]);
      setTimeout(() => void blocker.query('ROLLBACK'), 1600);
      let runs = 0;
      const started = performance.now();
      await fencedMysqlTransaction(fenceConn, { resource: r, token: 2n }, async (tx) => {
        runs++;
        await tx.query('INSERT INTO writes (resource, token) VALUES (?, 2)', [r]);
      });
      assert.ok(performance.now() - started >= 1000, 'it waited out at least one lock-wait timeout');
      assert.equal(runs, 1);
      assert.equal(await mark(r), 2n);

      // Inside fn: the user's own statement times out waiting; nothing is retried or committed.
      const [ins] = await pool.query<Mysql2Promise.ResultSetHeader>('INSERT INTO writes (resource, token) VALUES (?, 0)', [`${r}-row`]);
      await blocker.query('START TRANSACTION');
      await blocker.query('SELECT id FROM writes WHERE id = ? FOR UPDATE', [ins.insertId]);
      runs = 0;
      await assert.rejects(
        fencedMysqlTransaction(fenceConn, { resource: r, token: 3n }, async (tx) => {
          runs++;
          await tx.query('UPDATE writes SET token = 3 WHERE id = ?', [ins.insertId]);
        }),
        (err: unknown) => err instanceof StoreUnavailableError && /not retried/.test(err.message),
      );
      await blocker.query('ROLLBACK');
      assert.equal(runs, 1);
      assert.equal(await mark(r), 2n, 'the mark did not move');
    } finally {
      blocker.release();
      fenceConn.release();
    }
  });

  void it('a writer frozen inside fn loses its connection after idleTimeout, and a newer term then proceeds', { timeout: 30_000 }, async () => {
    const r = uniq('frozen');
    const boundMs = 1000;
    let frozenInside!: () => void;
    const inside = new Promise<void>((res) => (frozenInside = res));
    const frozen = fencedMysqlTransaction(pool, { resource: r, token: 30n, idleTimeout: boundMs }, async (tx) => {
      await tx.query('INSERT INTO writes (resource, token) VALUES (?, 30)', [r]);
      frozenInside();
      await sleep(boundMs * 4);
      await tx.query('INSERT INTO writes (resource, token) VALUES (?, 30)', [r]);
    });
    const frozenOutcome = frozen.then(
      () => undefined,
      (err: unknown) => err,
    );
    await inside;
    const started = performance.now();
    await write(r, 31n);
    const waited = performance.now() - started;
    assert.ok(waited >= boundMs * 0.7, `the newer term waited for the frozen one's lock (${waited.toFixed(0)}ms)`);
    assert.ok(waited < boundMs * 3, `and went ahead once the server ended it, before the freeze was over (${waited.toFixed(0)}ms)`);
    const err = await frozenOutcome;
    assert.ok(err instanceof StoreUnavailableError && /nothing was committed/.test(err.message), String(err));
    assert.equal(await mark(r), 31n);
    const [rows] = await pool.query<Mysql2Promise.RowDataPacket[]>('SELECT token FROM writes WHERE resource = ?', [r]);
    assert.deepEqual(rows.map((x) => Number(x['token'])), [31], 'none of the frozen writer\'s rows');
  });

  void it('with `term`: a clone of the term is refused as cloned and rolled back, and the term ends in the store', { timeout: 30_000 }, async () => {
    const name = uniq('clone');
    const lh1 = new Leasehold({ store: t.store });
    const lh2 = new Leasehold({ store: await t.open() });
    try {
      const lease1 = lh1.lease(name, { ttl: '30s' });
      const term1 = await lease1.acquire({ wait: '5s' });
      const term2 = resumeLease(lh2.lease(name, { ttl: '30s' }), snapshotLease(lease1)!);
      assert.equal(term2.token, term1.token);
      const termWrite = (term: typeof term1, resource: string) =>
        fencedMysqlTransaction(pool, { resource, term }, async (tx) => {
          await tx.query('INSERT INTO writes (resource, token) VALUES (?, ?)', [resource, term.token.toString()]);
        });
      await termWrite(term1, `${name}:a`);
      await termWrite(term1, `${name}:a`);
      // Another resource: the token mark alone would accept it.
      await assert.rejects(termWrite(term2, `${name}:b`), (err: unknown) => err instanceof LeaseLostError && err.reason === 'cloned');
      assert.equal(term2.signal.aborted, true);
      assert.equal(await count(`${name}:b`), 0, 'the clone\'s write was rolled back');
      const history = await t.store.history({ name });
      assert.ok(history.some((h) => h.event === 'conflict' && h.token === term1.token), JSON.stringify(history.map((h) => h.event)));
      await assert.rejects(termWrite(term1, `${name}:a`), (err: unknown) => err instanceof LeaseLostError && err.reason === 'cloned');
      assert.equal(await count(`${name}:a`), 2);
    } finally {
      await lh1.close();
      await lh2.close();
    }
  });

  void it('with `term`: an ended term cannot write to a resource no newer term has touched', { timeout: 30_000 }, async () => {
    const name = uniq('old');
    const lh1 = new Leasehold({ store: t.store });
    const lh2 = new Leasehold({ store: await t.open() });
    try {
      const old = await lh1.lease(name, { ttl: '30s' }).acquire({ wait: '5s' });
      assert.equal((await t.store.revoke(name, 'test')).revoked, true);
      const next = await lh2.lease(name, { ttl: '30s' }).acquire({ wait: '5s' });
      assert.ok(next.token > old.token);
      await assert.rejects(
        fencedMysqlTransaction(pool, { resource: `${name}:fresh`, term: old }, async (tx) => {
          await tx.query('INSERT INTO writes (resource, token) VALUES (?, ?)', [`${name}:fresh`, old.token.toString()]);
        }),
        (err: unknown) => err instanceof LeaseLostError,
      );
      assert.equal(await count(`${name}:fresh`), 0);
      await fencedMysqlTransaction(pool, { resource: `${name}:fresh`, term: next }, async (tx) => {
        await tx.query('INSERT INTO writes (resource, token) VALUES (?, ?)', [`${name}:fresh`, next.token.toString()]);
      });
      assert.equal(await count(`${name}:fresh`), 1);
    } finally {
      await lh1.close();
      await lh2.close();
    }
  });

  void it('a resource belongs to one lease: another lease is refused with FenceOwnedError naming both, whatever its token; a mark with no lease is claimed by the first write that names one', async () => {
    const r = uniq('owned');
    const writeAs = (token: bigint, lease: string | undefined) =>
      fencedMysqlTransaction(pool, { resource: r, token, ...(lease === undefined ? {} : { lease }) }, async (tx) => {
        await tx.query('INSERT INTO writes (resource, token) VALUES (?, ?)', [r, token.toString()]);
      });
    await writeAs(1n, undefined); // an unclaimed mark, as every mark written before migration 5
    await writeAs(3n, 'billing'); // claims it
    for (const token of [2n, 99n]) {
      await assert.rejects(writeAs(token, 'reports'), (err: unknown) => {
        assert.ok(err instanceof FenceOwnedError, String(err));
        assert.equal(err.code, 'FENCE_OWNED');
        assert.match(err.message, /lease "reports".*lease "billing"/);
        assert.doesNotMatch(err.message, /newer leader/);
        return true;
      });
    }
    await writeAs(4n, 'billing');
    assert.equal(await count(r), 3, 'nothing of the refused transactions');
    const [rows] = await pool.query<Mysql2Promise.RowDataPacket[]>('SELECT CAST(token AS CHAR) AS token, lease FROM leasehold_fences WHERE resource = ?', [r]);
    assert.deepEqual({ ...rows[0] }, { token: '4', lease: 'billing' });
  });

  void it('a database at schema version 4 upgrades: its marks keep their tokens, unclaimed, and migration 5 run twice (cut short and rerun) is harmless', async () => {
    const u = await makeTestStore('mysql');
    const uri = u.url.replace(/^mariadb:/, 'mysql:');
    const c = await (require('mysql2/promise') as typeof Mysql2Promise).createConnection({ uri, multipleStatements: true });
    try {
      // What leasehold at version 4 left: the first four migrations and a mark.
      await c.query('DROP TABLE IF EXISTS leasehold_fences');
      await c.query(`CREATE TABLE leasehold_fences (resource VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, token BIGINT NOT NULL, updated_at_us BIGINT NOT NULL, PRIMARY KEY (resource)) ENGINE = InnoDB`);
      await c.query(`INSERT INTO leasehold_fences VALUES ('old', 7, 0)`);
      await c.query('DELETE FROM leasehold_schema_version; INSERT INTO leasehold_schema_version (version) VALUES (4)');
      assert.deepEqual(await u.store.migrate!(), { current: MYSQL_SCHEMA_VERSION, expected: MYSQL_SCHEMA_VERSION });
      for (const stmt of migration005) await c.query(stmt); // a rerun finds the column and does nothing
      const [rows] = await c.query<Mysql2Promise.RowDataPacket[]>(`SELECT CAST(token AS CHAR) AS token, lease FROM leasehold_fences WHERE resource = 'old'`);
      assert.deepEqual({ ...rows[0] }, { token: '7', lease: null });
    } finally {
      await c.end();
      await u.cleanup();
    }
  });
});

/** Compiled, never called: `fn` is given the connection type of the API passed in. */
export async function mysql2User(cb: Mysql2.Pool, conn: Mysql2.Connection, promisePool: Mysql2Promise.Pool, held: Mysql2Promise.PoolConnection): Promise<void> {
  await fencedMysqlTransaction(cb, { resource: 'r', token: 1n }, (tx: Mysql2.PoolConnection) => Promise.resolve(tx.threadId));
  await fencedMysqlTransaction(conn, { resource: 'r', token: 1n }, (tx: Mysql2.Connection) => Promise.resolve(tx.threadId));
  await fencedMysqlTransaction(promisePool, { resource: 'r', token: 1n }, async (tx: Mysql2Promise.PoolConnection) => {
    await tx.query('SELECT 1');
  });
  await fencedMysqlTransaction(held, { resource: 'r', token: 1n, idleTimeout: false }, async (tx: Mysql2Promise.PoolConnection) => {
    await tx.query('SELECT 1');
  });
}
