/**
 * leaseholdCoordinator's close() with a job running, in-process with real node-cron 4 and a real
 * store: the job's signal aborts, and close() waits for node-cron to report the job settled
 * before it closes the ledger, so the slot is recorded 'interrupted' (with why), not left
 * 'claimed' for a next leader's takeover to find.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import cron from 'node-cron';
import { leaseholdCoordinator } from '../../src/node-cron/index.js';
import { makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';
import { ledgerRows, until } from './replicas.js';

const kinds = selectedStores().filter((k): k is StoreKind => k === 'postgres' || k === 'sqlite' || k === 'mysql');
const stores: TestStore[] = [];
after(async () => {
  for (const s of stores) await s.cleanup();
});

void describe('leaseholdCoordinator.close()', () => {
  for (const kind of kinds) {
    void it(`on ${kind}: close() while a job runs aborts its signal and records the slot interrupted, not claimed`, async () => {
      const ts = await makeTestStore(kind);
      stores.push(ts);
      // A long TTL: a slot left 'claimed' would stay so while the test looks.
      const coordinator = leaseholdCoordinator({ store: ts.url }, { ttl: '10s' });
      let running: { slot: string; aborted: boolean } | undefined;
      let settled = false;
      const task = cron.schedule(
        '* * * * * *',
        async (ctx) => {
          const run = coordinator.slot(ctx);
          if (run === undefined || running !== undefined) return;
          running = { slot: run.slot, aborted: false };
          // A job that stops when told, a moment after: close() must wait for it.
          await new Promise<void>((resolve) => run.signal.addEventListener('abort', () => resolve(), { once: true }));
          running.aborted = true;
          await new Promise((r) => setTimeout(r, 200));
          settled = true;
        },
        { name: 'close-tick', distributed: true, runCoordinator: coordinator },
      );
      coordinator.watch(task);
      let closed = false;
      let settledAtClose = false;
      try {
        // Startup, the first attempt at the lease and a one-second slot: seconds on a loaded machine.
        await until('a job is running', () => running !== undefined, 20_000);
        await task.stop();
        await coordinator.close();
        closed = true;
        settledAtClose = settled;
        assert.ok(running!.aborted, "the job's signal did not abort on close()");
      } finally {
        if (!closed) await coordinator.close();
        await task.destroy();
      }
      const row = (await ledgerRows(ts.url, 'close-tick')).find((r) => r.key === running!.slot);
      assert.equal(row?.status, 'interrupted', `the slot running at close() is ${row?.status} (${row?.reason ?? ''})`);
      assert.match(row?.reason ?? '', /term ended while the job ran/);
      assert.ok(settledAtClose, 'close() resolved before the running job settled');
    });
  }
});
