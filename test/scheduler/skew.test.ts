/**
 * "Due" and "missed" by the store's clock, on the fake clock: a new leader whose wall clock runs
 * 30 s ahead of the store's takes over after a gap. Only the slots behind the store's clock are
 * missed; the ones its own clock is ahead by lie in the future and run, each at its time by the
 * store's clock; and the skew is said. (The etcd ledger's store clock is proved on a real etcd
 * in clock-ahead.test.ts.)
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron, type SlotContext } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import type { LoggerLike } from '../../src/core/logger.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';

const SEC = 1000;
const { world, crons } = useCronWorld();

void describe('a leader whose clock runs ahead of the store', () => {
  void it('records only the slots behind the store clock as missed, runs the rest at their time, and says how far off it is', async () => {
    const cw = world();
    const storeNow = (): number => cw.clock.outsideNow();
    cw.clock.suspend(SEC - (storeNow() % SEC) + 500);
    const ledger = new MemoryLedger(cw.store, storeNow);
    // The last slot ran 3.5 s ago by the store's clock: 3 slots since were missed.
    const last = Math.floor(storeNow() / SEC) * SEC - 3 * SEC;
    ledger.put({ name: 'tick', key: slotKey(last), slotAtMs: last, status: 'succeeded', token: 0n });
    cw.clock.stepWall(30 * SEC);
    const warnings: string[] = [];
    const logger: LoggerLike = { debug: () => undefined, info: () => undefined, error: () => undefined, warn: (_o, msg) => void warnings.push(msg ?? '') };
    const ran: Array<{ slot: number; atStore: number }> = [];
    const takeover = storeNow();
    crons.push(
      startCron(cw.leasehold({ logger, suspension: false }), ledger, 'tick', { schedule: everySchedule(SEC), ttl: 30_000 }, (ctx: SlotContext) => void ran.push({ slot: ctx.slotAtMs, atStore: storeNow() })),
    );
    await cw.clock.until(() => ran.length >= 6, 60_000);
    const rows = await ledger.records('tick');
    const skipped = rows.filter((r) => r.status === 'skipped');
    for (const r of skipped) assert.ok(r.slotAtMs! <= takeover, `${r.key} was recorded ${r.reason} but lay ${r.slotAtMs! - takeover} ms in the store's future`);
    assert.equal(skipped.length, 2, 'catch-up latest: the 2 older missed slots skipped, the newest run');
    for (const r of ran) assert.ok(r.atStore >= r.slot, `${slotKey(r.slot)} ran ${r.slot - r.atStore} ms before its time by the store's clock`);
    const slots = ran.map((r) => r.slot);
    assert.deepEqual(slots, [last + 3 * SEC, last + 4 * SEC, last + 5 * SEC, last + 6 * SEC, last + 7 * SEC, last + 8 * SEC], 'every slot from the newest missed one on runs, once');
    assert.ok(warnings.some((m) => /this host's clock is 30\.0s ahead of the store's/.test(m)), warnings.join('\n'));
  });
});

void describe('a per-slot replica whose clock runs ahead, starting while a dead replica\'s term still holds the lease', () => {
  void it('runs the slots due by the store\'s clock once that term has run out, not the slots its own clock names', async () => {
    const cw = world();
    const storeNow = (): number => cw.clock.outsideNow();
    cw.clock.suspend(SEC - (storeNow() % SEC) + 500);
    const ledger = new MemoryLedger(cw.store, storeNow);
    const last = Math.floor(storeNow() / SEC) * SEC;
    ledger.put({ name: 'tick', key: slotKey(last), slotAtMs: last, status: 'succeeded', token: 0n });
    // The replica that ran that slot died holding the next slot's term (SIGKILL mid-term): the
    // lease stays held for its TTL, so this replica's first try at the lease is answered busy.
    const DEAD_TTL = 3 * SEC;
    const [dead] = await cw.store.claim([{ name: 'tick', holder: 'dead-replica', ttlMs: DEAD_TTL, expect: null, nextNonce: 'ZGVhZA' }]);
    assert.equal(dead?.outcome, 'acquired');
    const deadUntil = storeNow() + DEAD_TTL;
    cw.clock.stepWall(30 * SEC);
    const ran: Array<{ slot: number; atStore: number }> = [];
    crons.push(
      startCron(cw.leasehold({ suspension: false }), ledger, 'tick', { schedule: everySchedule(SEC), ttl: 30_000, mode: 'per-slot' }, (ctx: SlotContext) => void ran.push({ slot: ctx.slotAtMs, atStore: storeNow() })),
    );
    // Before the fix the replica, having timed its first slot by its own clock, took it as the
    // cursor once the store said 'early', and slept 30 s (its clock's lead) before running any.
    // A slot a second after the dead term runs out, plus one slot's margin, is the bound.
    await cw.clock.until(() => ran.length >= 3, deadUntil - storeNow() + 3 * SEC);
    for (const r of ran) assert.ok(r.atStore >= r.slot, `${slotKey(r.slot)} ran ${r.slot - r.atStore} ms before its time by the store's clock`);
    assert.ok(ran[0]!.slot <= deadUntil + SEC, `the first slot run, ${slotKey(ran[0]!.slot)}, lies ${ran[0]!.slot - deadUntil} ms after the dead term ended`);
    const slots = ran.map((r) => r.slot);
    assert.equal(new Set(slots).size, slots.length, `a slot ran twice: ${slots.map(slotKey).join(', ')}`);
  });
});
