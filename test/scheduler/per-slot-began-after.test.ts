/**
 * Per-slot mode, on the fake clock: a term for one slot that began, by the lease store's clock,
 * at or after the next slot.
 *
 * A store that honours unlessReleasedSince refuses every claim for slot S once a term begun at or
 * after S has been released by its holder: that term is taken to have run S. On etcd the term's
 * start is the granting host's clock, while the replica times its slots by its estimate of the
 * ledger's clock, a lower bound from etcd's HTTP Date header that can lag by up to a second
 * (src/backends/etcd/clock.ts). A replica whose estimate lags fires slot S-1 late by that lag;
 * under load its claim lands after S, it runs S-1, and its estimate says S is still most of a
 * second away, so it used to release the lease without running S. Every claim for S was then
 * refused as "released since", and S was recorded missed by the next slot's winner
 * (scheduler/per-slot on etcd, CI61: two terms begun around a slot, both released unrun).
 * Now such a term keeps the lease and runs S when its estimate says S is due.
 *
 * The in-memory store refuses the term's own holder too (etcd does not), so one replica alone
 * shows the loss here: every second slot was refused to it and recorded missed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron, type SlotContext } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';
import { lagging, lateClaims } from './slow-stores.js';

const SEC = 1000;
const { world, crons } = useCronWorld();

void describe('per-slot: a term that began at or after the next slot', () => {
  void it('keeps the lease and runs that slot (estimate 900 ms behind, claims decided 150 ms after sending)', async () => {
    const cw = world();
    const now = (): number => cw.clock.outsideNow();
    cw.clock.suspend(SEC - (now() % SEC) + 300);
    const ledger = new MemoryLedger(cw.store, now);
    const ran: Array<{ slot: number; at: number; token: bigint }> = [];
    const job = (ctx: SlotContext): Promise<void> => {
      ran.push({ slot: ctx.slotAtMs, at: now(), token: ctx.token });
      return new Promise((resolve) => cw.clock.setTimeout(resolve, 100));
    };
    const first = Math.ceil(now() / SEC) * SEC;
    crons.push(startCron(new Leasehold({ store: lateClaims(cw, { ms: 150 }), clock: cw.clock, suspension: false }), lagging(ledger, 900), 'tick', { schedule: everySchedule(SEC), ttl: 3 * SEC }, job));
    // Ends half-way between slots, no job running (stop() waits for one, on this fake clock).
    await cw.clock.advance(first + 8 * SEC + 500 - now());
    const rows = [...ledger.rows.values()].filter((r) => r.slotAtMs !== null && r.slotAtMs >= first + 2 * SEC && r.slotAtMs <= first + 6 * SEC).sort((a, b) => a.slotAtMs! - b.slotAtMs!);
    const said = `the ledger:\n${rows.map((r) => `${slotKey(r.slotAtMs!)} ${r.status} ${r.reason ?? ''}`).join('\n')}\nthe jobs:\n${ran.map((r) => `${slotKey(r.slot)} at +${r.at - r.slot} ms, token ${r.token}`).join('\n') || '(none)'}`;
    assert.equal(rows.length, 5, `a row for each slot from the third to the seventh; ${said}`);
    for (const r of rows) assert.equal(r.status, 'succeeded', `${slotKey(r.slotAtMs!)} ran; ${said}`);
    for (const r of rows) assert.equal(ran.filter((j) => j.slot === r.slotAtMs).length, 1, `${slotKey(r.slotAtMs!)} ran once; ${said}`);
  });
});
