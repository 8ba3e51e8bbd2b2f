/**
 * MariaDB asynchronous failover (scripts/services/mariadb-pair.mjs: a private primary and replica
 * on loopback, never the machine's own server): the replica stops applying the primary's
 * writes, the primary is killed with SIGKILL, the replica is promoted. Holders and a plain store
 * reach the promoted server through the multi-host URL on their own. Tokens issued after the
 * promotion must be above every token the old primary issued, the writes the replica never
 * applied included (MariaDB has no timeline: the store's answer is the server clock in every
 * token, ../../src/backends/mysql/claim.ts, TOKENS), and by the promoted server's record no two
 * holders held the lease at once.
 *
 * Ports: LEASEHOLD_TEST_MYSQL_REPLICA_PORT (default 3307; the replica on the next port). It
 * starts and kills servers, so the test runner runs it in the last phase, alone.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { MysqlStore } from '../../src/backends/mysql/store.js';
import type { HistoryEntry, LeaseInfo } from '../../src/backends/store.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import type { Term } from '../../src/core/lease.js';
import { Leasehold } from '../../src/core/leasehold.js';

interface MariadbPair {
  url: string;
  replicaUrl: string;
  gtid(): { primary: string | null; replica: string | null };
  waitReplicaCaughtUp(timeoutS?: number): string;
  stopReplicaSql(): void;
  killPrimary(): boolean;
  promote(): void;
  sql(which: 'primary' | 'replica', statement: string): string | null;
  stop(): void;
}
interface PairModule {
  mariadbBinaries(): object | null;
  startMariadbPair(o?: { log?: (m: string) => void }): Promise<MariadbPair>;
}

const pairModule = (await import(new URL('../../../scripts/services/mariadb-pair.mjs', import.meta.url).href)) as PairModule;

function skipReason(): string | false {
  const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'mysql').split(',').map((x) => x.trim());
  if (!wanted.includes('mysql')) return 'mysql not selected (LEASEHOLD_TEST_STORES)';
  if (process.getuid?.() !== 0) return 'starting private MariaDB servers as the mysql user needs root';
  if (pairModule.mariadbBinaries() === null) return 'no MariaDB server binaries (mariadbd, mariadb-install-db, mariadb): install mariadb-server';
  return false;
}
const skip = skipReason();
if (skip !== false) process.stdout.write(`# mysql failover skipped: ${skip}\n`);

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const TTL = 1000;
const max = (xs: readonly bigint[]): bigint => xs.reduce((a, b) => (a > b ? a : b));
const min = (xs: readonly bigint[]): bigint => xs.reduce((a, b) => (a < b ? a : b));

/**
 * `fn` again while the store says it is unavailable: how a caller rides out a failover. A
 * multi-host store answers the first call after its server died with that error and sends the
 * next to the next host.
 */
let unavailable = 0;
async function retrying<T>(fn: () => Promise<T>, deadlineMs = 30_000): Promise<T> {
  const deadline = performance.now() + deadlineMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!(err instanceof StoreUnavailableError) || performance.now() > deadline) throw err;
      unavailable++;
      await sleep(100);
    }
  }
}

/** `n` acquisitions of `name`, each released, through `store`: the tokens they got. */
async function cycle(store: MysqlStore, name: string, n: number): Promise<bigint[]> {
  const tokens: bigint[] = [];
  for (let i = 0; i < n; i++) {
    const holder = `direct-${i}-${Math.random().toString(36).slice(2, 6)}`;
    const nonce = `n${i}${Math.random().toString(36).slice(2, 8)}`;
    const r = await retrying(() => store.claim([{ name, holder, ttlMs: 60_000, expect: null, nextNonce: nonce }]));
    assert.equal(r[0]!.outcome, 'acquired', `${name}: ${JSON.stringify(r[0], (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`);
    tokens.push((r[0] as { token: bigint }).token);
    await retrying(() => store.release({ name, holder, expect: [nonce] }));
  }
  return tokens;
}

/**
 * The store's own record of `name` (history in id order): a term starts either on a free row
 * ('acquired') or by taking over the term the record says is live ('takeover', which the claim
 * rule allows only once that term expired by the server's clock), and tokens only grow.
 */
function assertNoOverlapInRecord(history: readonly HistoryEntry[], name: string): void {
  let live: string | null = null;
  let last = 0n;
  for (const h of history.filter((e) => e.name === name)) {
    const at = `${name} history #${h.id} (${h.event} by ${h.holder ?? '-'}, token ${h.token})`;
    if (h.event === 'acquired') assert.equal(live, null, `${at}: acquired while ${live} held it`);
    if (h.event === 'takeover') assert.equal(h.previousHolder, live, `${at}: took over from ${h.previousHolder}, but the record's holder was ${live}`);
    if (h.event === 'acquired' || h.event === 'takeover') {
      assert.ok(h.token > last, `${at}: token not above ${last}`);
      last = h.token;
      live = h.holder;
    } else {
      live = null;
    }
  }
}

interface Held {
  token: bigint;
  by: number;
  startedAt: number;
  endedAt?: number;
}

void describe('MariaDB async failover through a multi-host URL', { skip }, () => {
  let pair: MariadbPair | undefined;
  after(() => pair?.stop());

  void it('a promoted replica that missed writes issues tokens above every one the old primary issued, and holders find it', async (t) => {
    const began = performance.now();
    pair = await pairModule.startMariadbPair({ log: (m) => t.diagnostic(m) });
    const p = pair;
    // Connects to a dead or stopped host give up after a second, not mysql2's ten.
    const url = `${p.url}?connect_timeout=1`;
    const opened: MysqlStore[] = [];
    const open = async (): Promise<MysqlStore> => {
      const s = await MysqlStore.create({ url, queryTimeoutMs: 3000 });
      opened.push(s);
      return s;
    };
    const clients: Leasehold[] = [];
    const held: Held[] = [];
    const electors: ReturnType<Leasehold['elect']>[] = [];
    const elect = (i: number): void => {
      electors[i] = clients[i]!.elect(
        'job',
        {
          onElected: (term: Term) => {
            const h: Held = { token: term.token, by: i, startedAt: performance.now() };
            held.push(h);
            // The abort is the moment the holder stops believing it holds, whatever the handler does.
            term.signal.addEventListener('abort', () => (h.endedAt = performance.now()), { once: true });
          },
        },
        { ttl: TTL },
      );
    };
    const waitFor = async (what: string, ok: () => boolean, ms = 30_000): Promise<void> => {
      const deadline = performance.now() + ms;
      while (!ok()) {
        if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await sleep(20);
      }
    };
    try {
      const direct = await open();
      await direct.migrate();
      for (let i = 0; i < 2; i++) clients.push(new Leasehold({ store: await open() }));
      elect(0);
      await waitFor('a first term', () => held.length === 1);
      elect(1);
      const seenOther = await cycle(direct, 'other', 3);
      await sleep(TTL); // renewals under the first term
      p.waitReplicaCaughtUp();
      const seenTerms = held.map((h) => h.token);
      const seenByReplica = [...seenTerms, ...seenOther];

      // From here the replica receives the binlog but applies nothing: all of this is lost.
      p.stopReplicaSql();
      const first = held[0]!;
      await electors[first.by]!.stop(); // a handover the replica never sees
      await waitFor('the handover', () => held.length === 2);
      elect(first.by);
      const lostOther = await cycle(direct, 'other', 4);
      const lostFresh = await cycle(direct, 'fresh', 2);
      await sleep(TTL / 2); // renewals of the new term
      const lostTerms = held.slice(seenTerms.length).map((h) => h.token);
      const issuedBefore = [...seenByReplica, ...lostTerms, ...lostOther, ...lostFresh];
      const gtidAtKill = p.gtid();
      assert.notEqual(gtidAtKill.primary, gtidAtKill.replica, 'the replica is behind the primary when it dies');
      // What the replica holds for the lease at promotion: its SQL thread is stopped, so this is final.
      const frozenJob = JSON.parse(
        p.sql('replica', `SELECT JSON_OBJECT('holder', holder, 'token', token, 'expires', expires_at_us) FROM test.leasehold_leases WHERE name = 'job'`)!,
      ) as { holder: string | null; token: number; expires: number | null };

      const killedAt = performance.now();
      p.killPrimary();
      // Noticing a dead primary and promoting takes longer than a lease's TTL in practice (and
      // here): every old term has ended at its holder before the promoted server takes a claim.
      await sleep(2 * TTL);
      const heldAtPromotion = held.length;
      p.promote();
      const promotedAt = performance.now();
      const promotedStore = await MysqlStore.create({ url: p.replicaUrl });
      opened.push(promotedStore);

      await waitFor('a term on the promoted server', () => held.length > heldAtPromotion);
      const leaderBackMs = performance.now() - promotedAt;
      unavailable = 0;
      const afterOther = await cycle(direct, 'other', 2);
      const afterFresh = await cycle(direct, 'fresh', 1);
      await sleep(2 * TTL); // the dust settles: one leader, renewing
      const afterTerms = held.slice(heldAtPromotion).map((h) => h.token);
      const issuedAfter = [...afterTerms, ...afterOther, ...afterFresh];

      t.diagnostic(`gtid at the kill: primary ${gtidAtKill.primary}, replica ${gtidAtKill.replica}`);
      t.diagnostic(`old primary issued: terms ${[...seenTerms, ...lostTerms].join(', ')}; other ${[...seenOther, ...lostOther].join(', ')}; fresh ${lostFresh.join(', ')}`);
      t.diagnostic(`the replica applied: terms ${seenTerms.join(', ')}; other ${seenOther.join(', ')}; fresh none (its job row: ${frozenJob.holder ?? 'free'}, token ${frozenJob.token})`);
      t.diagnostic(`promoted replica issued: terms ${afterTerms.join(', ')}; other ${afterOther.join(', ')}; fresh ${afterFresh.join(', ')}`);
      t.diagnostic(`a leader ${leaderBackMs.toFixed(0)}ms after the promotion (${(promotedAt - killedAt).toFixed(0)}ms after the kill); the direct store's first ${unavailable} call(s) after it answered StoreUnavailableError (now on ${direct.connector.current}); all of it ${((performance.now() - began) / 1000).toFixed(1)}s`);

      const highest = max(issuedBefore);
      assert.ok(min(issuedAfter) > highest, `a token issued after the promotion (${min(issuedAfter)}) is not above ${highest}, issued before it`);
      assert.ok(afterFresh[0]! > max(lostFresh), `a name whose every write was lost got token ${afterFresh[0]}, not above ${max(lostFresh)} that the old primary issued`);
      for (let i = 1; i < held.length; i++) {
        assert.ok(held[i]!.token > held[i - 1]!.token, `term tokens increase: ${held.map((h) => h.token).join(' < ')}`);
      }

      // By the promoted server's record, no two holders held the lease at once.
      const history = await promotedStore.history({ name: 'job' });
      assertNoOverlapInRecord(history, 'job');
      const firstAfter = history.find((h) => h.token > highest && (h.event === 'acquired' || h.event === 'takeover'));
      assert.ok(firstAfter !== undefined, 'the promoted server recorded the new term');
      if (frozenJob.holder !== null) {
        assert.equal(firstAfter.event, 'takeover', 'the term the replica had on record was live: only a takeover can follow it');
        assert.ok(firstAfter.atMs * 1000 >= frozenJob.expires!, `the new term began at ${firstAfter.atMs}ms, before the recorded term expired at ${frozenJob.expires! / 1000}ms`);
      }
      // And by the holders' own clocks: each term ended before the next began.
      const byStart = [...held].sort((a, b) => a.startedAt - b.startedAt);
      for (let i = 1; i < byStart.length; i++) {
        const prev = byStart[i - 1]!;
        assert.ok(prev.endedAt !== undefined && prev.endedAt <= byStart[i]!.startedAt, `term ${prev.token} (holder ${prev.by}) was still held when term ${byStart[i]!.token} began`);
      }
      const [now] = (await promotedStore.list({ name: 'job' })) as LeaseInfo[];
      assert.equal(electors.filter((e) => e.isLeader).length, 1, 'one leader after the failover');
      assert.equal(now?.token, afterTerms[afterTerms.length - 1], 'the leader holds the latest term on the promoted server');
    } finally {
      await Promise.allSettled(electors.map((e) => e.stop()));
      await Promise.allSettled(clients.map((c) => c.close()));
      await Promise.allSettled(opened.map((s) => s.close()));
      p.stop();
      pair = undefined;
    }
  });
});
