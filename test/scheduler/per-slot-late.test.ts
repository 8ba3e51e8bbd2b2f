/**
 * Per-slot mode, on the fake clock: a replica whose try at the lease is answered only after the
 * slot's winner has run the job and released (on SQLite, ten processes queue on one write lock for
 * longer than a short job's whole term) wins a term for a slot that is already done. Its read of
 * what it owes already shows the slot finished, so it claims nothing: on SQLite the claim would be
 * one more write the other replicas queue behind, and with ten replicas these late terms were
 * most of a slot's store requests. Where the slot's claim goes out with that read (a store that
 * refuses a late contender, with --on-interrupted skip: ../../src/scheduler/early-claim.ts), the
 * claim is answered 'done' and the term runs nothing either.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron, type SlotEvent } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey, type SlotClaimRequest, type SlotClaimResult } from '../../src/scheduler/ledger.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { ClaimRequest, LeasePort } from '../../src/core/port.js';
import type { World } from '../unit/harness.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';

const SEC = 1000;
const { world, crons } = useCronWorld();

/**
 * A late replica's term for a slot another replica has run. `honours`: its store says it honours
 * unlessReleasedSince (the reference store does), though its tries here are granted all the same.
 */
async function lateTerm(cw: World, honours: boolean, lateOptions: { onInterrupted?: 'skip' }): Promise<{ slot: number; ran: number[]; events: SlotEvent[]; claims: Array<{ key: string; outcome: string }> }> {
  const now = (): number => cw.clock.outsideNow();
  cw.clock.suspend(10 * SEC - (now() % (10 * SEC)) + 100);
  const ledger = new MemoryLedger(cw.store, now);
  const options = { schedule: everySchedule(SEC), ttl: 3 * SEC };
  const ran: number[] = [];
  const slot = Math.ceil(now() / SEC) * SEC + 4 * SEC;
  // The first replica's jobs before `slot` take 600 ms: the late replica's tries at them find
  // the lease held, so its last term is its startup's, and at `slot` it reads what it owes.
  const first = async (ctx: { slotAtMs: number }): Promise<void> => {
    ran.push(ctx.slotAtMs);
    if (ctx.slotAtMs < slot) await new Promise<void>((resolve) => cw.clock.setTimeout(resolve, 600));
  };
  crons.push(startCron(cw.leasehold({ suspension: false }), ledger, 'tick', options, first));
  await cw.clock.advance(200);
  // The late replica: each of its lease claims reaches the store 300 ms after it was sent,
  // after the other replica's no-op job at `slot` and its release.
  const slow = new Proxy(cw.store, {
    get(target, prop) {
      // A store that ignores unlessReleasedSince (the reference store honours it, and would
      // refuse the late try outright): the late term and its read are what is under test.
      // Without `honours` it says so, as PostgreSQL does.
      if (prop === 'honoursReleasedSince' && !honours) return undefined;
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      const f = (...args: unknown[]): unknown => (v as (...a: unknown[]) => unknown).apply(target, args);
      if (prop !== 'claim') return f;
      const ignoring = (reqs: ClaimRequest[]): unknown => f(reqs.map(({ unlessReleasedSince: _u, ...r }) => r));
      return (reqs: ClaimRequest[]) => new Promise((resolve) => cw.clock.setTimeout(() => resolve(ignoring(reqs)), 300));
    },
  }) as LeasePort;
  const claims: Array<{ key: string; outcome: string }> = [];
  const lateLedger = new Proxy(ledger, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        const r = (v as (...a: unknown[]) => unknown).apply(target, args);
        if (prop !== 'claim') return r;
        const key = (args[0] as SlotClaimRequest).key;
        return (r as Promise<SlotClaimResult>).then((c) => {
          claims.push({ key, outcome: c.outcome });
          return c;
        });
      };
    },
  });
  const events: SlotEvent[] = [];
  const other = startCron(new Leasehold({ store: slow, clock: cw.clock, suspension: false }), lateLedger, 'tick', { ...options, ...lateOptions }, (ctx) => void ran.push(ctx.slotAtMs));
  crons.push(other);
  other.on('slot', (e) => events.push(e));
  await cw.clock.advance(2 * SEC);
  claims.length = 0;
  await cw.clock.advance(slot - now() + 900);
  return { slot, ran, events, claims };
}

const said = (events: SlotEvent[]): string => events.map((e) => `${e.slot} ${e.event}`).join(', ');

void describe('per-slot: a try answered after the winner released', () => {
  void it('the late term reads the slot done and claims nothing', async () => {
    const { slot, ran, events, claims } = await lateTerm(world(), false, {});
    assert.deepEqual(ran.filter((t) => t === slot), [slot], `${slotKey(slot)} ran once`);
    const late = events.find((e) => e.slotAtMs === slot && e.event === 'done-already');
    assert.ok(late !== undefined, `the late replica won a term for ${slotKey(slot)} after it was done (events: ${said(events)})`);
    assert.deepEqual(claims.filter((c) => c.key === slotKey(slot)), [], `no ledger claim for a slot the read showed done (events: ${said(events)})`);
  });

  void it("where the claim goes out with the read, it is answered 'done' and the late term runs nothing", async () => {
    const { slot, ran, events, claims } = await lateTerm(world(), true, { onInterrupted: 'skip' });
    assert.deepEqual(ran.filter((t) => t === slot), [slot], `${slotKey(slot)} ran once`);
    assert.ok(events.some((e) => e.slotAtMs === slot && e.event === 'done-already'), `the late replica won a term for ${slotKey(slot)} after it was done (events: ${said(events)})`);
    assert.deepEqual(claims.filter((c) => c.key === slotKey(slot)), [{ key: slotKey(slot), outcome: 'done' }], `one claim, sent with the read, answered done (events: ${said(events)})`);
    assert.ok(!events.some((e) => e.slotAtMs === slot && e.event === 'started'), `the late replica started nothing for ${slotKey(slot)} (events: ${said(events)})`);
  });
});
