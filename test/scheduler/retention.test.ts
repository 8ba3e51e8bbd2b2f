/**
 * Retention against the catch-up it must not change (src/scheduler/retention.ts): a schedule
 * pruned down to its last row still counts as one that ran before, so when it starts again its
 * missed slots inside the window are owed ('latest' runs the newest and records the rest
 * skipped). Had the prune deleted every row, the cron would take the name for a new schedule,
 * owe nothing and wait for its next slot. Real stores (PostgreSQL, SQLite), the real startCron.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { newNonce } from '../../src/core/identity.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { openSlotLedger } from '../../src/backends/index.js';
import { startCron, type SlotEvent } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { pruneLedger } from '../../src/scheduler/retention.js';
import { makeTestStore, selectedStores, type StoreKind } from '../helpers/stores.js';
import { until } from '../cli/helpers.js';

const kinds = selectedStores().filter((k): k is StoreKind => k === 'postgres' || k === 'sqlite');
const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;

for (const kind of kinds) {
  void describe(`retention and catch-up on ${kind}`, () => {
    void it('a schedule stopped two days ago, pruned to its newest row, catches up its window when it starts again', async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const store = await ts.open();
      const ledger = await openSlotLedger(store, ts.url);
      const leasehold = new Leasehold({ store });
      cleanups.push(() => ledger.close(), () => leasehold.close());
      const name = 'minutely';
      // Two days of history, written by a term of the schedule's own lease, which then ended.
      const nonce = newNonce();
      const [term] = await store.claim([{ name, holder: 'old-host', ttlMs: 60_000, expect: null, nextNonce: nonce }]);
      assert.ok(term?.outcome === 'acquired');
      const stoppedAt = Math.floor(((await store.now()) - 2 * DAY) / MINUTE) * MINUTE;
      const slots = Array.from({ length: 200 }, (_, i) => stoppedAt - (199 - i) * MINUTE).map((t) => ({ key: new Date(t).toISOString(), slotAtMs: t }));
      await ledger.skip({ name, holder: 'old-host', token: term.token, reason: 'history (test)', slots });
      assert.equal(await store.release({ name, holder: 'old-host', expect: [nonce] }), true);

      const pruned = await pruneLedger(ledger, { name, olderThan: '1d', keep: 1 });
      assert.equal(pruned.deleted, 199);
      assert.deepEqual((await ledger.records(name)).map((r) => r.slotAtMs), [stoppedAt]);

      const events: SlotEvent[] = [];
      const cron = startCron(leasehold, ledger, name, { schedule: everySchedule(MINUTE), catchUpWindow: '1h', ttl: '3s' }, () => undefined);
      cron.on('slot', (e) => events.push(e));
      cleanups.push(() => cron.stop());
      // A replica catches up at startup, in its first term: a few store round trips, not a minute.
      await until('the catch-up run started', () => events.some((e) => e.event === 'started'), 15_000);
      const started = events.find((e) => e.event === 'started')!;
      // store.now() is known to within its round trip: CI2 started the minute's slot as it came due
      // and read the store's clock a few ms "before" it.
      const asked = performance.now();
      const now = await store.now();
      const rtt = performance.now() - asked;
      assert.ok(started.slotAtMs! <= now + rtt && started.slotAtMs! > now - MINUTE, `the run is the newest slot due (${started.slot}; the store's clock read ${new Date(now).toISOString()} within ${rtt.toFixed(1)} ms), not the next one`);
      const skipped = events.filter((e) => e.event === 'skipped');
      // The hour's window holds 59 or 60 slots before the one run (the boundary may fall either side).
      assert.ok(skipped.length >= 58, `${skipped.length} missed slots recorded skipped`);
      assert.ok(skipped.every((e) => e.reason?.includes('missed') === true));
      await cron.stop();
    });

    void it("startCron prunes by itself: the replica that runs a slot deletes the rows past retention, keeping the newest, and `retention: false` keeps all", async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const store = await ts.open();
      const ledger = await openSlotLedger(store, ts.url);
      const leasehold = new Leasehold({ store });
      cleanups.push(() => ledger.close(), () => leasehold.close());
      // 300 rows of each schedule from 40 days ago (past the default 30 d), written by a term that ended.
      const old = Math.floor(((await store.now()) - 40 * DAY) / MINUTE) * MINUTE;
      for (const name of ['kept-all', 'pruned']) {
        const nonce = newNonce();
        const [term] = await store.claim([{ name, holder: 'old-host', ttlMs: 60_000, expect: null, nextNonce: nonce }]);
        assert.ok(term?.outcome === 'acquired');
        const slots = Array.from({ length: 300 }, (_, i) => old + i * MINUTE).map((t) => ({ key: new Date(t).toISOString(), slotAtMs: t }));
        await ledger.skip({ name, holder: 'old-host', token: term.token, reason: 'history (test)', slots });
        assert.equal(await store.release({ name, holder: 'old-host', expect: [nonce] }), true);
      }
      const runs = new Map<string, number>();
      const job = (name: string) => () => void runs.set(name, (runs.get(name) ?? 0) + 1);
      const defaults = startCron(leasehold, ledger, 'pruned', { schedule: everySchedule(1000), ttl: '3s' }, job('pruned'));
      const none = startCron(leasehold, ledger, 'kept-all', { schedule: everySchedule(1000), ttl: '3s', retention: false }, job('kept-all'));
      cleanups.push(() => defaults.stop(), () => none.stop());
      // The default keeps the newest 100 rows: the 300 old ones go down to what 100 leaves.
      await until('the default retention pruned', async () => (await ledger.records('pruned', { sinceMs: 0, untilMs: old + DAY, limit: 1000 })).length < 300, 20_000);
      await until('both schedules ran a slot', () => (runs.get('pruned') ?? 0) > 0 && (runs.get('kept-all') ?? 0) > 0, 20_000);
      await defaults.stop();
      await none.stop();
      const left = await ledger.records('pruned', { limit: 1000 });
      assert.ok(left.length >= 100, `the newest 100 rows are kept (${left.length} left)`);
      assert.ok(left.filter((r) => r.slotAtMs! < old + DAY).length <= 100, 'only rows the keep count holds are older than the horizon');
      assert.equal((await ledger.records('kept-all', { sinceMs: 0, untilMs: old + DAY, limit: 1000 })).length, 300, 'retention: false deleted nothing');
      assert.throws(() => startCron(leasehold, ledger, 'x', { schedule: everySchedule(1000), retention: { olderThan: '10m' } }, () => undefined), /shorter than the catch-up window/);
    });
  });
}
