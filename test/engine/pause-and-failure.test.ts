/**
 * The scenarios the lease exists for, with real processes and real stores: a leader frozen past
 * its TTL, a store that goes away under a leader. PostgreSQL and SQLite (the foundation stores),
 * and MySQL/MariaDB.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
// The driver leasehold chose for this Node (node:sqlite on 22/24, better-sqlite3 on 20).
import { loadSqliteDriver } from '../../src/backends/sqlite/driver.js';
import pg from 'pg';
import { Leasehold } from '../../src/core/leasehold.js';
import { LeaseLostError, NotLeaderError } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import { parseSqliteUrl } from '../../src/backends/sqlite/url.js';
import { makeTestStore, selectedStores, TEST_MYSQL_URL, TEST_PG_URL, type StoreKind, type TestStore } from '../helpers/stores.js';
import { TcpProxy } from '../helpers/proxy.js';
import { fencedWrite as fencedInsert, prepareResource } from '../fixtures/fenced-resource.js';

const writerJs = fileURLToPath(new URL('../fixtures/paused-writer.js', import.meta.url));
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

type Line = { event: string; token?: string; reason?: string; believesLeader?: boolean };

function startWriter(url: string, name: string, ttl: number, workMs: number): { child: ChildProcess; lines: Line[]; next(event: string, timeoutMs?: number): Promise<Line> } {
  const child = spawn(process.execPath, [writerJs, url, name, String(ttl), String(workMs)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines: Line[] = [];
  const waiters: Array<() => void> = [];
  let buf = '';
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(JSON.parse(buf.slice(0, i)) as Line);
      buf = buf.slice(i + 1);
      for (const w of waiters.splice(0)) w();
    }
  });
  const next = async (event: string, timeoutMs = 20_000): Promise<Line> => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const found = lines.find((l) => l.event === event);
      if (found !== undefined) return found;
      if (performance.now() > deadline) throw new Error(`writer never printed "${event}"; got ${JSON.stringify(lines)}`);
      await Promise.race([new Promise<void>((r) => waiters.push(r)), sleep(100)]);
    }
  };
  return { child, lines, next };
}

async function writesOf(t: TestStore, resource: string): Promise<{ token: bigint; writer: string }[]> {
  if (t.kind === 'sqlite') {
    const db = new (loadSqliteDriver())(parseSqliteUrl(t.url), { readonly: true });
    try {
      const rows = db.prepare('SELECT token, writer FROM writes WHERE resource = ? ORDER BY rowid').safeIntegers(true).all(resource) as { token: bigint; writer: string }[];
      return rows;
    } finally {
      db.close();
    }
  }
  if (t.kind === 'mysql') {
    const mysql = createRequire(import.meta.url)('mysql2/promise') as {
      createConnection(o: { uri: string; supportBigNumbers: boolean; bigNumberStrings: boolean }): Promise<{ query(sql: string, v: unknown[]): Promise<[unknown]>; end(): Promise<void> }>;
    };
    const c = await mysql.createConnection({ uri: t.url.replace(/^mariadb:/, 'mysql:'), supportBigNumbers: true, bigNumberStrings: true });
    try {
      const [rows] = await c.query('SELECT token, writer FROM writes WHERE resource = ? ORDER BY id', [resource]);
      return (rows as { token: string; writer: string }[]).map((row) => ({ token: BigInt(row.token), writer: row.writer }));
    } finally {
      await c.end();
    }
  }
  const schema = new URL(t.url).searchParams.get('schema')!;
  const c = new pg.Client({ connectionString: TEST_PG_URL });
  await c.connect();
  try {
    const r = await c.query(`SELECT token, writer FROM "${schema}".writes WHERE resource = $1 ORDER BY ctid`, [resource]);
    return r.rows.map((row: { token: string; writer: string }) => ({ token: BigInt(row.token), writer: row.writer }));
  } finally {
    await c.end();
  }
}

const kinds = selectedStores().filter((k): k is StoreKind => k === 'postgres' || k === 'sqlite' || k === 'mysql');
for (const kind of kinds) {
  void describe(`engine on ${kind}: pauses and failures`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
      await prepareResource(t.url);
    });
    after(async () => {
      await t?.cleanup();
    });

    void it('a leader frozen with SIGSTOP past its TTL has its fenced write rejected after it resumes', async () => {
      const name = uniq('frozen');
      const ttl = 1000;
      const w = startWriter(t.url, name, ttl, 1500);
      try {
        const acquired = await w.next('acquired');
        const staleToken = BigInt(acquired.token!);
        w.child.kill('SIGSTOP'); // mid-unit: it read its token and is "working"

        // The store's clock runs on: after the TTL another process takes over with a larger token.
        const lh = new Leasehold({ store: await t.open() });
        const term = await lh.lease(name, { ttl: 5000 }).acquire({ wait: '10s' });
        assert.ok(term.token > staleToken, `takeover token ${term.token} > ${staleToken}`);
        assert.equal(await fencedInsert(t.url, name, term.token, 'successor'), 'accepted');

        w.child.kill('SIGCONT');
        const outcome = await Promise.race([w.next('fenced'), w.next('accepted')]);
        assert.equal(outcome.event, 'fenced', 'the stale write was rejected by the fence');
        assert.equal(outcome.token, String(staleToken));
        const lost = await w.next('lost');
        assert.ok(lost.reason === 'expired' || lost.reason === 'superseded' || lost.reason === 'suspended', `lost because ${lost.reason}`);

        const writes = await writesOf(t, name);
        assert.deepEqual(
          writes.map((x) => x.writer),
          ['successor'],
          'only the successor wrote; the frozen leader changed zero rows',
        );
        await lh.close();
      } finally {
        w.child.kill('SIGKILL');
      }
    });

    void it('fenced writes: a higher or equal token is accepted, a lower one changes nothing', async () => {
      const resource = uniq('fence');
      assert.equal(await fencedInsert(t.url, resource, 5n, 'five'), 'accepted');
      assert.equal(await fencedInsert(t.url, resource, 5n, 'five-again'), 'accepted');
      assert.equal(await fencedInsert(t.url, resource, 4n, 'four'), 'fenced');
      assert.equal(await fencedInsert(t.url, resource, 9007199254740993n, 'past-2^53'), 'accepted');
      assert.equal(await fencedInsert(t.url, resource, 9007199254740992n, 'just-below'), 'fenced');
      assert.deepEqual(
        (await writesOf(t, resource)).map((x) => x.writer),
        ['five', 'five-again', 'past-2^53'],
      );
    });
  });
}

for (const kind of kinds.filter((k) => k === 'postgres' || k === 'mysql')) {
  void describe(`engine on ${kind}: the store goes away under a leader`, () => {
    let t: TestStore;
    let proxy: TcpProxy;
    before(async () => {
      t = await makeTestStore(kind);
      const target = new URL(kind === 'postgres' ? TEST_PG_URL : TEST_MYSQL_URL);
      proxy = await new TcpProxy(target.hostname, Number(target.port || (kind === 'postgres' ? 5432 : 3306))).start();
    });
    after(async () => {
      await proxy?.stop();
      await t?.cleanup();
    });

    for (const mode of ['blackhole', 'reset'] as const) {
      void it(`renewals that cannot reach the store (${mode}) stand down before the store-side expiry`, async () => {
        proxy.setMode('pass');
        const name = uniq(`cut-${mode}`);
        const viaProxy = new URL(t.url);
        viaProxy.port = String(proxy.port);
        const store = await openStore(viaProxy.toString());
        const lh = new Leasehold({ store, closeStore: true });
        const lease = lh.lease(name, { ttl: 2000 });
        try {
          const term = await lease.acquire({ wait: false });
          await new Promise<void>((r) => lease.once('renewed', () => r()));
          let tokenDuringJeopardy: unknown;
          const jeopardy = new Promise<void>((r) =>
            lease.once('jeopardy', () => {
              try {
                tokenDuringJeopardy = lease.token;
              } catch (err) {
                tokenDuringJeopardy = err;
              }
              r();
            }),
          );
          const lostAt = new Promise<number>((r) => lease.once('lost', () => r(performance.now())));
          proxy.setMode(mode);
          await jeopardy;
          assert.ok(tokenDuringJeopardy instanceof NotLeaderError, 'no token is handed out while a renewal is unanswered');
          await lostAt;
          // Ask the store directly (not through the proxy): it must still think the term is live.
          const [info] = await t.store.list({ name });
          assert.ok(info !== undefined && info.expiresAtMs !== null);
          const remaining = info.expiresAtMs - info.storeNowMs;
          assert.ok(remaining > 0, `stood down ${remaining}ms after the store-side expiry`);
          assert.ok(term.signal.aborted);
          const reason = term.signal.reason as LeaseLostError;
          assert.equal(reason.reason, 'store-unreachable');
          assert.equal(lease.isLeader, false);
          process.stdout.write(`# ${mode}: stood down ${remaining.toFixed(0)}ms before the store-side expiry\n`);
        } finally {
          proxy.setMode('reset');
          await lh.close();
        }
      });
    }
  });
}
