/**
 * A slot gate's takeover on the fake clock: what a new leader records for the slots that fell due
 * while no replica led. CI (stop 49, nestjs @Interval on SQLite, loaded host): the leader was
 * SIGKILLed, a follower's starved timer drifted over the next slot (its fires were named 05 and
 * 06, never 04), and the takeover recorded only the slots it had seen fire: 04 had no row at all,
 * neither run nor recorded, which is the one thing the ledger promises never happens.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SlotGate } from '../../src/scheduler/gate.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { world, TIMING } from './harness.js';
import { MemoryLedger } from './memory-ledger.js';

const schedule = everySchedule(1000);

async function scenario(leaderRuns: boolean): Promise<{ rows: Map<string, { status: string; reason: string | null }>; slots: number[]; nextRan: boolean }> {
  const w = world();
  const ledger = new MemoryLedger(() => w.clock.outsideNow());
  const a = new SlotGate(w.leasehold(), ledger, 'job', { ...TIMING, schedule });
  const b = new SlotGate(w.leasehold(), ledger, 'job', { ...TIMING, schedule });
  try {
    await w.clock.until(() => a.isLeader, 5000, 100);
    await a.ready();
    await b.ready();
    assert.equal(b.isLeader, false, 'b follows while a leads');
    // Whole seconds, already due by the store's clock: s[0] oldest.
    const base = Math.floor(w.clock.outsideNow() / 1000) * 1000;
    const slots = [base - 4000, base - 3000, base - 2000, base - 1000, base];
    if (leaderRuns) {
      const first = await a.admit(slots[0]!);
      assert.ok(first.run !== undefined, 'the leader runs the first slot');
      await first.finish('succeeded');
    }
    // b's timer drifted over slots[1]: it fired for slots[2] and slots[3] only, while following.
    for (const t of [slots[2]!, slots[3]!]) {
      const got = await b.admit(t);
      assert.equal(got.run === undefined ? got.declined : 'ran', 'follower');
    }
    await a.stop();
    await w.clock.until(() => b.isLeader, 10_000, 100);
    await b.ready();
    const rows = new Map([...ledger.rows.values()].map((r) => [r.key, { status: r.status, reason: r.reason }]));
    // The next fire (a slot after the newest one b saw) is not decided by the takeover: it runs.
    const next = await b.admit(slots[4]!);
    const nextRan = next.run !== undefined;
    if (next.run !== undefined) await next.finish('succeeded');
    return { rows, slots, nextRan };
  } finally {
    await b.stop();
    await w.close();
  }
}

const key = (t: number): string => new Date(t).toISOString();

void test('a new leader records every slot between the last row and the newest fire it saw, drifted-over ones too', async () => {
  const { rows, slots, nextRan } = await scenario(true);
  assert.equal(rows.get(key(slots[0]!))?.status, 'succeeded');
  for (const t of slots.slice(1, 4)) {
    const row = rows.get(key(t));
    assert.equal(row?.status, 'skipped', `slot ${key(t)} has ${row === undefined ? 'no row' : `a '${row.status}' row`}: every slot that fell due while no replica led must be recorded`);
    assert.match(row?.reason ?? '', /while no replica led/);
  }
  assert.equal(rows.has(key(slots[4]!)), false, 'a slot after the newest fire seen is left for its own fire');
  assert.equal(nextRan, true, 'the next fire runs its slot');
});

void test('with no row yet (the first leader), only the fires seen are recorded: nothing before them is invented', async () => {
  const { rows, slots } = await scenario(false);
  assert.deepEqual(
    [...rows.entries()].filter(([, r]) => r.status === 'skipped').map(([k]) => k),
    [key(slots[2]!), key(slots[3]!)],
  );
});
