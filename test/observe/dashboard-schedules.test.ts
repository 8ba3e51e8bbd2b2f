/**
 * The dashboard's schedules reader without a browser: what one ledger read says about a schedule
 * (period from the slot times, missed and unrecorded slots), and how often it reads a ledger: a
 * lease that changes many times a second costs at most one ledger read a second, agents'
 * liveness leases are never read, and a lease with no scheduled rows is read again only when it
 * changes. The ledger is a real SQLite slot ledger, wrapped to count its reads.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { openSlotLedger } from '../../src/backends/index.js';
import type { LeaseView } from '../../src/observe/index.js';
import type { SlotLedgerPort, SlotRecord } from '../../src/scheduler/ledger.js';
import type { ScheduleRecord } from '../../src/scheduler/schedule-record.js';
import { LEDGER_MIN_GAP_MS, ScheduleReader, scheduleRow } from '../../src/cli/dashboard/schedules.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';

const view = (name: string, token = 1n): LeaseView => ({
  name,
  holder: null,
  token,
  state: 'free',
  expiresAtMs: null,
  storeNowMs: 0,
  termStartedAtMs: null,
  renewedAtMs: null,
});

const rec = (slotAtMs: number, status: SlotRecord['status'], reason: string | null = null): SlotRecord => ({
  name: 'n',
  key: new Date(slotAtMs).toISOString(),
  slotAtMs,
  status,
  token: 1n,
  holder: 'h',
  startedAtMs: slotAtMs,
  endedAtMs: slotAtMs + 100,
  exitCode: status === 'failed' ? 1 : null,
  reason,
});

void describe('dashboard schedules', () => {
  let ts: TestStore;
  let ledger: SlotLedgerPort;
  before(async () => {
    ts = await makeTestStore('sqlite');
    ledger = await openSlotLedger(ts.store, ts.url);
  });
  after(async () => {
    await ledger.close();
    await ts.cleanup();
  });

  void it('a ledger read gives the period, the next slot estimate, missed and unrecorded slots, newest first', () => {
    const t0 = Date.UTC(2026, 0, 1);
    const r = scheduleRow(
      view('n'),
      [rec(t0, 'succeeded'), rec(t0 + 2000, 'skipped', 'missed while no replica led; --catch-up latest ran x'), rec(t0 + 4000, 'failed'), rec(t0 + 10_000, 'succeeded')],
      0,
    );
    assert.equal(r.periodMs, 2000);
    assert.equal(r.nextDueEstimateMs, t0 + 12_000);
    assert.deepEqual(
      r.slots.map((s) => [s.slotAtMs - t0, s.status, s.missed, s.gapBefore]),
      [
        [10_000, 'succeeded', false, 2],
        [4000, 'failed', false, 0],
        [2000, 'skipped', true, 0],
        [0, 'succeeded', false, 0],
      ],
    );
    assert.equal(r.lastSuccessAtMs, t0 + 10_100);
    // An overlap skip is not a missed slot.
    assert.equal(scheduleRow(view('n'), [rec(t0, 'skipped', 'overlap')], 0).slots[0]?.missed, false);
    assert.equal(r.schedule, null, 'no record: what the schedule is stays unknown');
    assert.equal(r.nextDueMs, null);
  });

  void it("with the schedule's record: what it is, a catch-up in progress, and the next due slot from its expression by the store's clock", () => {
    const t0 = Date.UTC(2026, 0, 1, 12);
    const record: ScheduleRecord = {
      name: 'n',
      description: '0 3 * * * (Europe/Berlin)',
      expression: '0 3 * * *',
      timeZone: 'Europe/Berlin',
      everyMs: null,
      mode: 'leader',
      catchUp: 'all',
      catchUpWindowMs: 3_600_000,
      catchingUp: { fromMs: t0 - 7_200_000, untilMs: t0, slots: 2 },
      holder: 'h',
      token: 7n,
      updatedAtMs: t0,
    };
    const r = scheduleRow({ ...view('n'), storeNowMs: t0 }, [rec(t0 - 86_400_000, 'succeeded'), rec(t0, 'succeeded')], 0, record);
    // 03:00 in Berlin (UTC+1 in January) the next day.
    assert.equal(r.nextDueMs, Date.UTC(2026, 0, 2, 2));
    assert.deepEqual(r.schedule, { description: '0 3 * * * (Europe/Berlin)', expression: '0 3 * * *', timeZone: 'Europe/Berlin', everyMs: null, mode: 'leader', catchUp: 'all', catchUpWindowMs: 3_600_000, catchingUp: record.catchingUp, holder: 'h' });
  });

  void it('reads a changing lease’s ledger at most once a second, never an agent’s, and a non-schedule only when it changes', async () => {
    const reads = new Map<string, number>();
    // The real ledger's methods (through its prototype), with records() counted.
    const counting = Object.assign(Object.create(ledger) as SlotLedgerPort, {
      records: (name: string, options?: Parameters<SlotLedgerPort['records']>[1]) => {
        reads.set(name, (reads.get(name) ?? 0) + 1);
        return ledger.records(name, options);
      },
      schedules: () => {
        recordReads++;
        return ledger.schedules!();
      },
    });
    let recordReads = 0;
    let updates = 0;
    const reader = new ScheduleReader(counting, () => updates++);
    reader.start();
    try {
      const leases = new Map([
        ['busy', view('busy')],
        ['quiet', view('quiet')],
        ['agent/a1', view('agent/a1')],
      ]);
      const started = performance.now();
      // "busy" changes every 20ms for 2.5s: 125 changes.
      for (let i = 0; i < 125; i++) {
        leases.set('busy', view('busy', BigInt(i + 2)));
        reader.update(leases, i === 0 ? ['busy', 'quiet', 'agent/a1'] : ['busy']);
        await new Promise((r) => setTimeout(r, 20));
      }
      await new Promise((r) => setTimeout(r, LEDGER_MIN_GAP_MS + 200));
      const elapsed = performance.now() - started;
      const busy = reads.get('busy') ?? 0;
      // One read when first seen, then at most one per LEDGER_MIN_GAP_MS over the time it kept changing.
      assert.ok(busy >= 2 && busy <= Math.ceil(elapsed / LEDGER_MIN_GAP_MS) + 1, `busy read ${busy} times in ${Math.round(elapsed)}ms`);
      assert.equal(reads.get('quiet'), 1, 'a lease that did not change after being first seen is read once');
      assert.equal(reads.get('agent/a1'), undefined, 'agents’ liveness leases are the fleet’s');
      assert.deepEqual(reader.rows(), [], 'no ledger rows: no schedules');
      // The records of every schedule in one read after a pass of ledger reads, never one per name.
      const ledgerReads = [...reads.values()].reduce((a, b) => a + b, 0);
      assert.ok(recordReads >= 1 && recordReads <= ledgerReads - 1, `${recordReads} record reads for ${ledgerReads} ledger reads`);
      assert.ok(updates >= 1);
    } finally {
      reader.close();
    }
  });
});
