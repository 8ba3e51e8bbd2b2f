/**
 * The slot gate's "one job at a time" on the fake clock: a fire while the previous job is still
 * running is recorded skipped ('overlap'), but a fire while the previous job has ended and only its
 * outcome is on its way to the ledger waits for that one write and runs (CI once lost a node-cron
 * slot that fired 2 ms after a job's end, its completion in flight, as an overlap).
 *
 * The ledger is one in memory that lets the test hold a completion (./memory-ledger.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SlotGate, type Admission } from '../../src/scheduler/gate.js';
import { world, TIMING } from './harness.js';
import { MemoryLedger } from './memory-ledger.js';

async function turns(n = 20): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

async function leading(): Promise<{ w: ReturnType<typeof world>; ledger: MemoryLedger; gate: SlotGate; slot: (back: number) => number }> {
  const w = world();
  const ledger = new MemoryLedger(() => w.clock.outsideNow());
  const gate = new SlotGate(w.leasehold(), ledger, 'job', TIMING);
  await w.clock.until(() => gate.isLeader, 5000, 100);
  await gate.ready();
  // Slot times already due by the store's clock, on whole seconds like a schedule's.
  const slot = (back: number): number => Math.floor(w.clock.outsideNow() / 1000) * 1000 - back * 1000;
  return { w, ledger, gate, slot };
}

void test('a fire while the last job’s outcome is being recorded waits for that write and runs its slot', async () => {
  const { w, ledger, gate, slot } = await leading();
  try {
    const first = await gate.admit(slot(2));
    assert.ok(first.run !== undefined, 'the leader runs the first slot');
    let letGo!: () => void;
    ledger.hold = new Promise<void>((r) => (letGo = r));
    // The job has ended; its completion is on its way.
    const finished = first.finish('succeeded');
    let second: Admission | undefined;
    const admitting = gate.admit(slot(1)).then((a) => (second = a));
    await turns();
    assert.equal(second, undefined, 'the fire waits while the completion is in flight');
    assert.deepEqual(ledger.skipped, [], 'nothing is recorded skipped while the last job is only being recorded');
    letGo();
    await finished;
    const got = await admitting;
    assert.ok(got.run !== undefined, `the second slot runs once the first is recorded (got ${got.run === undefined ? got.declined : 'a run'})`);
    assert.equal(ledger.rows.get(first.run.slot)?.status, 'succeeded');
    assert.equal(ledger.rows.get(got.run.slot)?.status, 'claimed');
    assert.deepEqual(ledger.skipped, []);
    await got.finish('succeeded');
  } finally {
    await gate.stop();
    await w.close();
  }
});

void test('a fire while the last job still runs is recorded skipped as an overlap, at once', async () => {
  const { w, ledger, gate, slot } = await leading();
  try {
    const first = await gate.admit(slot(2));
    assert.ok(first.run !== undefined);
    // No finish yet: the job is running.
    const second = await gate.admit(slot(1));
    assert.equal(second.run, undefined);
    assert.equal(second.run === undefined ? second.declined : undefined, 'overlap');
    assert.equal(ledger.skipped.length, 1);
    assert.match(ledger.skipped[0]!.reason, /^overlap: /);
    await first.finish('succeeded');
    // The next fire after the outcome is recorded runs.
    const third = await gate.admit(slot(0));
    assert.ok(third.run !== undefined, 'a fire after the job was recorded runs');
    await third.finish('succeeded');
  } finally {
    await gate.stop();
    await w.close();
  }
});
