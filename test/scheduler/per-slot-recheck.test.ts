/**
 * Per-slot mode, on the fake clock: the replica that won a slot dies mid-job (its store calls
 * never answer again, as a SIGKILLed host's), on a schedule whose next slot is far off. Nobody
 * holds the lease between slots, so only a replica that tried the slot and found it held can
 * notice: it looks again when the dead term runs out and reruns the slot then, not at the next
 * slot (a minute later here, a day for a nightly job), when the slot would lie outside a short
 * catch-up window and be left 'claimed' for good. A winner that finishes costs the others one
 * ledger read.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { startCron, type CronHandle, type SlotContext } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import type { LeasePort } from '../../src/core/port.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { world, type World } from '../unit/harness.js';
import { MemoryLedger } from './memory-ledger.js';

const SEC = 1000;
const MINUTE = 60 * SEC;
const TTL = 3 * SEC;
let w: World | undefined;
const crons: CronHandle[] = [];
afterEach(async () => {
  for (const c of crons.splice(0)) await c.stop();
  await w?.close();
  w = undefined;
});

/** Objects whose every call, once `die()` is called, never answers: a host that is gone. */
function mortal(): { wrap<T extends object>(o: T): T; die(): void } {
  let dead = false;
  const never = new Promise<never>(() => undefined);
  return {
    wrap: <T extends object>(o: T): T =>
      new Proxy(o, {
        get(target, prop) {
          const v: unknown = Reflect.get(target, prop, target);
          if (typeof v !== 'function') return v;
          return (...args: unknown[]) => (dead ? never : (v as (...a: unknown[]) => unknown).apply(target, args));
        },
      }),
    die: () => void (dead = true),
  };
}

void describe('per-slot: a winner that dies mid-job on a sparse schedule', () => {
  void it('the slot is rerun by a replica that tried it, once the dead term runs out, not at the next slot', async () => {
    w = world();
    const cw = w;
    const now = (): number => cw.clock.outsideNow();
    // Just after a whole minute: the first slot is almost a minute away.
    cw.clock.suspend(MINUTE - (now() % MINUTE) + 100);
    const ledger = new MemoryLedger(cw.store, now);
    const host = mortal();
    const dying = new Leasehold({ store: host.wrap<LeasePort>(cw.store), clock: cw.clock, suspension: false });
    const ran: Array<{ who: string; ctx: SlotContext; at: number }> = [];
    // The dying replica's ledger calls go nowhere once it is dead, as its store calls do.
    const deadLedger = host.wrap(ledger);
    const options = { schedule: everySchedule(MINUTE), ttl: TTL, catchUpWindow: '10s' };
    // Not stopped after the test: its calls never answer, as a dead host's would not.
    startCron(dying, deadLedger, 'nightly', options, (ctx) => {
      ran.push({ who: 'dying', ctx, at: now() });
      host.die();
      return new Promise<never>(() => undefined);
    });
    // Let the dying replica's startup term settle first, so it is the one that wins the slot.
    await cw.clock.advance(SEC);
    crons.push(startCron(cw.leasehold({ suspension: false }), ledger, 'nightly', options, (ctx) => void ran.push({ who: 'other', ctx, at: now() })));
    await cw.clock.until(() => ran.length >= 1, 2 * MINUTE);
    const slot = ran[0]!.ctx.slotAtMs;
    assert.equal(ran[0]!.who, 'dying', 'the replica created first won the slot');
    // The dead term runs out one TTL after its last renewal; the other replica looks then.
    await cw.clock.until(() => ran.length >= 2, 10 * SEC);
    const rerun = ran[1]!;
    assert.equal(rerun.who, 'other');
    assert.equal(rerun.ctx.slotAtMs, slot, `the rerun is of ${slotKey(slot)}, not ${rerun.ctx.slot}`);
    assert.equal(rerun.ctx.rerunOf, ran[0]!.ctx.token, 'a rerun of the dead term');
    assert.ok(rerun.at - slot < TTL + 2 * SEC, `rerun ${rerun.at - slot} ms after the slot: the dead term's TTL, then a look`);
    const row = (await ledger.records('nightly')).find((r) => r.slotAtMs === slot);
    assert.equal(row?.status, 'succeeded');
  });

  void it('a winner that finishes costs each other replica one ledger read, and nobody runs the slot again', async () => {
    w = world();
    const cw = w;
    const now = (): number => cw.clock.outsideNow();
    cw.clock.suspend(MINUTE - (now() % MINUTE) + 100);
    const ledger = new MemoryLedger(cw.store, now);
    let reads = 0;
    const counting = new Proxy(ledger, {
      get(target, prop, receiver) {
        const v: unknown = Reflect.get(target, prop, receiver);
        if (prop !== 'records' || typeof v !== 'function') return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        return (...args: unknown[]) => {
          reads++;
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const ran: SlotContext[] = [];
    const options = { schedule: everySchedule(MINUTE), ttl: TTL };
    // A job of 2 s: the others find the lease held, with an expiry before the next slot.
    const job = async (ctx: SlotContext): Promise<void> => {
      ran.push(ctx);
      await new Promise<void>((resolve) => cw.clock.setTimeout(resolve, 2 * SEC));
    };
    for (let i = 0; i < 3; i++) crons.push(startCron(cw.leasehold({ suspension: false }), counting, 'report', options, job));
    await cw.clock.until(() => ran.length >= 1, 2 * MINUTE);
    const before = reads;
    await cw.clock.advance(20 * SEC);
    assert.equal(ran.length, 1, 'the slot ran once');
    assert.ok(reads - before <= 2 + 2, `${reads - before} ledger reads after the slot: about one per other replica`);
    assert.equal((await ledger.records('report'))[0]?.status, 'succeeded');
  });
});
