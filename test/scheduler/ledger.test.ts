/**
 * The slot ledger against real PostgreSQL and SQLite: claims and completions are fenced by the
 * lease row, so a stale term can neither claim nor complete a slot a later term has.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import type { SlotLedgerPort } from '../../src/scheduler/ledger.js';
import { openSlotLedger } from '../../src/cli/cron.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'sqlite')) {
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
      const termA = await take('host-a', 400);
      const refA = { name, holder: termA.holder, token: termA.token };
      assert.equal((await claimFor(refA, 's1')).outcome, 'claimed');
      // A's claim is idempotent within its term (a retry after an unknown outcome).
      assert.equal((await claimFor(refA, 's1')).outcome, 'claimed');
      await new Promise((r) => setTimeout(r, 500));
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
