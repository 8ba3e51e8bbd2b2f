/**
 * Per-slot mode, on the fake clock: a slot's claim meets a store error (unavailable, retryable:
 * a slow or restarting store). The claim decides nothing, so the slot is still anyone's to run:
 * the replica tries again shortly, before the next slot, instead of sitting the slot out until the
 * next slot's term finds it missing ("missed: no replica could claim it"). One replica here, so
 * nobody else would run it either.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';
import { EARLY_HOLD_MS } from '../../src/scheduler/per-slot-timing.js';

const SEC = 1000;
const MINUTE = 60 * SEC;
const { world, crons } = useCronWorld();

void describe('per-slot: a store error on the slot claim', () => {
  void it('the slot is tried again and runs before the next slot, not recorded missed at it', async () => {
    const cw = world();
    const now = (): number => cw.clock.outsideNow();
    // Past EARLY_HOLD_MS: a new name's first term started closer after a slot runs that slot.
    cw.clock.suspend(MINUTE - (now() % MINUTE) + EARLY_HOLD_MS + 100);
    const ledger = new MemoryLedger(cw.store, now);
    const ran: number[] = [];
    crons.push(startCron(cw.leasehold({ suspension: false }), ledger, 'minutely', { schedule: everySchedule(MINUTE), ttl: 3 * SEC }, (ctx) => void ran.push(ctx.slotAtMs)));
    // The startup term settles; the first slot is about a minute away.
    await cw.clock.advance(5 * SEC);
    const slot = Math.ceil(now() / MINUTE) * MINUTE;
    await cw.clock.advance(slot - now() - 20);
    // Down across the slot's claim, back 300 ms later.
    cw.store.fail();
    await cw.clock.advance(320);
    assert.equal(ran.length, 0, 'nothing ran while the store was down');
    cw.store.heal();
    await cw.clock.until(() => ran.includes(slot), 10 * SEC).catch(async () => {
      const rows = (await ledger.records('minutely')).map((r) => `${r.key} ${r.status} ${r.reason ?? ''}`);
      throw new Error(`${slotKey(slot)} did not run within 10 s of the store coming back; ran ${ran.map(slotKey).join(', ')}; ledger:\n${rows.join('\n')}`);
    });
    assert.ok(now() - slot < MINUTE / 2, 'run long before the next slot');
  });
});
