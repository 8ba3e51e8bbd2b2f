/**
 * Liveness 'session' on MySQL/MariaDB (issue 32), with real processes: a holder's death ends its
 * term at once (the follower blocked in GET_LOCK on the session lock takes over with a larger
 * token, the fence refuses the dead holder's token), `KILL` of a live holder's session makes it
 * stand down, a term recorded on another server instance is left to its expiry, a release over
 * the session hands the lease on as a release, and the mode is refused through a proxy. Speed is
 * measured in bench/, not asserted here: every bound is derived from the TTL, with the reason.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import { LeaseLostError, LivenessError } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import { mysqlGiveUpMs, SESSION_ENDED_DETAIL, sessionLockName } from '../../src/backends/mysql/session.js';
import type { MysqlStore } from '../../src/backends/mysql/store.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';
import { TcpProxy } from '../helpers/proxy.js';
import { fencedWrite, prepareResource } from '../fixtures/fenced-resource.js';

const holderJs = fileURLToPath(new URL('../fixtures/session-holder.js', import.meta.url));
const uniq = (p: string): string => `h32-${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

type Line = { event: string; token?: string; reason?: string };

function startHolder(url: string, name: string, ttlMs: number): { child: ChildProcess; next(event: string, timeoutMs?: number): Promise<Line> } {
  const child = spawn(process.execPath, [holderJs, url, name, String(ttlMs), 'session'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines: Line[] = [];
  let buf = '';
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(JSON.parse(buf.slice(0, i)) as Line);
      buf = buf.slice(i + 1);
    }
  });
  const next = async (event: string, timeoutMs = 30_000): Promise<Line> => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const found = lines.find((l) => l.event === event);
      if (found !== undefined) return found;
      if (performance.now() > deadline) throw new Error(`holder never printed "${event}"; got ${JSON.stringify(lines)}`);
      await sleep(20);
    }
  };
  return { child, next };
}

type Conn = { query(sql: string, values?: unknown[]): Promise<[unknown, unknown]>; end(): Promise<void> };
async function sql<R>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const mysql = createRequire(import.meta.url)('mysql2/promise') as { createConnection(uri: string): Promise<Conn> };
  const c = await mysql.createConnection(url.replace(/^mariadb:/, 'mysql:'));
  try {
    return (await c.query(text, values))[0] as R[];
  } finally {
    await c.end();
  }
}

/**
 * Every statement `store` sends from now on on the connections it opens outside its pool (the
 * named-lock connections of ./freed.ts and the lease sessions of ./session.ts), with its values.
 */
function observeOwnConnections(store: MysqlStore): { sql: string; values: unknown[] }[] {
  const sent: { sql: string; values: unknown[] }[] = [];
  type Queryable = { query: (o: { sql: string; values?: unknown }, cb: unknown) => unknown };
  const connector = store.connector as unknown as { connect(hostPort?: string): Queryable };
  const connect = connector.connect.bind(connector);
  connector.connect = (hostPort) => {
    const c = connect(hostPort);
    const query = c.query.bind(c);
    c.query = (o, cb) => (sent.push({ sql: o.sql, values: Array.isArray(o.values) ? (o.values as unknown[]) : [] }), query(o, cb));
    return c;
  };
  return sent;
}

/** The connection a term is tied to, once the row records one (the holder's claim writes it). */
async function sessionConn(t: TestStore, name: string): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const [row] = await sql<{ c: string | null }>(t.url, 'SELECT IF(session_token <=> token, session_conn, NULL) AS c FROM leasehold_leases WHERE name = ?', [name]);
    if (row?.c != null) return Number(row.c);
    await sleep(25);
  }
  throw new Error(`lease ${name} never recorded a session`);
}

void describe('liveness session on mysql', () => {
  let t: TestStore;
  before(async () => {
    t = await makeTestStore('mysql');
    await prepareResource(t.url);
  });
  after(async () => {
    await t?.cleanup();
  });

  void it('SIGKILL of the holder: a waiting follower takes over long before the TTL, with a larger token, and the fence refuses the dead holder', async () => {
    const name = uniq('kill');
    const ttl = 30_000;
    const h = startHolder(t.url, name, ttl);
    const lh = new Leasehold({ store: await t.open() });
    try {
      const old = BigInt((await h.next('acquired')).token!);
      await sessionConn(t, name);
      let acquiredAt = 0;
      const won = lh.lease(name, { ttl, liveness: 'session' }).acquire().then((term) => ((acquiredAt = performance.now()), term));
      await sleep(300); // the follower is waiting (busy, blocked in GET_LOCK on the session lock)
      const killedAt = performance.now();
      h.child.kill('SIGKILL');
      const term = await won;
      const tookMs = acquiredAt - killedAt;
      // The holder renewed at most ttl/3 before the kill, so its term had at least 20 s left: a
      // takeover within 10 s can only come from the session's end (10 s: a loaded host stalls).
      assert.ok(tookMs < ttl / 3, `took over ${tookMs.toFixed(0)}ms after SIGKILL, not before the TTL could expire`);
      assert.ok(term.token > old, `new token ${term.token} > ${old}`);
      assert.equal(await fencedWrite(t.url, name, term.token, 'successor'), 'accepted');
      assert.equal(await fencedWrite(t.url, name, old, 'dead-holder'), 'fenced', 'a write still in flight from the dead holder is refused');
      const ended = (await t.store.history({ name })).find((e) => e.event === 'revoked');
      assert.ok(ended?.detail?.startsWith(SESSION_ENDED_DETAIL), `history records the session's end: ${String(ended?.detail)}`);
      assert.equal(ended?.token, old);
      // The successor's term is tied to its own session.
      assert.ok((await sessionConn(t, name)) > 0);
      process.stdout.write(`# takeover after SIGKILL: ${tookMs.toFixed(0)}ms (TTL ${ttl}ms)\n`);
    } finally {
      h.child.kill('SIGKILL');
      await lh.close();
    }
  });

  void it("KILL of a live holder's session connection: the holder stands down (its signal aborts) and a follower takes over", async () => {
    const name = uniq('killconn');
    const ttl = 30_000;
    const holder = new Leasehold({ store: await t.open() });
    const follower = new Leasehold({ store: await t.open() });
    try {
      const held = await holder.lease(name, { ttl, liveness: 'session' }).acquire();
      const conn = await sessionConn(t, name);
      const next = follower.lease(name, { ttl, liveness: 'session' }).acquire();
      await sleep(300);
      const aborted = new Promise<number>((r) => held.signal.addEventListener('abort', () => r(performance.now()), { once: true }));
      const at = performance.now();
      await sql(t.url, `KILL CONNECTION ${conn}`);
      const stoodDownAt = await aborted;
      const reason = held.signal.reason as LeaseLostError;
      assert.ok(reason instanceof LeaseLostError);
      assert.equal(reason.reason, 'revoked');
      const term = await next;
      const tookOverAt = performance.now();
      assert.ok(term.token > held.token);
      // Both well under the 20 s the term had left (see the SIGKILL case).
      assert.ok(stoodDownAt - at < ttl / 3, `stood down ${(stoodDownAt - at).toFixed(0)}ms after the KILL`);
      assert.ok(tookOverAt - at < ttl / 3);
      assert.equal(await fencedWrite(t.url, name, term.token, 'successor'), 'accepted');
      assert.equal(await fencedWrite(t.url, name, held.token, 'killed'), 'fenced');
      process.stdout.write(`# KILL CONNECTION: holder stood down after ${(stoodDownAt - at).toFixed(1)}ms, follower took over after ${(tookOverAt - at).toFixed(1)}ms\n`);
    } finally {
      await holder.close();
      await follower.close();
    }
  });

  void it('a term recorded on another server instance (a restart, a failover) is left to its expiry, not ended early', async () => {
    const name = uniq('moved');
    const holder = new Leasehold({ store: await t.open() });
    const follower = new Leasehold({ store: await t.open() });
    try {
      const held = await holder.lease(name, { ttl: 30_000, liveness: 'session' }).acquire();
      const conn = await sessionConn(t, name);
      // As the row reads after a restart or on a promoted replica: recorded under another start.
      await sql(t.url, 'UPDATE leasehold_leases SET session_server = session_server - 86400 WHERE name = ?', [name]);
      await sql(t.url, `KILL CONNECTION ${conn}`);
      await new Promise<void>((r) => (held.signal.aborted ? r() : held.signal.addEventListener('abort', () => r(), { once: true })));
      // 2 s is far below the 30 s TTL and far above a session-end takeover (milliseconds).
      await assert.rejects(follower.lease(name, { ttl: 30_000, liveness: 'session' }).acquire({ wait: 2000 }));
      assert.ok(!(await t.store.history({ name })).some((e) => e.event === 'revoked'), 'not ended for a session the server cannot vouch for');
      assert.equal((await t.store.list({ name }))[0]?.state, 'held');
    } finally {
      await holder.close();
      await follower.close();
    }
  });

  void it('a release over the session hands the lease on as a release (not as a session that ended), the session lock going after COMMIT', async () => {
    const name = uniq('release');
    const holderStore = (await t.open()) as MysqlStore;
    const sent = observeOwnConnections(holderStore);
    const a = new Leasehold({ store: holderStore });
    const b = new Leasehold({ store: await t.open() });
    try {
      const la = a.lease(name, { ttl: 30_000, liveness: 'session' });
      const first = await la.acquire();
      await sessionConn(t, name);
      const next = b.lease(name, { ttl: 30_000, liveness: 'session' }).acquire();
      await sleep(300);
      const s0 = sent.length;
      await la.release();
      const term = await next;
      assert.ok(term.token > first.token);
      assert.ok(!(await t.store.history({ name })).some((e) => e.event === 'revoked'));
      assert.ok((await sessionConn(t, name)) > 0, "the new holder's term is tied to its own session");

      // The twin of the doorbell's order (stores/mysql-handover): InnoDB lets a committing
      // transaction's row locks go before its redo flush, so a follower woken by the session lock
      // before COMMIT answered could read, and confirm, a release that is not yet durable.
      const lock = sessionLockName(holderStore.database, name);
      const releases = sent.slice(s0).filter((x) => x.values.includes(lock) && /leasehold_release/.test(x.sql));
      assert.equal(releases.length, 1, `one release on the session connection: ${releases.map((x) => x.sql).join(' | ')}`);
      assert.match(
        releases[0]!.sql,
        /^START TRANSACTION;\s*CALL leasehold_release\(\?, \?, \?\);\s*COMMIT;\s*DO RELEASE_LOCK\(\?\);\s*SELECT @lh_prev AS prev$/,
        'one procedure call, then COMMIT, and only then the session lock, in the same round trip',
      );
      assert.equal(releases[0]!.values.at(-1), lock, 'the lock let go is the session lock');
    } finally {
      await a.close();
      await b.close();
    }
  });

  void it('refused through a proxy (the server listens on another port than the store connects to): LivenessError pooler', async () => {
    const target = new URL(t.url);
    const proxy = await new TcpProxy(target.hostname, Number(target.port || 3306)).start();
    const viaProxy = new URL(t.url);
    viaProxy.port = String(proxy.port);
    const lh = new Leasehold({ store: await openStore(viaProxy.toString()), closeStore: true });
    try {
      const err = await lh.lease(uniq('proxy'), { liveness: 'session' }).acquire().then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof LivenessError, String(err));
      assert.equal(err.why, 'pooler');
      assert.match(err.message, /direct URL/);
    } finally {
      await lh.close();
      await proxy.stop();
    }
  });

  void it("the server's keepalive gives up after interval x probes (the OS's when 0); a TTL not below that is refused", async () => {
    assert.equal(mysqlGiveUpMs({ interval: 0, probes: 0 }), 675_000);
    assert.equal(mysqlGiveUpMs({ interval: 2, probes: 3 }), 6000);
    const lh = new Leasehold({ store: await t.open() });
    try {
      // A term longer than the OS's keepalive give-up (675 s) could outlive a partitioned holder's session.
      const err = await lh.lease(uniq('keepalive'), { ttl: 700_000, liveness: 'session' }).acquire().then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof LivenessError, String(err));
      assert.equal(err.why, 'keepalive');
    } finally {
      await lh.close();
    }
  });
});
