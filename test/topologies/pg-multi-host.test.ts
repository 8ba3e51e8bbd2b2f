/**
 * PostgreSQL failover with a multi-host store URL (scripts/services/pg-replicas.mjs: a primary
 * and a streaming standby on loopback), asynchronous and synchronous.
 *
 *  - Asynchronous, the URL listing the standby first: the store connects to the primary (the
 *    standby is passed over: read-only); the primary is killed and the standby promoted; the
 *    holders' next calls find the new primary, the LISTEN connection follows it, and tokens
 *    keep increasing. Twice: a standby that had replayed everything (the holder renews there and
 *    keeps its term), and one cut off before the holder's last two renewals (its copy of the term
 *    has an older nonce and expiry: the holder is told superseded or cloned, a new term follows,
 *    with a token above the old timeline's). The time without a leader is printed.
 *  - Synchronous: while the synchronous standby is down every commit waits, so claims block;
 *    the holder's term ends by its own deadline (never held past it on a claim that does not
 *    come back) and nobody else is granted a term. With the standby back and then promoted after
 *    the primary is killed, no granted token is lost: the highest one is on the promoted
 *    standby, and the next one is larger.
 *
 * Timings are printed, not asserted, except the engine's own promise (a term ends by its
 * deadline) and prompt handover through LISTEN after the failover.
 *
 * Ports: LEASEHOLD_TEST_PG_REPLICA_PORT + 10 (default 24442; the standby on the next port): not
 * pg-failover's pair, which may be running beside this file in the test runner's parallel phase.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, it } from 'node:test';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { Elector } from '../../src/core/elector.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Term } from '../../src/core/lease.js';
import { PG_REPLICA_PORT, pgReplicaSkip, recordingLogger, startPgReplicas, type PgReplicas as Replicas } from './shared.js';

const PORT = PG_REPLICA_PORT + 10;
const skip = pgReplicaSkip();
const silent = { debug() {}, info() {}, warn() {}, error() {} };
/** Everything a test opened, closed in `after` even when an assertion failed half-way (no process left hanging). */
const opened: (() => Promise<unknown>)[] = [];
async function closeAll(): Promise<void> {
  for (const close of opened.splice(0).reverse()) await close().catch(() => {});
}
async function open(url: string, options: { queryTimeoutMs?: number } = {}): Promise<PostgresStore> {
  const store = await PostgresStore.create({ url, ...options });
  opened.push(() => store.close());
  return store;
}

const replicas = (synchronous: boolean): Promise<Replicas> => startPgReplicas({ synchronous, port: PORT });

const hostsUrl = (ports: number[], schema: string): string =>
  `postgres://postgres@${ports.map((p) => `127.0.0.1:${p}`).join(',')}/test?target_session_attrs=read-write&schema=${schema}`;

async function serverPort(store: PostgresStore): Promise<number> {
  return Number((await store.fleetQuery('SELECT inet_server_port() AS p', [])).rows[0]!['p']);
}

async function until(cond: () => boolean | Promise<boolean>, ms: number, what: string): Promise<number> {
  const t0 = performance.now();
  while (!(await cond())) {
    assert.ok(performance.now() - t0 < ms, `${what} (waited ${ms}ms)`);
    await sleep(20);
  }
  return performance.now();
}

type Ev = { who: string; kind: 'acquired' | 'renewed' | 'jeopardy' | 'lost'; token: bigint; at: number; detail?: string };

/** A contender on `job`: its own store (the multi-host URL), Leasehold and Elector; every lease event in `log`. */
async function contender(who: string, url: string, ttl: number, log: Ev[], storeOptions: { queryTimeoutMs?: number } = {}) {
  const store = await PostgresStore.create({ url, ...storeOptions });
  // What the engine said, with times, for a failure message (a slow handover in CI: 5.1s).
  const { logger, notes } = recordingLogger();
  const lh = new Leasehold({ store, closeStore: true, logger });
  opened.push(() => lh.close());
  const lease = lh.lease('job', { ttl });
  lease.on('acquired', (t: Term) => log.push({ who, kind: 'acquired', token: t.token, at: performance.now() }));
  lease.on('renewed', (t: Term) => log.push({ who, kind: 'renewed', token: t.token, at: performance.now() }));
  lease.on('jeopardy', (t: Term) => log.push({ who, kind: 'jeopardy', token: t.token, at: performance.now() }));
  lease.on('lost', (t: Term, err) => log.push({ who, kind: 'lost', token: t.token, at: performance.now(), detail: err.reason }));
  const elector = new Elector(lease, { onElected() {} }, silent);
  elector.start();
  opened.push(() => elector.stop());
  return { who, store, lh, elector, lease, notes };
}

const acquiredTokens = (log: Ev[]): bigint[] => log.filter((e) => e.kind === 'acquired').map((e) => e.token);

function assertIncreasing(tokens: bigint[]): void {
  for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i]! > tokens[i - 1]!, `tokens granted in order ${tokens.join(', ')} do not strictly increase`);
}

/**
 * LISTEN connections on the server of `store`: connections whose last statement was leasehold's
 * LISTEN, or the UNLISTEN of the probe a store's first LISTEN connection ends with
 * (PostgresStore.probeNotify). Not the backend running this count. The count used to be `query
 * LIKE '%LISTEN "leasehold_freed_%'`, which matched its own query and missed a first connection
 * (its last statement is the probe's): `>= 1` held before anyone listened, and after the failover
 * the test could release while the follower's LISTEN was still away (the first run of
 * 2026-12-07: handover 5.3 s, at the old term's expiry).
 */
async function listeners(store: PostgresStore): Promise<number> {
  const r = await store.fleetQuery(`SELECT count(*) AS n FROM pg_stat_activity WHERE query ~ '^(UN)?LISTEN "leasehold_(freed|probe)_' AND pid <> pg_backend_pid()`, []);
  return Number(r.rows[0]!['n']);
}

void describe('PostgreSQL multi-host URL: failover to a promoted standby', { skip }, () => {
  let r: Replicas | undefined;
  after(async () => {
    await closeAll();
    r?.stop();
  });

  for (const lagging of [false, true]) {
    void it(`the standby listed first is passed over; after a promotion${lagging ? ' of a standby that missed the last renewals' : ''} the store, and its LISTEN, follow the new primary`, async () => {
      const TTL = 6000;
      r?.stop();
      r = await replicas(false);
      const schema = `lh_mh_${Math.random().toString(36).slice(2, 8)}`;
      const url = hostsUrl([PORT + 1, PORT], schema);
      const setup = await open(url);
      await setup.migrate();
      assert.equal(await serverPort(setup), PORT, 'the store chose the primary, not the standby listed first');
      await setup.close();

      const log: Ev[] = [];
      const a = await contender('a', url, TTL, log);
      await until(() => log.some((e) => e.kind === 'acquired'), 10_000, 'a never led');
      const b = await contender('b', url, TTL, log);
      const observer = await open(url);
      // Both listen: the follower for releases, the holder for a revocation of its own term.
      const listening = 2;
      await until(async () => (await listeners(observer)) >= listening, 10_000, 'the holder and the follower never both listened');
      // The standby has replayed the term (so the holder's nonce is there to renew after the promotion).
      const standby = await open(`${r.standbyUrl}?schema=${schema}`);
      await until(async () => (await standby.list({ name: 'job' }).catch(() => []))[0]?.holder != null, 10_000, 'the standby never saw the term');
      await standby.close();
      if (lagging) {
        // Cut the standby off, and let the holder renew twice more: the promoted standby will hold a
        // nonce the holder no longer presents (the writes lost in an asynchronous failover).
        r.stopStandby();
        const cutAt = performance.now();
        await until(() => log.filter((e) => e.kind === 'renewed' && e.at > cutAt).length >= 2, 3 * TTL, 'the holder did not renew');
      }
      const before = acquiredTokens(log);

      r.stopPrimary();
      const deadAt = performance.now();
      if (lagging) r.startStandby();
      r.promote();
      const promotedIn = Math.round(performance.now() - deadAt);

      // Led again: a renewal or an acquisition that landed after the primary was gone, on the new one.
      const ledAt = await until(() => log.some((e) => e.at > deadAt && (e.kind === 'renewed' || e.kind === 'acquired')), 4 * TTL, 'nobody led after the promotion');
      const leader = [a, b].find((c) => c.lease.isLeader);
      assert.ok(leader !== undefined, 'a leader after the failover');
      assert.equal(await serverPort(leader.store), PORT + 1, "the leader's store is on the promoted standby");
      assert.equal(await serverPort(observer), PORT + 1, 'a store that had chosen the old primary chose again');
      const lost = log.find((e) => e.kind === 'lost' && e.at > deadAt);
      const lostAt = lost?.at;
      const regainedAt = log.find((e) => e.kind === 'acquired' && e.at > deadAt)?.at;
      const leaderless = lostAt === undefined ? 0 : Math.round((regainedAt ?? ledAt) - lostAt);
      const jeopardy = log.find((e) => e.kind === 'jeopardy' && e.at > deadAt)?.at;

      // The follower's LISTEN reconnects to the new primary: a release is handed over at once.
      // .ci/run of 2026-12-07 (ci63) failed here once, in the serial phase, and passed on four other
      // runs of the same tree: on a timeout the failure says which connections the new primary had.
      await until(async () => (await listeners(leader.store)) >= listening, 15_000, 'the LISTEN connections never came back on the new primary').catch(async (err: unknown) => {
        const rows = await leader.store
          .fleetQuery(`SELECT pid, state, left(query, 70) AS q, backend_start::text AS since FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`, [])
          .then((r) => r.rows.map((x) => `${String(x['pid'])} ${String(x['state'])} since ${String(x['since'])}: ${String(x['q'])}`).join('\n  '))
          .catch((e: unknown) => `(could not list: ${String(e)})`);
        const states = [a, b].map((c) => `${c.who}: ${c.lease.state}`).join(', ');
        throw new Error(`${(err as Error).message}; electors ${states}; the new primary's connections:\n  ${rows}`);
      });
      const other = leader === a ? b : a;
      const n = log.filter((e) => e.kind === 'acquired').length;
      const releasedAt = performance.now();
      await leader.elector.stop();
      await until(() => log.filter((e) => e.kind === 'acquired').length > n, 2 * TTL, 'the follower never took over');
      const took = log.filter((e) => e.kind === 'acquired').at(-1)!;
      const handover = Math.round(took.at - releasedAt);
      assert.equal(took.who, other.who);

      const all = acquiredTokens(log);
      assertIncreasing(all);
      const maxBefore = before.reduce((x, y) => (x > y ? x : y));
      for (const t of all.slice(before.length)) assert.ok(t > maxBefore, `token ${t} after the failover is not above ${maxBefore}`);
      console.log(
        `# multi-host async failover${lagging ? ' (standby behind by two renewals)' : ''}: promote took ${promotedIn}ms; led again ${Math.round(ledAt - deadAt)}ms after the primary died ` +
          `(${regainedAt === undefined ? 'the holder kept its term, renewing on the new primary' : 'a new term'}; ` +
          `${jeopardy === undefined ? 'no jeopardy' : `jeopardy from ${Math.round(jeopardy - deadAt)}ms`}${lost === undefined ? '' : `, term ended ${Math.round(lost.at - deadAt)}ms after the kill (${lost.detail})`}); time without a leader ${leaderless}ms (TTL ${TTL}ms); ` +
          `release handed over via LISTEN on the new primary in ${handover}ms; tokens ${all.join(', ')}`,
      );
      // Handover at expiry would be up to a TTL: this is the notification.
      const said = other.notes.filter((x) => x.at >= releasedAt - 2000).map((x) => `${Math.round(x.at - releasedAt)}ms ${x.line}`);
      assert.ok(handover < TTL / 3, `handover took ${handover}ms after the failover: the follower's LISTEN did not follow the new primary; the follower's engine said (ms from the release):\n${said.join('\n')}`);
      await other.elector.stop();
      await Promise.all([a.lh.close(), b.lh.close(), observer.close()]);
      await closeAll();
    });
  }
});

void describe('PostgreSQL synchronous standby: claims while it is down, and no granted token lost at failover', { skip }, () => {
  let r: Replicas | undefined;
  after(async () => {
    await closeAll();
    r?.stop();
  });

  void it('synchronous standby down: claims block, the holder stands down by its deadline, nobody else is granted; kill and promote: nothing granted is lost', async () => {
    const TTL = 3000;
    r = await replicas(true);
    assert.equal(r.syncState(), 'sync');
    const schema = `lh_sy_${Math.random().toString(36).slice(2, 8)}`;
    const url = hostsUrl([PORT, PORT + 1], schema);
    const setup = await open(url);
    await setup.migrate();

    const log: Ev[] = [];
    const a = await contender('a', url, TTL, log, { queryTimeoutMs: 3000 });
    await until(() => log.some((e) => e.kind === 'acquired'), 10_000, 'a never led');
    const b = await contender('b', url, TTL, log, { queryTimeoutMs: 3000 });
    await sleep(TTL / 2);

    // The synchronous standby goes away: every commit on the primary now waits for it.
    r.stopStandby();
    const downAt = performance.now();
    const probe = await open(url, { queryTimeoutMs: 2000 });
    const probeStarted = performance.now();
    await assert.rejects(probe.claim([{ name: 'probe', holder: 'p', ttlMs: 60_000, expect: null, nextNonce: 'p1' }]), StoreUnavailableError);
    const probeMs = Math.round(performance.now() - probeStarted);
    const lostAt = await until(() => log.some((e) => e.kind === 'lost' && e.at > downAt), 3 * TTL, "the holder's term never ended");
    const lost = log.find((e) => e.kind === 'lost' && e.at > downAt)!;
    const lastRenewed = log.filter((e) => e.who === lost.who && (e.kind === 'renewed' || e.kind === 'acquired') && e.at < downAt).at(-1)!;
    // Its local deadline is at most a TTL after the renewal was sent, so before lastRenewed + TTL.
    const overrun = Math.round(lostAt - (lastRenewed.at + TTL));
    assert.ok(overrun <= 250, `the holder's term ended ${overrun}ms after its last renewal + TTL: held past its deadline`);
    await sleep(TTL);
    const grantedWhileDown = log.filter((e) => e.kind === 'acquired' && e.at > downAt);
    assert.deepEqual(grantedWhileDown, [], 'a term was granted while the synchronous standby was down');

    r.startStandby();
    const upAt = performance.now();
    await until(() => r!.syncState() === 'sync', 20_000, 'the standby never became synchronous again');
    const ledAgainAt = await until(() => log.some((e) => e.kind === 'acquired' && e.at > upAt), 5 * TTL, 'nobody led after the standby came back');
    // The claim that timed out was committed on the primary, waiting for the standby: it lands now
    // (an unknown outcome, as StoreUnavailableError says; its holder never learned it held the lease).
    const probeRow = (await setup.list({ name: 'probe' }))[0];
    assert.ok(probeRow === undefined || probeRow.holder === 'p', `probe row ${JSON.stringify(probeRow, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`);

    // Granted and acknowledged: on the synchronous standby too. Kill the primary, promote.
    const [acked] = await setup.claim([{ name: 'acked', holder: 'h', ttlMs: 60_000, expect: null, nextNonce: 'k1' }]);
    assert.equal(acked!.outcome, 'acquired');
    const ackedToken = (acked as { token: bigint }).token;
    const granted = acquiredTokens(log);
    const maxGranted = granted.reduce((x, y) => (x > y ? x : y));
    r.stopPrimary();
    const deadAt = performance.now();
    r.promote();

    const promoted = await open(`${r.standbyUrl}?schema=${schema}`);
    try {
      const history = await promoted.history({ name: 'job', limit: 1000 });
      for (const t of granted) assert.ok(history.some((h) => (h.event === 'acquired' || h.event === 'takeover') && h.token === t), `token ${t}, granted before the kill, is not on the promoted standby`);
      const [row] = await promoted.list({ name: 'acked' });
      assert.equal(row?.token, ackedToken, 'the acknowledged claim is on the promoted standby');
      assert.equal(row?.holder, 'h');
      await promoted.revoke('acked', 'test: the next term');
      const [next] = await promoted.claim([{ name: 'acked', holder: 'h2', ttlMs: 60_000, expect: null, nextNonce: 'k2' }]);
      assert.equal(next!.outcome, 'acquired');
      assert.ok((next as { token: bigint }).token > ackedToken, `the next token ${(next as { token: bigint }).token} is not above ${ackedToken}`);
      // The contenders, through the multi-host URL, carry on on the promoted standby.
      await until(() => log.some((e) => e.at > deadAt && (e.kind === 'renewed' || e.kind === 'acquired')), 4 * TTL, 'nobody led after the promotion');
      const all = acquiredTokens(log);
      assertIncreasing(all);
      for (const t of all.slice(granted.length)) assert.ok(t > maxGranted, `token ${t} after the failover is not above ${maxGranted}`);
      console.log(
        `# synchronous standby down: an acquisition failed as unavailable after ${probeMs}ms (query timeout 2000ms); ` +
          `the holder's term ended ${Math.round(lostAt - downAt)}ms after the standby stopped (${lost.detail}; ${-overrun}ms before last renewal + TTL ${TTL}ms); ` +
          `no term granted while it was down; led again ${Math.round(ledAgainAt - upAt)}ms after it came back ` +
          `(the timed-out acquisition ${probeRow === undefined ? 'did not land' : 'landed then, unknown to its caller'}). ` +
          `Primary killed and standby promoted: every granted token (${granted.join(', ')}; acknowledged ${ackedToken}) is on the promoted standby; next tokens ${[(next as { token: bigint }).token, ...all.slice(granted.length)].join(', ')}`,
      );
    } finally {
      await promoted.close();
    }
    await Promise.all([a.elector.stop(), b.elector.stop()]);
    await Promise.all([a.lh.close(), b.lh.close(), setup.close(), probe.close()]);
  });
});
