/**
 * Schedules whose next slot is further away than a timer holds (2^31-1 ms, 24.8 days), on the
 * fake clock. Node fires such a timer after 1 ms (TimeoutOverflowWarning), so the clock here
 * does the same, and the test counts what the scheduler arms while it waits: a monthly job on
 * 2 December, and @yearly, must sleep in a few long chunks and still fire on time.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { sleepOn } from '../../src/core/clock.js';
import { startCron, type CronHandle } from '../../src/scheduler/cron.js';
import { cronSchedule } from '../../src/scheduler/schedule.js';
import { FakeClock } from '../unit/fake-clock.js';
import { world, type World } from '../unit/harness.js';
import { MemoryLedger } from './memory-ledger.js';

const DAY = 86_400_000;
/** Node's limit: a longer timer fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;
let w: World | undefined;
const crons: CronHandle[] = [];
afterEach(async () => {
  for (const c of crons.splice(0)) await c.stop();
  await w?.close();
  w = undefined;
});

interface Counts {
  arms: number;
  /** Timers longer than the one-day TTL: only the scheduler's sleep asks for those. */
  long: number;
  /** Timers asked for longer than a timer holds (each fired after 1 ms, as Node does). */
  overflowed: number;
}

/** Makes `clock` behave like Node's timers past 2^31-1 ms, and counts what is armed. */
function likeNode(clock: FakeClock): Counts {
  const counts: Counts = { arms: 0, long: 0, overflowed: 0 };
  const arm = clock.setTimeout.bind(clock);
  clock.setTimeout = (fn, ms) => {
    counts.arms++;
    if (ms > DAY) counts.long++;
    if (ms > MAX_TIMER_MS) {
      counts.overflowed++;
      return arm(fn, 1);
    }
    return arm(fn, ms);
  };
  return counts;
}

async function scheduleFrom(startIso: string, expression: string): Promise<{ w: World; counts: Counts; ran: number[] }> {
  w = world();
  const cw = w;
  cw.clock.suspend(Date.parse(startIso) - cw.clock.outsideNow());
  const counts = likeNode(cw.clock);
  const ledger = new MemoryLedger(cw.store, () => cw.clock.outsideNow());
  const ran: number[] = [];
  // A one-day TTL: renewals (every 8 h) are the only other timers, so the count is the scheduler's.
  const lh = cw.leasehold({ suspension: false });
  crons.push(startCron(lh, ledger, 'far', { schedule: cronSchedule(expression), ttl: DAY }, (ctx) => void ran.push(ctx.slotAtMs)));
  await cw.clock.advance(10_000);
  return { w: cw, counts, ran };
}

void describe('waits longer than a timer holds', () => {
  void it("a monthly job on 2 December sleeps in chunks (no timer past 2^31-1 ms) and runs on 1 January", async () => {
    const { w, counts, ran } = await scheduleFrom('2026-12-02T00:00:00Z', '0 0 1 * *');
    assert.equal(counts.overflowed, 0, `${counts.overflowed} timers armed past 2^31-1 ms in 10 s: a busy loop`);
    const before = counts.arms;
    await w.clock.advance(Date.parse('2027-01-01T00:00:01Z') - w.clock.outsideNow());
    assert.deepEqual(ran.map((t) => new Date(t).toISOString()), ['2027-01-01T00:00:00.000Z']);
    // Two chunks of sleep to 1 January (24.8 d + the rest) and the first towards 1 February; the
    // lease's renewals (3 a day, about 4 timers each) are the rest. A busy loop arms one timer a
    // millisecond.
    assert.ok(counts.long <= 3, `${counts.long} long sleeps over 30 days`);
    assert.ok(counts.arms - before < 30 * 15, `${counts.arms - before} timers armed over 30 days`);
    assert.equal(counts.overflowed, 0);
  });

  void it('@yearly sleeps about 15 chunks through a year and runs on 1 January', async () => {
    // 5 s past the slot: a new name's first term within EARLY_HOLD_MS of a slot runs that slot.
    const { w, counts, ran } = await scheduleFrom('2026-01-01T00:00:05Z', '@yearly');
    assert.equal(counts.overflowed, 0, `${counts.overflowed} timers armed past 2^31-1 ms in 10 s: a busy loop`);
    const before = counts.arms;
    await w.clock.advance(Date.parse('2027-01-01T00:00:01Z') - w.clock.outsideNow());
    assert.deepEqual(ran.map((t) => new Date(t).toISOString()), ['2027-01-01T00:00:00.000Z']);
    // 365 days / 24.8 days: 15 chunks of sleep, and the first towards 2028; the rest is the
    // lease's renewals (see above).
    assert.ok(counts.long <= 16, `${counts.long} long sleeps over a year`);
    assert.ok(counts.arms - before < 365 * 15, `${counts.arms - before} timers armed over a year`);
    assert.equal(counts.overflowed, 0);
  });

  void it('sleepOn a month: one wake per chunk, on time, and an abort still ends it at once', async () => {
    const clock = new FakeClock();
    const counts = likeNode(clock);
    let woke = false;
    void sleepOn(clock, 31 * DAY).then(() => (woke = true));
    await clock.advance(31 * DAY - 1);
    assert.equal(woke, false);
    await clock.advance(1);
    assert.equal(woke, true);
    assert.equal(counts.overflowed, 0);
    assert.equal(counts.arms, 2);
    const stop = new AbortController();
    let stopped = false;
    void sleepOn(clock, 365 * DAY, stop.signal).then(() => (stopped = true));
    await clock.advance(30 * DAY);
    stop.abort();
    await clock.advance(0);
    assert.equal(stopped, true);
    assert.equal(clock.pending, 0, 'no chunk timer left armed after the abort');
  });
});
