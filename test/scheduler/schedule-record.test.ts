/**
 * The schedule's record (src/scheduler/schedule-record.ts), as startCron writes it, on the fake
 * clock: once when a replica first leads, again only when a catch-up starts or ends, never per
 * slot, so a slot's store requests are what they were without it. What each store does with the
 * write is the slot ledger conformance suite's (src/conformance/slots.ts), on the real stores.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { startCron, type CronHandle, type CronOptions } from '../../src/scheduler/cron.js';
import { cronSchedule, everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import { nextDueOf, type ScheduleRecord } from '../../src/scheduler/schedule-record.js';
import { world, type World } from '../unit/harness.js';
import { MemoryLedger } from './memory-ledger.js';

const SEC = 1000;
const MINUTE = 60 * SEC;
let w: World | undefined;
const crons: CronHandle[] = [];
afterEach(async () => {
  for (const c of crons.splice(0)) await c.stop();
  await w?.close();
  w = undefined;
});

/** A memory ledger with the optional record methods, keeping every record written. */
class RecordingLedger extends MemoryLedger {
  readonly written: ScheduleRecord[] = [];
  putSchedule(record: ScheduleRecord): Promise<void> {
    this.written.push(record);
    return Promise.resolve();
  }
  schedules(): Promise<ScheduleRecord[]> {
    return Promise.resolve(this.written.slice(-1));
  }
}

/** Counts each ledger method's calls. */
function counted<T extends object>(ledger: T): { ledger: T; calls: Map<string, number>; total(): number } {
  const calls = new Map<string, number>();
  const proxy = new Proxy(ledger, {
    get(target, prop, receiver) {
      const v: unknown = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        calls.set(String(prop), (calls.get(String(prop)) ?? 0) + 1);
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { ledger: proxy, calls, total: () => [...calls.entries()].filter(([k]) => k !== 'putSchedule').reduce((a, [, n]) => a + n, 0) };
}

/** Ledger calls in the first term (a startup) and per slot after it, over `slots` slots of one replica. */
async function perSlotCost(withRecord: boolean, mode: CronOptions['mode']): Promise<{ first: number; perSlot: number; records: number }> {
  w = world();
  const cw = w;
  const now = (): number => cw.clock.outsideNow();
  cw.clock.suspend(10 * SEC - (now() % (10 * SEC)) + 100);
  const base = withRecord ? new RecordingLedger(cw.store, now) : new MemoryLedger(cw.store, now);
  const c = counted(base);
  let ran = 0;
  crons.push(startCron(cw.leasehold({ suspension: false }), c.ledger, 'tick', { schedule: everySchedule(10 * SEC), ttl: 3 * SEC, mode }, () => void ran++));
  await cw.clock.until(() => ran >= 1, MINUTE);
  const first = c.total();
  await cw.clock.until(() => ran >= 11, 5 * MINUTE);
  const perSlot = (c.total() - first) / (ran - 1);
  for (const x of crons.splice(0)) await x.stop();
  await w.close();
  w = undefined;
  return { first, perSlot, records: c.calls.get('putSchedule') ?? 0 };
}

void describe("startCron writes the schedule's record", () => {
  for (const mode of ['per-slot', 'leader'] as const) {
    void it(`${mode}: once at the first term, then never per slot; a slot costs the ledger what it did without the record`, async () => {
      const without = await perSlotCost(false, mode);
      const withRecord = await perSlotCost(true, mode);
      console.log(`# ${mode}: ledger calls per slot without the record ${without.perSlot.toFixed(2)}, with it ${withRecord.perSlot.toFixed(2)} (+${withRecord.records} record write(s) in all)`);
      assert.equal(withRecord.records, 1, 'one record write, at the first term');
      assert.equal(withRecord.perSlot, without.perSlot);
    });
  }

  void it('a catch-up is in the record while it runs and gone from it after; the record rebuilds the next due slot', async () => {
    w = world();
    const cw = w;
    const now = (): number => cw.clock.outsideNow();
    const ledger = new RecordingLedger(cw.store, now);
    const schedule = cronSchedule('* * * * *', 'Europe/Berlin');
    // The schedule ran until 5 minutes ago: its missed slots inside the window are owed.
    const lastRan = Math.floor(now() / MINUTE) * MINUTE - 5 * MINUTE;
    ledger.put({ name: 'minutely', key: slotKey(lastRan), slotAtMs: lastRan, status: 'succeeded', token: 1n });
    const ran: number[] = [];
    crons.push(
      startCron(cw.leasehold({ suspension: false }), ledger, 'minutely', { schedule, ttl: 3 * SEC, mode: 'leader', catchUp: 'all', catchUpWindow: '1h' }, (ctx) => void ran.push(ctx.slotAtMs)),
    );
    await cw.clock.until(() => ran.length >= 5 && ledger.written.length >= 2, MINUTE);
    const [during, after] = ledger.written;
    assert.deepEqual(
      { expression: during!.expression, timeZone: during!.timeZone, mode: during!.mode, catchUp: during!.catchUp, catchUpWindowMs: during!.catchUpWindowMs, description: during!.description },
      { expression: '* * * * *', timeZone: 'Europe/Berlin', mode: 'leader', catchUp: 'all', catchUpWindowMs: 60 * MINUTE, description: '* * * * * (Europe/Berlin)' },
    );
    assert.deepEqual(during!.catchingUp, { fromMs: lastRan + MINUTE, untilMs: lastRan + 5 * MINUTE, slots: 5 });
    assert.equal(after!.catchingUp, null, 'the catch-up ended');
    assert.equal(ledger.written.length, 2, 'nothing more while it runs on time');
    const t = now();
    assert.equal(nextDueOf(after!, t), schedule.next(t));
  });
});
