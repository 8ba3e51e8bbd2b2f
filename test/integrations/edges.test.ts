/**
 * The edges of the integrations, in-process: how a fire names its slot (timers late, clocks
 * apart), and the typed errors a misconfigured app gets.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { cronSchedule, everySchedule, slotForFire } from '../../src/scheduler/schedule.js';
import { leaseholdCoordinator } from '../../src/node-cron/index.js';
import { currentSlot, currentTerm, OncePerSlot } from '../../src/nestjs/index.js';
import { openScheduling } from '../../src/scheduler/open.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';

const stores: TestStore[] = [];
after(async () => {
  for (const s of stores) await s.cleanup();
});
const isConfig = (e: unknown): boolean => (e as { code?: string }).code === 'CONFIG';

void describe('slotForFire', () => {
  const t = Date.parse('2026-03-30T01:05:00.000Z');
  void it('names the scheduled instant for a timer that fired late, or a clock a fraction of the period off', () => {
    const every5m = cronSchedule('*/5 * * * *');
    for (const off of [0, 3, 250, 2 * 60_000, -400, -2 * 60_000]) assert.equal(slotForFire(every5m, t + off), t, `fired ${off}ms off`);
    // Past half the period, it is the next slot's fire, early.
    assert.equal(slotForFire(every5m, t + 3 * 60_000), t + 5 * 60_000);
    const everySecond = cronSchedule('* * * * * *');
    assert.equal(slotForFire(everySecond, t + 400), t);
    assert.equal(slotForFire(everySecond, t - 400), t);
  });

  void it("floor, for a setInterval's fire: the aligned period it fired in, never a future slot", () => {
    const s = everySchedule(1000);
    assert.equal(slotForFire(s, t + 999, 'floor'), t);
    assert.equal(slotForFire(s, t, 'floor'), t);
    assert.equal(slotForFire(s, t - 1, 'floor'), t - 1000);
  });

  void it('finds the previous slot of a sparse schedule (a yearly cron)', () => {
    const yearly = cronSchedule('0 0 1 1 *');
    const newYear = Date.parse('2026-01-01T00:00:00.000Z');
    assert.equal(slotForFire(yearly, newYear + 1500), newYear);
    // Weekdays at 09:00: on a Monday the previous slot is three days back, past twice the period.
    const weekdays = cronSchedule('0 9 * * 1-5');
    const monday = Date.parse('2026-03-30T09:00:00.000Z');
    assert.equal(slotForFire(weekdays, monday + 800), monday);
  });
});

void describe('typed errors', () => {
  void it('the node-cron coordinator refuses an unnamed task (a random UUID differs per replica)', async () => {
    const ts = await makeTestStore('sqlite');
    stores.push(ts);
    const c = leaseholdCoordinator({ store: ts.url });
    try {
      await assert.rejects(c.shouldRun('0b8f8f4e-2f5e-4a1c-9a7e-0c2b1d3e4f5a:2026-03-30T01:05:00.000Z', 30_000), (e: unknown) => isConfig(e) && /needs a name/.test(String(e)));
      await assert.rejects(c.shouldRun('no-time-here', 30_000), isConfig);
    } finally {
      await c.close();
    }
  });

  void it('currentSlot() and currentTerm() outside their decorated methods, and @OncePerSlot before the module', async () => {
    assert.throws(() => currentSlot(), isConfig);
    assert.throws(() => currentTerm(), isConfig);
    class Jobs {
      tick(): string {
        return 'ran';
      }
    }
    const d = OncePerSlot('x')(Jobs.prototype, 'tick', Object.getOwnPropertyDescriptor(Jobs.prototype, 'tick')!) as PropertyDescriptor;
    await assert.rejects((d.value as () => Promise<unknown>).call(new Jobs()), (e: unknown) => isConfig(e) && /LeaseholdModule\.forRoot/.test(String(e)));
  });

  void it('openScheduling refuses a source that is neither a store URL nor { leasehold, ledger }', async () => {
    await assert.rejects(openScheduling({ store: '' }), isConfig);
  });
});
