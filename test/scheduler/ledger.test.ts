/**
 * The slot ledger against real PostgreSQL and SQLite: claims and completions are fenced by the
 * lease row, so a stale term can neither claim nor complete a slot a later term has.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import type { SlotLedgerPort } from '../../src/scheduler/ledger.js';
import { openSlotLedger } from '../../src/backends/index.js';
import { TEST_PG_URL, makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';
import { PostgresSlotLedger } from '../../src/backends/postgres/slots.js';
import type { PgPoolLike } from '../../src/backends/postgres/store.js';
import pg from 'pg';

for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'sqlite' || k === 'mysql')) {
  void describe(`slot ledger on ${kind}`, () => {
    let ts: TestStore;
    let ledger: SlotLedgerPort;
    before(async () => {
      ts = await makeTestStore(kind);
      ledger = await openSlotLedger(ts.store, ts.url);
    });
    after(async () => {
      await ledger.close();
      await ts.cleanup();
    });

    const claimFor = (t: { name: string; holder: string; token: bigint }, key: string, slotAtMs: number | null = 0) =>
      ledger.claim({ ...t, key, slotAtMs, onInterrupted: 'rerun', rerunFailed: false });

    void it('a term that lost its lease can neither claim nor complete; the next term reruns the interrupted slot', async () => {
      const name = `slot-${randomBytes(4).toString('hex')}`;
      // Terms taken with the store's own claim (no renewals): A's expires by the store's clock.
      const take = async (holder: string, ttlMs: number) => {
        const [r] = await ts.store.claim([{ name, holder, ttlMs, expect: null, nextNonce: randomBytes(8).toString('base64url') }]);
        assert.equal(r!.outcome, 'acquired');
        return { holder, token: r!.token!, name };
      };
      // 3 s, not less: a ledger call's transaction is bounded by what is left of its term
      // (idle_in_transaction_session_timeout on PostgreSQL), so on a loaded host a very short
      // term ends its own claim's transaction before it commits (CI saw a 400 ms term's claim
      // fail with "Connection terminated unexpectedly").
      const A_TTL_MS = 3000;
      const termA = await take('host-a', A_TTL_MS);
      const refA = { name, holder: termA.holder, token: termA.token };
      assert.equal((await claimFor(refA, 's1')).outcome, 'claimed');
      // A's claim is idempotent within its term (a retry after an unknown outcome).
      assert.equal((await claimFor(refA, 's1')).outcome, 'claimed');
      // A's term ends by the store's clock: wait until the store says so.
      for (const end = Date.now() + 10 * A_TTL_MS; ; ) {
        const row = (await ts.store.list({ name }))[0];
        if (row === undefined || row.expiresAtMs === null || row.expiresAtMs <= row.storeNowMs || row.holder !== 'host-a') break;
        assert.ok(Date.now() < end, 'term A never expired');
        const left = Math.max(10, row.expiresAtMs - row.storeNowMs);
        await new Promise((r) => setTimeout(r, left));
      }
      const termB = await take('host-b', 10_000);
      assert.ok(termB.token > termA.token);
      const refB = { name, holder: termB.holder, token: termB.token };
      assert.equal((await claimFor(refA, 's2')).outcome, 'fenced', 'a stale term cannot claim a new slot');
      const stale = await ledger.interruptStale(refB);
      assert.equal(stale.interrupted, 1);
      const rerun = await claimFor(refB, 's1');
      assert.equal(rerun.outcome, 'claimed');
      assert.equal(rerun.outcome === 'claimed' ? rerun.rerunOf : null, termA.token);
      const refused = await ledger.complete({ ...refA, key: 's1', status: 'succeeded', exitCode: 0, reason: null });
      assert.equal(refused.completed, false, 'a stale term cannot complete a slot a later term re-claimed');
      assert.equal((await ledger.complete({ ...refB, key: 's1', status: 'succeeded', exitCode: 0, reason: null })).completed, true);
      const again = await claimFor(refB, 's1');
      assert.equal(again.outcome, 'done');
      const rows = await ledger.records(name);
      assert.deepEqual(
        rows.map((r) => [r.key, r.status, r.token]),
        [['s1', 'succeeded', termB.token]],
      );
      assert.ok(rows[0]!.startedAtMs !== null && rows[0]!.endedAtMs! >= rows[0]!.startedAtMs);
    });

    void it('a slot not yet due by the store clock is refused as early; skip records only slots with no row', async () => {
      const name = `slot-${randomBytes(4).toString('hex')}`;
      const lh = new Leasehold({ store: await ts.open() });
      const term = await lh.lease(name, { ttl: 5000 }).acquire({ wait: false });
      const ref = { name, holder: term.holder, token: term.token };
      const early = await claimFor(ref, 'future', Date.now() + 60_000);
      assert.equal(early.outcome, 'early');
      assert.equal((await claimFor(ref, 'a', 1000)).outcome, 'claimed');
      const s = await ledger.skip({ ...ref, reason: 'test', slots: [{ key: 'a', slotAtMs: 1000 }, { key: 'b', slotAtMs: 2000 }] });
      assert.deepEqual([s.fenced, s.skipped], [false, 1]);
      const rows = await ledger.records(name);
      assert.deepEqual(rows.map((r) => [r.key, r.status]), [['a', 'claimed'], ['b', 'skipped']]);
      assert.deepEqual((await ledger.records(name, { sinceMs: 1500 })).map((r) => r.key), ['b']);
      // --on-interrupted skip: a later term records the interrupted slot skipped instead of rerunning it.
      await lh.close();
      const lh2 = new Leasehold({ store: await ts.open() });
      const t2 = await lh2.lease(name, { ttl: 5000 }).acquire({ wait: false });
      const r = await ledger.claim({ name, holder: t2.holder, token: t2.token, key: 'a', slotAtMs: 1000, onInterrupted: 'skip', rerunFailed: false });
      assert.equal(r.outcome, 'done');
      assert.equal(r.outcome === 'done' ? r.record.status : '', 'skipped');
      await lh2.close();
    });
  });
}

/**
 * A pool whose clients stop sending once a statement matching `at` has run, until `thaw()`: what
 * a SIGSTOP between two statements of one transaction looks like from the server.
 */
function freezingPool(pool: pg.Pool, at: RegExp): { pool: PgPoolLike; frozen: Promise<void>; thaw(): void } {
  let thaw = (): void => {};
  const thawed = new Promise<void>((r) => (thaw = r));
  let onFrozen = (): void => {};
  const frozen = new Promise<void>((r) => (onFrozen = r));
  const wrapped = {
    query: pool.query.bind(pool),
    async connect() {
      const c = await pool.connect();
      let stop = false;
      const query = async (text: string, values?: unknown[]) => {
        if (stop) await thawed;
        const r = await c.query(text, values);
        if (at.test(text)) {
          stop = true;
          onFrozen();
        }
        return r;
      };
      return new Proxy(c, {
        get: (t, k) => (k === 'query' ? query : typeof (t as never)[k] === 'function' ? ((t as never)[k] as (...a: unknown[]) => unknown).bind(t) : (t as never)[k]),
      });
    },
  } as unknown as PgPoolLike;
  return { pool: wrapped, frozen, thaw };
}

if (selectedStores().includes('postgres')) {
  void describe('slot ledger on postgres: a holder frozen mid-call', () => {
    void it('does not hold up a takeover past its term: PostgreSQL ends the idle transaction that locks the lease row, and nothing of it lands', async () => {
      const ts = await makeTestStore('postgres');
      const schema = new URL(ts.url).searchParams.get('schema')!;
      const raw = new pg.Pool({ connectionString: TEST_PG_URL, max: 2 });
      const f = freezingPool(raw, /FOR SHARE/);
      const ledger = new PostgresSlotLedger({ pool: f.pool, schema });
      try {
        const name = `frozen-${randomBytes(4).toString('hex')}`;
        const TTL = 1000;
        const [a] = await ts.store.claim([{ name, holder: 'host-a', ttlMs: TTL, expect: null, nextNonce: randomBytes(8).toString('base64url') }]);
        assert.equal(a!.outcome, 'acquired');
        // A's claim reads the lease row FOR SHARE, and then its process freezes.
        const stuck = ledger.claim({ name, holder: 'host-a', token: a!.token!, key: 's1', slotAtMs: 0, onInterrupted: 'rerun', rerunFailed: false });
        stuck.catch(() => {});
        await f.frozen;
        // B contends until it holds the lease, for up to ten TTLs: the server ends A's transaction
        // when A's term runs out (at most one TTL after the freeze). Without that bound B is told
        // "held" and then "busy" (the row is locked) for as long as A stays frozen.
        const contend = async (): Promise<string> => {
          const [x] = await ts.store.claim([{ name, holder: 'host-b', ttlMs: 10_000, expect: null, nextNonce: randomBytes(8).toString('base64url') }]);
          return x!.outcome;
        };
        const deadline = Date.now() + 10 * TTL;
        const seen: string[] = [];
        let outcome = await contend();
        while (outcome !== 'acquired' && Date.now() < deadline) {
          seen.push(outcome);
          await new Promise((r) => setTimeout(r, 100));
          outcome = await contend();
        }
        f.thaw();
        assert.equal(outcome, 'acquired', `a takeover waited on the frozen holder past ten TTLs (${[...new Set(seen)].join(', ')})`);
        // A thaws: its transaction was ended and rolled back, and the caller is told so.
        await assert.rejects(stuck, (e: Error & { code?: string }) => e.code === 'STORE_UNAVAILABLE' && /sat idle/.test(e.message));
        assert.deepEqual(await ledger.records(name), [], 'the frozen claim landed nothing');
      } finally {
        f.thaw();
        await ledger.close();
        await raw.end();
        await ts.cleanup();
      }
    });
  });
}
