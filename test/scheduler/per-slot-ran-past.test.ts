/**
 * Per-slot mode, on the fake clock: a slot's term whose job ends before the next slot, but whose
 * release lands after it (a store slowed by load). The next slot's contenders find the lease held
 * by that earlier term. They used to give up (their one attempt), and the next slot's winner
 * found the slot with no row and recorded it 'missed: no replica could claim it (a term ran past
 * it ...)'. Now a contender that finds an EARLIER slot's term waits for its release (the freed
 * channel) and runs the slot late; one that finds its own slot's winner still gives up. A job
 * still running at the next slot's time keeps the old rule: its term records that slot
 * 'skipped: overlap' and nobody runs it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron, type SlotContext } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { LeasePort } from '../../src/core/port.js';
import type { World } from '../unit/harness.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';
import { lateReleases } from '../helpers/late-releases.js';
import { EARLY_HOLD_MS } from '../../src/scheduler/per-slot-timing.js';

const SEC = 1000;
const { world, crons } = useCronWorld();

/** The world's store with every release landing `delay.ms` late, by the world's clock (../helpers/late-releases.ts). */
function slowReleases(cw: World, delay: { ms: number }): LeasePort {
  return lateReleases(cw.store as LeasePort, delay, (f, ms) => cw.clock.setTimeout(f, ms));
}

/** Two replicas on every-second slots, each job `jobMs` long, each release landing `releaseMs` late; runs `slots` slots. */
async function run(jobMs: number, releaseMs: number, slots: number): Promise<{ ran: number[]; ledger: MemoryLedger; first: number; last: number; maxRunning: number }> {
  const cw = world();
  const now = (): number => cw.clock.outsideNow();
  cw.clock.suspend(10 * SEC - (now() % (10 * SEC)) + 100);
  const ledger = new MemoryLedger(cw.store, now);
  const options = { schedule: everySchedule(SEC), ttl: 3 * SEC };
  const ran: number[] = [];
  const delay = { ms: releaseMs };
  let running = 0;
  let maxRunning = 0;
  const job = async (ctx: SlotContext): Promise<void> => {
    ran.push(ctx.slotAtMs);
    maxRunning = Math.max(maxRunning, ++running);
    await new Promise<void>((resolve) => cw.clock.setTimeout(resolve, jobMs));
    running--;
  };
  for (let i = 0; i < 2; i++) {
    crons.push(startCron(new Leasehold({ store: slowReleases(cw, delay), clock: cw.clock, suspension: false }), ledger, 'tick', options, job));
  }
  // Past the startup terms (each replica's first), then `slots` slots.
  await cw.clock.advance(3 * SEC);
  const first = Math.ceil(now() / SEC) * SEC;
  await cw.clock.advance(slots * SEC);
  const last = first + (slots - 2) * SEC;
  // Let the last slots' late runs finish.
  await cw.clock.advance(3 * SEC);
  // Stopped here, on a moving clock: a stop waits for the job in flight, which sleeps on the fake clock.
  delay.ms = 0;
  let stopped = false;
  void Promise.all(crons.splice(0).map((c) => c.stop())).then(() => (stopped = true));
  await cw.clock.until(() => stopped, 10 * SEC);
  return { ran, ledger, first, last, maxRunning };
}

void describe('per-slot: an earlier slot\'s term still holds the lease at a slot\'s time', () => {
  void it('its job had ended: the slot is run late by a replica that waited for the release, not recorded missed', async () => {
    // Job 500 ms, release 700 ms late: every term's release lands 200 ms after the next slot.
    const { ran, ledger, first, last, maxRunning } = await run(500, 700, 8);
    const rows = [...ledger.rows.values()].filter((r) => r.slotAtMs !== null && r.slotAtMs >= first && r.slotAtMs <= last);
    const said = rows.map((r) => `${r.key} ${r.status}${r.reason === null ? '' : ` (${r.reason})`}`).join('\n');
    for (let t = first; t <= last; t += SEC) {
      assert.equal(ran.filter((s) => s === t).length, 1, `${slotKey(t)} ran once; the ledger:\n${said}`);
    }
    assert.deepEqual(rows.filter((r) => r.status !== 'succeeded').map((r) => r.key), [], `every slot succeeded; the ledger:\n${said}`);
    assert.equal(maxRunning, 1, 'no two jobs ran at once');
  });

  void it('its job was still running: the slot stays skipped as an overlap, and nobody runs it', async () => {
    // Job 1300 ms on every-second slots: each job runs over the next slot's time.
    const { ran, ledger, first, last, maxRunning } = await run(1300, 0, 8);
    const rows = [...ledger.rows.values()].filter((r) => r.slotAtMs !== null && r.slotAtMs >= first && r.slotAtMs <= last);
    const said = rows.map((r) => `${r.key} ${r.status}${r.reason === null ? '' : ` (${r.reason})`}`).join('\n');
    const overlapped = rows.filter((r) => r.status === 'skipped');
    assert.ok(overlapped.length > 0, `some slots came due while a job ran; the ledger:\n${said}`);
    for (const r of overlapped) {
      assert.match(r.reason ?? '', /^overlap/, `${r.key} is skipped as an overlap; the ledger:\n${said}`);
      assert.ok(!ran.includes(r.slotAtMs!), `${r.key}, skipped as an overlap, never ran`);
    }
    assert.equal(maxRunning, 1, 'no two jobs ran at once');
  });
});

/** A fake world with the clock 100 ms past a slot of `period`, and a ledger on its store. */
function justPastASlot(period: number): { cw: World; now: () => number; ledger: MemoryLedger } {
  const cw = world();
  const now = (): number => cw.clock.outsideNow();
  // Past EARLY_HOLD_MS: a new name's first term started closer after a slot runs that slot.
  cw.clock.suspend(period - (now() % period) + EARLY_HOLD_MS + 100);
  return { cw, now, ledger: new MemoryLedger(cw.store, now) };
}

void describe('per-slot: a drain while waiting for an earlier slot\'s term', () => {
  void it('ends the wait at once, not at the next slot, and takes no term', async () => {
    const period = 10 * SEC;
    // Just after a slot: the holder below takes its term before the next slot.
    const { cw, ledger } = justPastASlot(period);
    // Another process holds the schedule's lease from before the next slot, and keeps it.
    const holder = new Leasehold({ store: cw.store, clock: cw.clock, suspension: false });
    const cron = startCron(new Leasehold({ store: cw.store, clock: cw.clock, suspension: false }), ledger, 'tick', { schedule: everySchedule(period), ttl: 3 * SEC }, () => assert.fail('no job runs'));
    try {
      const held = await holder.lease('tick', { ttl: 3 * SEC }).acquire();
      // Past the next slot: this replica found the lease held by a term granted before it, and waits.
      await cw.clock.advance(period);
      assert.equal(cron.lease.state, 'contending', 'waiting for the earlier term');
      cron.drain();
      // A drain ends the wait within a few store calls, far short of the next slot (10 s away).
      await cw.clock.until(() => cron.lease.state !== 'contending', SEC);
      assert.equal(cron.lease.state, 'idle', 'the wait ended without a term');
      assert.equal(held.signal.aborted, false, 'the holder keeps its term');
    } finally {
      // Stopped on a moving clock, as in run() above.
      let stopped = false;
      void Promise.all([cron.stop(), holder.close()]).then(() => (stopped = true));
      await cw.clock.until(() => stopped, 10 * SEC);
    }
  });
});

/**
 * The world's store with every claim reaching it `delay.sendMs` late and answered `delay.ms`
 * after it applied it (by the world's clock).
 */
function lateClaimAnswers(cw: World, delay: { ms: number; sendMs?: number }): LeasePort {
  const store = cw.store as LeasePort;
  const after = (ms: number): Promise<void> => new Promise<void>((resolve) => cw.clock.setTimeout(resolve, ms));
  return new Proxy(store, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      const f = (...args: unknown[]): unknown => (v as (...a: unknown[]) => unknown).apply(target, args);
      if (prop !== 'claim' || (delay.ms === 0 && (delay.sendMs ?? 0) === 0)) return f;
      return async (...args: unknown[]) => {
        if ((delay.sendMs ?? 0) > 0) await after(delay.sendMs!);
        const answer = await f(...args);
        if (delay.ms > 0) await after(delay.ms);
        return answer;
      };
    },
  });
}

void describe('per-slot: a drain while this replica\'s claim of a slot is in flight', () => {
  void it('the term the claim wins records the slot interrupted (rerun later), not handed back unrecorded', async () => {
    const period = 10 * SEC;
    const { cw, now, ledger } = justPastASlot(period);
    const delay = { ms: 400 };
    let ran = 0;
    const cron = startCron(new Leasehold({ store: lateClaimAnswers(cw, delay), clock: cw.clock, suspension: false }), ledger, 'tick', { schedule: everySchedule(period), ttl: 3 * SEC }, () => {
      ran++;
    });
    const events: string[] = [];
    cron.on('slot', (e) => events.push(`${e.event} ${e.slot} ${e.reason ?? ''}`));
    try {
      const slot = Math.ceil(now() / period) * period;
      // To 100 ms past the slot: this replica's claim went out at the slot and is answered at +400 ms.
      await cw.clock.advance(slot - now() + 100);
      assert.equal(cron.lease.state, 'contending', 'the slot\'s claim is in flight');
      cron.drain();
      const rowOf = (): { key: string; status: string; reason: string | null } | undefined => [...ledger.rows.values()].find((r) => r.slotAtMs === slot);
      await cw.clock.until(() => rowOf() !== undefined, 5 * SEC).catch((e: unknown) => {
        throw new Error(`no row for the slot; the cron's events: ${events.join('; ')}; rows: ${[...ledger.rows.keys()].join(', ')}`, { cause: e });
      });
      const row = rowOf()!;
      // Handed back unused, the term would read, to every other replica, as this slot's winner
      // having released it, and the slot would have no row (recorded missed by the next winner,
      // not rerun): 'interrupted' is owed and rerun.
      assert.equal(row.status, 'interrupted', `${row.key} ${row.status} (${String(row.reason)})`);
      assert.match(row.reason ?? '', /^not started: .* between the claim and the job's start/);
      assert.equal(ran, 0, 'no job starts after a drain');
    } finally {
      delay.ms = 0;
      let stopped = false;
      void cron.stop().then(() => (stopped = true));
      await cw.clock.until(() => stopped, 10 * SEC);
    }
  });

  void it('with a second replica: the slot the drained winner recorded interrupted is rerun by the other within a TTL, not left to the next slot', async () => {
    const period = 20 * SEC;
    const ttl = 3 * SEC;
    const { cw, now, ledger } = justPastASlot(period);
    // A's claims land at once and are answered 400 ms later; B's reach the store 50 ms late, so A wins the slot.
    const slowA = { ms: 400 };
    const lateB = { ms: 0, sendMs: 50 };
    const ran: string[] = [];
    const options = { schedule: everySchedule(period), ttl };
    const a = startCron(new Leasehold({ store: lateClaimAnswers(cw, slowA), clock: cw.clock, suspension: false }), ledger, 'tick', options, () => {
      ran.push('a');
    });
    const b = startCron(new Leasehold({ store: lateClaimAnswers(cw, lateB), clock: cw.clock, suspension: false }), ledger, 'tick', options, () => {
      ran.push('b');
    });
    const events: string[] = [];
    a.on('slot', (e) => events.push(`a ${e.event} ${e.slot}`));
    b.on('slot', (e) => events.push(`b ${e.event} ${e.slot}`));
    try {
      const slot = Math.ceil(now() / period) * period;
      await cw.clock.advance(slot - now() + 100);
      a.drain();
      const rowOf = (): { status: string; reason: string | null } | undefined => [...ledger.rows.values()].find((r) => r.slotAtMs === slot);
      // B was answered 'busy' (A's term, granted at the slot) and looks again at that term's
      // expiry plus RECHECK_AFTER_MS: within 2 TTLs, far short of the next slot (20 s away).
      await cw.clock.until(() => rowOf()?.status === 'succeeded', 2 * ttl).catch((e: unknown) => {
        throw new Error(`the slot was not rerun before the next slot: ${JSON.stringify(rowOf())}; events: ${events.join('; ')}`, { cause: e });
      });
      assert.ok(events.includes(`a interrupted ${slotKey(slot)}`), `A won the slot and recorded it interrupted: ${events.join('; ')}`);
      assert.deepEqual(ran, ['b'], 'run once, by the replica that was not drained');
      assert.match(rowOf()!.reason ?? '', /interrupted/, 'the row says it is a rerun');
    } finally {
      slowA.ms = 0;
      lateB.sendMs = 0;
      let stopped = false;
      void Promise.all([a.stop(), b.stop()]).then(() => (stopped = true));
      await cw.clock.until(() => stopped, 10 * SEC);
    }
  });
});
