/**
 * runOncePer on a real store: two replicas (two Leaseholds on their own connections) racing for
 * one key run it once; a failed key runs again, a succeeded one never; a term that ends while the
 * work runs records it interrupted, and the next call reruns it.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import { LeaseLostError } from '../../src/core/errors.js';
import { openSlotLedger } from '../../src/backends/index.js';
import { runOncePer, type OncePerOptions } from '../../src/scheduler/once-per.js';
import type { SlotLedgerPort } from '../../src/scheduler/ledger.js';
import { makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';

const kinds = selectedStores().filter((k): k is StoreKind => k === 'postgres' || k === 'sqlite' || k === 'mysql');
const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

async function replica(ts: TestStore): Promise<{ leasehold: Leasehold; ledger: SlotLedgerPort; options: OncePerOptions }> {
  const store = await ts.open();
  const leasehold = new Leasehold({ store });
  const ledger = await openSlotLedger(store, ts.url);
  cleanups.push(() => ledger.close(), () => leasehold.close());
  return { leasehold, ledger, options: { leasehold, ledger, name: 'migrations', ttl: '3s' } };
}

for (const kind of kinds) {
  void describe(`runOncePer on ${kind}`, () => {
    void it('two replicas racing for one key run it once; the loser learns who ran it', async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const [a, b] = [await replica(ts), await replica(ts)];
      let runs = 0;
      const work = async (): Promise<string> => {
        runs++;
        await new Promise((r) => setTimeout(r, 100));
        return 'done';
      };
      const [ra, rb] = await Promise.all([runOncePer('2026-03', work, a.options), runOncePer('2026-03', work, b.options)]);
      assert.equal(runs, 1, 'the key ran on both replicas');
      const winner = ra.ran ? ra : rb;
      const loser = ra.ran ? rb : ra;
      assert.ok(winner.ran && winner.value === 'done');
      assert.ok(!loser.ran);
      assert.equal(loser.record.status, 'succeeded');
      assert.equal(loser.record.token, winner.token);
      // Later calls, on either replica, do not run it again.
      assert.equal((await runOncePer('2026-03', work, a.options)).ran, false);
      assert.equal(runs, 1);
    });

    void it('a failed key runs again on the next call, as a rerun of the failed term', async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const a = await replica(ts);
      let failedToken = -1n;
      await assert.rejects(
        runOncePer('k', ({ token }) => {
          failedToken = token;
          throw new Error('disk full');
        }, a.options),
        /disk full/,
      );
      const rows = await a.ledger.records('migrations');
      assert.equal(rows[0]?.status, 'failed');
      assert.equal(rows[0]?.reason, 'disk full');
      const again = await runOncePer('k', ({ rerunOf, idempotencyKey }) => ({ rerunOf, idempotencyKey }), a.options);
      assert.ok(again.ran);
      assert.equal(again.value.rerunOf, failedToken);
      assert.equal(again.value.idempotencyKey, 'leasehold:migrations:slot:k');
    });

    void it('a term that ends while the work runs is recorded interrupted, rejects with LeaseLostError, and reruns next time', async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const a = await replica(ts);
      await assert.rejects(
        runOncePer('k', async ({ signal }) => {
          // The engine's own "this process may have been paused" path: every term ends at once.
          a.leasehold.suspect('manual', 'test');
          assert.ok(signal.aborted);
        }, a.options),
        (e: unknown) => e instanceof LeaseLostError,
      );
      assert.equal((await a.ledger.records('migrations'))[0]?.status, 'interrupted');
      const b = await replica(ts);
      const again = await runOncePer('k', () => 'ok', b.options);
      assert.ok(again.ran, 'an interrupted key must run again');
      assert.notEqual(again.rerunOf, null);
    });

    void it('refuses an empty key with a ConfigError', async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const a = await replica(ts);
      await assert.rejects(runOncePer('', () => 1, a.options), (e: unknown) => (e as { code?: string }).code === 'CONFIG');
    });
  });
}
