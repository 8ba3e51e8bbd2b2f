/**
 * Per-slot mode, on the fake clock: the first slot of a schedule name the ledger has never seen,
 * with one replica's startup term taken just after that slot.
 *
 * Every other replica takes a term granted since a slot came due, and released, as that slot's
 * winner: its claim for the slot is refused (busy, then "released since"). So a term begun after
 * a slot must run it or record it. A replica's first term used to read a name with no rows as
 * starting "with the next slot" after its own reads, so a startup term granted just after the
 * first slot counted that slot never owed and let go, while the replicas that had been up before
 * it were refused the slot: nobody ran it, and a later catch-up recorded it missed (CI on etcd,
 * scheduler/per-slot: three replicas, the third's startup term 124 ms after the first slot).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron, type SlotContext } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';
import { lateClaims, slowFirstCall } from './slow-stores.js';

const SEC = 1000;
const { world, crons } = useCronWorld();

void describe('per-slot: a new name whose first slot falls just before a replica starts', () => {
  for (const catchUp of ['latest', 'none'] as const) {
    void it(`runs that slot once (two replicas up before it, claims decided 150 ms late; a third starting 20 ms after it; --catch-up ${catchUp})`, async () => {
      const cw = world();
      const now = (): number => cw.clock.outsideNow();
      cw.clock.suspend(SEC - (now() % SEC) + 300);
      const ledger = new MemoryLedger(cw.store, now);
      const ran: Array<{ slot: number; token: bigint }> = [];
      const job = (ctx: SlotContext): Promise<void> => {
        ran.push({ slot: ctx.slotAtMs, token: ctx.token });
        return new Promise((resolve) => cw.clock.setTimeout(resolve, 100));
      };
      const first = Math.ceil(now() / SEC) * SEC;
      const replica = (claimMs: number): void => {
        crons.push(startCron(new Leasehold({ store: lateClaims(cw, { ms: claimMs }), clock: cw.clock, suspension: false }), ledger, 'tick', { schedule: everySchedule(SEC), ttl: 3 * SEC, catchUp }, job));
      };
      // Two replicas up before the first slot: their startup terms find nothing due there. (Up
      // 300 ms after the slot before it, they run that one: a term begun within 2 s of a slot
      // is that slot's winner to the rest of the fleet. That slot is not this test's.)
      replica(150);
      replica(150);
      await cw.clock.advance(first + 20 - now());
      // The third, whose startup claim is granted before the others' claims for the slot land.
      replica(0);
      await cw.clock.advance(first + 4 * SEC + 500 - now());
      const rows = [...ledger.rows.values()].filter((r) => r.slotAtMs !== null && r.slotAtMs >= first && r.slotAtMs <= first + 3 * SEC).sort((a, b) => a.slotAtMs! - b.slotAtMs!);
      const said = `the ledger:\n${rows.map((r) => `${slotKey(r.slotAtMs!)} ${r.status} ${r.reason ?? ''}`).join('\n') || '(none)'}\nthe jobs:\n${ran.map((r) => `${slotKey(r.slot)} token ${r.token}`).join('\n') || '(none)'}`;
      assert.deepEqual(
        rows.map((r) => r.slotAtMs),
        [first, first + SEC, first + 2 * SEC, first + 3 * SEC],
        `a row for each slot from the first; ${said}`,
      );
      for (const r of rows) assert.equal(r.status, 'succeeded', `${slotKey(r.slotAtMs!)} ran; ${said}`);
      for (const r of rows) assert.equal(ran.filter((j) => j.slot === r.slotAtMs).length, 1, `${slotKey(r.slotAtMs!)} ran once; ${said}`);
    });
  }
});

void describe('per-slot: a startup term whose first answer comes two periods after its grant', () => {
  void it('runs the slot just before its grant and the newest due by then; --catch-up latest records the one between', async () => {
    const cw = world();
    const now = (): number => cw.clock.outsideNow();
    cw.clock.suspend(SEC - (now() % SEC) + 300);
    const ledger = new MemoryLedger(cw.store, now);
    const first = Math.ceil(now() / SEC) * SEC;
    // The fleet ran the slot before: a name with rows, running.
    ledger.put({ name: 'tick', key: slotKey(first - SEC), slotAtMs: first - SEC, status: 'succeeded', token: 0n });
    // The startup term's first ledger call answered 2.5 s late (a slow store): two more slots come
    // due meanwhile, and the answer's store time says so.
    const slow = slowFirstCall(ledger, cw, 2500);
    const ran: number[] = [];
    await cw.clock.advance(first + 100 - now());
    crons.push(startCron(new Leasehold({ store: cw.store, clock: cw.clock, suspension: false }), slow, 'tick', { schedule: everySchedule(SEC), ttl: 3 * SEC }, (ctx: SlotContext) => void ran.push(ctx.slotAtMs)));
    await cw.clock.advance(first + 4 * SEC + 500 - now());
    const rows = [...ledger.rows.values()].filter((r) => r.slotAtMs !== null && r.slotAtMs >= first && r.slotAtMs <= first + 4 * SEC).sort((a, b) => a.slotAtMs! - b.slotAtMs!);
    const said = `the ledger:\n${rows.map((r) => `${slotKey(r.slotAtMs!)} ${r.status} ${r.reason ?? ''}`).join('\n') || '(none)'}\nran: ${ran.map(slotKey).join(', ') || '(none)'}`;
    assert.deepEqual(rows.map((r) => r.slotAtMs), [0, 1, 2, 3, 4].map((i) => first + i * SEC), `a row for each slot; ${said}`);
    assert.deepEqual(rows.map((r) => r.status), ['succeeded', 'skipped', 'succeeded', 'succeeded', 'succeeded'], said);
    assert.match(rows[1]!.reason ?? '', new RegExp(`--catch-up latest ran ${slotKey(first + 2 * SEC)}`), said);
    assert.deepEqual(ran.filter((t) => t <= first + 2 * SEC), [first, first + 2 * SEC], `the slot before the grant, then the newest; ${said}`);
  });
});
