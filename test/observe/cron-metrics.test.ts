/**
 * `registerCronMetrics` on a real prom-client Registry and a real store's ledger: two replicas of
 * one schedule on their own registries count the slots each recorded (their sum is the
 * schedule's own count, nothing twice), both report the same last success (read from the
 * ledger, whichever replica ran it), a failing job and a missed slot are counted, and two crons
 * share one registry.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { Leasehold } from '../../src/core/leasehold.js';
import { openSlotLedger } from '../../src/backends/index.js';
import { registerCronMetrics } from '../../src/metrics/index.js';
import { startCron, type CronHandle } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import type { SlotLedgerPort } from '../../src/scheduler/ledger.js';
import { makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';
import { until } from '../cli/helpers.js';

const kinds = selectedStores().filter((k): k is StoreKind => k === 'postgres' || k === 'sqlite');
const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

async function replica(ts: TestStore): Promise<{ leasehold: Leasehold; ledger: SlotLedgerPort }> {
  const store = await ts.open();
  const leasehold = new Leasehold({ store });
  const ledger = await openSlotLedger(store, ts.url);
  cleanups.push(() => ledger.close(), () => leasehold.close());
  return { leasehold, ledger };
}

async function values(registry: Registry, metric: string): Promise<Array<{ labels: Partial<Record<string, string | number>>; value: number; metricName?: string }>> {
  const m = registry.getSingleMetric(metric);
  assert.ok(m !== undefined, `${metric} is registered`);
  return (await m.get()).values;
}

async function sample(registry: Registry, metric: string, labels: Record<string, string>): Promise<number> {
  return (await values(registry, metric)).find((v) => Object.entries(labels).every(([k, x]) => String(v.labels[k]) === x))?.value ?? 0;
}

for (const kind of kinds) {
  void describe(`cron metrics on ${kind}`, () => {
    void it('two replicas: counts add up to the ledger, both report its last success, failures are counted', async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const name = 'nightly';
      const crons: CronHandle[] = [];
      const registries = [new Registry(), new Registry()];
      let runs = 0;
      for (const registry of registries) {
        const { leasehold, ledger } = await replica(ts);
        const cron = startCron(leasehold, ledger, name, { schedule: everySchedule(1000), ttl: '3s' }, () => {
          runs++;
          // Every fourth run fails: counted as failed, and not a success.
          return runs % 4 === 0 ? { exitCode: 1, reason: 'exit 1' } : undefined;
        });
        crons.push(cron);
        cleanups.push(() => cron.stop());
        registerCronMetrics(cron, { registry, minIntervalMs: 0 });
      }
      const total = async (outcome: string): Promise<number> => (await Promise.all(registries.map((r) => sample(r, 'leasehold_cron_slots_total', { schedule: name, outcome })))).reduce((a, b) => a + b, 0);
      // A slot a second: eight outcomes take about 8 s; the bound is for a loaded host.
      await until('eight slot outcomes were recorded', async () => (await total('succeeded')) + (await total('failed')) >= 8, 40_000);
      for (const c of crons) await c.stop();
      const rows = await crons[0]!.ledger.records(name, { limit: 1000 });
      const count = (status: string): number => rows.filter((r) => r.status === status).length;
      assert.equal(await total('succeeded'), count('succeeded'), 'succeeded, summed over replicas, is the ledger\'s count');
      assert.equal(await total('failed'), count('failed'), 'failed, summed over replicas, is the ledger\'s count');
      assert.ok(count('failed') >= 1, 'a failing run was recorded');
      const newest = Math.max(...rows.filter((r) => r.status === 'succeeded').map((r) => r.endedAtMs!));
      for (const registry of registries) {
        const last = await sample(registry, 'leasehold_cron_last_success_timestamp_seconds', { schedule: name });
        assert.equal(last, newest / 1000, 'each replica reports the ledger\'s newest success, whoever ran it');
        const next = await sample(registry, 'leasehold_cron_next_slot_timestamp_seconds', { schedule: name });
        assert.ok(next * 1000 > Date.now() - 1000 && next * 1000 <= Date.now() + 1000, `next slot ${next}`);
      }
      // Each start is observed on the replica that ran it (one replica may have run them all).
      let observed = 0;
      for (const registry of registries) {
        observed += (await values(registry, 'leasehold_cron_start_lateness_seconds')).find((v) => v.labels['schedule'] === name && v.metricName?.endsWith('_count') === true)?.value ?? 0;
      }
      assert.ok(observed >= count('succeeded') + count('failed'), `start lateness observed ${observed} times for ${count('succeeded') + count('failed')} runs`);
      // The text format, on a replica that recorded a success (per-slot: either may have run them all).
      const ran = await Promise.all(registries.map((r) => sample(r, 'leasehold_cron_slots_total', { schedule: name, outcome: 'succeeded' })));
      const text = await registries[ran.findIndex((n) => n > 0)]!.metrics();
      assert.match(text, /^leasehold_cron_slots_total\{schedule="nightly",outcome="succeeded"\} \d+$/m);
    });

    void it('a missed slot is counted, and two crons share one registry', async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const { leasehold, ledger } = await replica(ts);
      const registry = new Registry();
      const seed = startCron(leasehold, ledger, 'seeded', { schedule: everySchedule(1000), ttl: '3s' }, () => undefined);
      await until('the seeded schedule ran a slot', async () => (await ledger.records('seeded', { limit: 10 })).some((r) => r.status === 'succeeded'), 15_000);
      await seed.stop();
      // What the seeded replica recorded missed itself (a slot its term ran past, under load: CI
      // on SQLite counted 3 against 5 rows) is not the new replica's metric to count.
      const missedRows = async (): Promise<Set<string>> =>
        new Set((await ledger.records('seeded', { limit: 100 })).filter((r) => r.status === 'skipped' && r.reason?.startsWith('missed') === true).map((r) => r.key));
      const seededMissed = await missedRows();
      // Stopped; three slots pass with no replica, then a new one records all but the newest
      // skipped ('missed while no replica led', catch-up latest).
      await new Promise((r) => setTimeout(r, 3200));
      const again = startCron(leasehold, ledger, 'seeded', { schedule: everySchedule(1000), ttl: '3s' }, () => undefined);
      const other = startCron(leasehold, ledger, 'other', { schedule: everySchedule(1000), ttl: '3s' }, () => undefined);
      cleanups.push(() => again.stop(), () => other.stop());
      registerCronMetrics(again, { registry, minIntervalMs: 0 });
      registerCronMetrics(other, { registry, minIntervalMs: 0 });
      assert.throws(() => registerCronMetrics(other, { registry }), /already registered/);
      await until('the missed slots were recorded and both crons ran', async () => (await sample(registry, 'leasehold_cron_missed_slots_total', { schedule: 'seeded' })) >= 2 && (await sample(registry, 'leasehold_cron_slots_total', { schedule: 'other', outcome: 'succeeded' })) >= 1, 20_000);
      // Stopped first, so that the ledger and the counter are read with nothing recorded between.
      await again.stop();
      await other.stop();
      const skipped = [...(await missedRows())].filter((k) => !seededMissed.has(k));
      assert.equal(await sample(registry, 'leasehold_cron_missed_slots_total', { schedule: 'seeded' }), skipped.length, `the new replica's missed rows: ${skipped.join(', ')}`);
    });
  });
}
