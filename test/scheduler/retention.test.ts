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
      const now = await store.now();
      assert.ok(started.slotAtMs! <= now && started.slotAtMs! > now - MINUTE, `the run is the newest slot due (${started.slot}), not the next one`);
      const skipped = events.filter((e) => e.event === 'skipped');
      // The hour's window holds 59 or 60 slots before the one run (the boundary may fall either side).
      assert.ok(skipped.length >= 58, `${skipped.length} missed slots recorded skipped`);
      assert.ok(skipped.every((e) => e.reason?.includes('missed') === true));
      await cron.stop();
    });
  });
}
