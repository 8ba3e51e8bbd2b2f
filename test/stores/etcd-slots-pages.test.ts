/**
 * The etcd slot ledger on a schedule with a long history. gRPC refuses an answer over 4 MB, and
 * a ledger row is about 250 bytes, so a read of a schedule's whole key range fails past about
 * 17,000 rows (an every-second schedule's five hours): records() (cron ls, cron history, the
 * dashboard) and interruptStale() (every new term's first call) must read in pages. And an
 * answer that is still too large must come back as a StoreError (not retryable), never as the
 * retryable outage the engine would retry for ever.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isRetryableError, StoreError } from '../../src/core/errors.js';
import { newNonce } from '../../src/core/identity.js';
import { openSlotLedger } from '../../src/backends/index.js';
import { mapLedgerError } from '../../src/backends/etcd/pages.js';
import type { EtcdRequestOp } from '../../src/backends/etcd/client.js';
import { slotKey, type SlotLedgerPort } from '../../src/scheduler/ledger.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { etcdAdmin } from '../helpers/etcd-store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const ROWS = 20_000;
const SECOND = 1000;

/** Ledger rows written straight into etcd, 100 puts per Txn and 8 Txns at a time (seconds, not minutes). */
async function seed(prefix: string, name: string, rows: Array<{ ms: number; status: string; token: bigint; reason?: string }>): Promise<void> {
  const admin = await etcdAdmin();
  try {
    const txns: EtcdRequestOp[][] = [];
    for (let i = 0; i < rows.length; i += 100) {
      txns.push(
        rows.slice(i, i + 100).map((r) => ({
          request_put: {
            key: Buffer.from(`${prefix}/slots/${encodeURIComponent(name)}/${encodeURIComponent(slotKey(r.ms))}`),
            value: Buffer.from(
              JSON.stringify({
                slotAtMs: r.ms,
                status: r.status,
                token: r.token.toString(),
                holder: 'seed-h31',
                startedAtMs: r.ms,
                endedAtMs: r.status === 'claimed' ? null : r.ms + 10,
                exitCode: r.status === 'claimed' ? null : 0,
                reason: r.reason ?? null,
              }),
            ),
          },
        })),
      );
    }
    for (let i = 0; i < txns.length; i += 8) {
      await Promise.all(txns.slice(i, i + 8).map((success) => admin.kv.txn({ compare: [], success, failure: [] }, { deadline: Date.now() + 30_000 })));
    }
  } finally {
    admin.close();
  }
}

const prefixOf = (ts: TestStore): string => new URL(ts.url).searchParams.get('prefix')!;

if (!selectedStores().includes('etcd')) {
  console.log('# etcd-slots-pages: skipped, LEASEHOLD_TEST_STORES leaves etcd out');
} else {
  void describe('etcd slot ledger: a schedule past 4 MB of rows', () => {
    let ts: TestStore;
    let store: LeaseStore;
    let ledger: SlotLedgerPort;
    const name = 'h31-every-second';
    let start = 0;
    before(async () => {
      ts = await makeTestStore('etcd');
      store = await ts.open();
      ledger = await openSlotLedger(store, ts.url);
      start = Math.floor((await store.now()) / SECOND) * SECOND - ROWS * SECOND;
      // Done rows of an old term (token 1), and three runs it left claimed: the first, one in
      // the middle and the last, which a new term must find wherever they sort.
      const claimed = new Set([0, ROWS / 2, ROWS - 1]);
      await seed(
        prefixOf(ts),
        name,
        Array.from({ length: ROWS }, (_, i) => ({ ms: start + i * SECOND, status: claimed.has(i) ? 'claimed' : 'done', token: 1n })),
      );
    });
    after(async () => {
      await ledger?.close();
      await store?.close();
      await ts?.cleanup();
    });

    void it(`records() reads ${ROWS} rows and answers the newest, in slot order`, { timeout: 120_000 }, async () => {
      const t0 = performance.now();
      const newest = await ledger.records(name, { limit: 100 });
      console.log(`# records(limit 100) over ${ROWS} rows: ${(performance.now() - t0).toFixed(0)} ms`);
      assert.equal(newest.length, 100);
      assert.deepEqual(
        newest.map((r) => r.slotAtMs),
        Array.from({ length: 100 }, (_, i) => start + (ROWS - 100 + i) * SECOND),
      );
      const everything = await ledger.records(name, { limit: ROWS * 2 });
      assert.equal(everything.length, ROWS);
      const since = await ledger.records(name, { sinceMs: start + (ROWS - 11) * SECOND });
      assert.deepEqual(
        since.map((r) => r.slotAtMs),
        Array.from({ length: 10 }, (_, i) => start + (ROWS - 10 + i) * SECOND),
      );
    });

    void it(`interruptStale() finds an old term's claimed rows among ${ROWS}`, { timeout: 120_000 }, async () => {
      const nonce = newNonce();
      const [term] = await store.claim([{ name, holder: 'h31-new-term', ttlMs: 60_000, expect: null, nextNonce: nonce }]);
      assert.ok(term?.outcome === 'acquired');
      assert.ok(term.token > 1n);
      try {
        const t0 = performance.now();
        const r = await ledger.interruptStale({ name, holder: 'h31-new-term', token: term.token });
        console.log(`# interruptStale over ${ROWS} rows: ${(performance.now() - t0).toFixed(0)} ms`);
        assert.equal(r.fenced, false);
        assert.equal(r.interrupted, 3);
        const rows = await ledger.records(name, { limit: ROWS * 2 });
        assert.deepEqual(
          rows.filter((x) => x.status === 'interrupted').map((x) => x.slotAtMs),
          [start, start + (ROWS / 2) * SECOND, start + (ROWS - 1) * SECOND],
        );
        assert.equal(rows.filter((x) => x.status === 'claimed').length, 0);
      } finally {
        await store.release({ name, holder: 'h31-new-term', expect: [nonce] });
      }
    });

    void it("an answer over gRPC's limit is a StoreError, not a retryable outage", { timeout: 120_000 }, async () => {
      // The read the ledger used to send: the schedule's whole range in one answer.
      const admin = await etcdAdmin();
      let raw: unknown;
      try {
        const key = Buffer.from(`${prefixOf(ts)}/slots/${encodeURIComponent(name)}/`);
        const end = Buffer.from(key);
        end[end.length - 1]! += 1;
        await admin.kv.txn({ compare: [], success: [{ request_range: { key, range_end: end } }], failure: [] }, { deadline: Date.now() + 30_000 });
      } catch (err) {
        raw = err;
      } finally {
        admin.close();
      }
      assert.ok(raw !== undefined, "etcd answered a read of 20,000 rows in one message: gRPC's limit is not what this test assumes");
      const mapped = mapLedgerError(raw, 'slot ledger records');
      assert.ok(mapped instanceof StoreError, `${mapped.name}: ${mapped.message}`);
      assert.equal(isRetryableError(mapped), false);
      assert.match(mapped.message, /4 MB/);
      assert.equal(mapped.cause, raw);
    });

    void it('rows with long reasons: a page that is still too large is read in smaller pages', { timeout: 120_000 }, async () => {
      const long = 'h31-long';
      // 600 rows of 10 KB each: 6 MB, past the limit in fewer rows than a page holds.
      await seed(
        prefixOf(ts),
        long,
        Array.from({ length: 600 }, (_, i) => ({ ms: start + i * SECOND, status: 'failed', token: 1n, reason: 'x'.repeat(10_000) })),
      );
      const rows = await ledger.records(long, { limit: 1000 });
      assert.equal(rows.length, 600);
      assert.equal(rows[599]!.reason!.length, 10_000);
    });
  });
}
