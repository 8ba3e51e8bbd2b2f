/**
 * Per-slot mode, on the fake clock: a slot's winner whose ledger reads find an older slot owed
 * (an ended term's, rerun by default) runs that slot's job first. The on-time slot's claim must
 * wait for it: sent with the reads (the early claim, ../../src/scheduler/early-claim.ts), the slot
 * sat 'claimed' through the older job, so a term that ended during it left the slot claimed and
 * never started (the next term reran it per --on-interrupted instead of handling it per
 * --catch-up), and a term that did not recorded an on-time start for a late run. And an early
 * claim that the ledger rejects (a schema fault, not retryable) is a ledger error like any other:
 * the cron stops, its lease released, not a process killed by an unhandled rejection.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron, type SlotContext, type SlotEvent } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey, type SlotLedgerPort } from '../../src/scheduler/ledger.js';
import type { Term } from '../../src/core/lease.js';
import type { World } from '../unit/harness.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';

const SEC = 1000;
const TTL = 3 * SEC;
/** The older slot's rerun, when it runs to the end. */
const OLDER_JOB_MS = 400;
const { world, crons } = useCronWorld();

/**
 * The world at 100 ms past a second, a ledger where `S - 2` succeeded (the schedule has run before)
 * and, with `owedOlder`, `S - 1` was left interrupted by an ended term, and another holder's term
 * on the lease from 600 ms before `S`: the replica started next has its startup try refused, so
 * its first term is `S`'s, on time, won when that holder releases at `S + 50`.
 */
async function setUp(cw: World, owedOlder: boolean): Promise<{ ledger: MemoryLedger; S: number; release: () => Promise<void> }> {
  const now = (): number => cw.clock.outsideNow();
  cw.clock.suspend(SEC - (now() % SEC) + 100);
  const S = Math.ceil(now() / SEC) * SEC + 2 * SEC;
  const ledger = new MemoryLedger(cw.store, now);
  ledger.put({ name: 'tick', key: slotKey(S - 2 * SEC), slotAtMs: S - 2 * SEC, status: 'succeeded', token: 0n });
  if (owedOlder) ledger.put({ name: 'tick', key: slotKey(S - SEC), slotAtMs: S - SEC, status: 'interrupted', token: 0n });
  await cw.clock.advance(S - 600 - now());
  const other = cw.leasehold({ suspension: false }).lease('tick', { ttl: TTL });
  await other.acquire({ wait: false });
  return { ledger, S, release: async () => void (await other.release()) };
}

function trail(ledger: MemoryLedger, events: SlotEvent[]): string {
  const rows = [...ledger.rows.values()].map((r) => `${r.key} ${r.status} t${r.token} ${r.reason ?? ''}`);
  return `ledger:\n${rows.join('\n')}\nevents:\n${events.map((e) => `${e.slot} ${e.event} t${e.token} ${e.reason ?? ''}`).join('\n')}`;
}

void describe("per-slot: the on-time slot's claim and an older owed slot", () => {
  void it("a term that ends during the older slot's rerun leaves the on-time slot unclaimed, handled by the next term per --catch-up", async () => {
    const cw = world();
    const now = (): number => cw.clock.outsideNow();
    const { ledger, S, release } = await setUp(cw, true);
    const events: SlotEvent[] = [];
    let failed = false;
    let termOfOlder: Term | undefined;
    const cron = startCron(cw.leasehold({ suspension: false }), ledger, 'tick', { schedule: everySchedule(SEC), ttl: TTL }, async (ctx: SlotContext) => {
      if (ctx.slotAtMs !== S - SEC || failed) return;
      // The store goes down for the lease's renewals: the term ends at its deadline, mid-job.
      failed = true;
      termOfOlder = ctx.term;
      cw.store.fail();
      await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    });
    crons.push(cron);
    cron.on('slot', (e) => events.push(e));
    await cw.clock.advance(S + 50 - now());
    await release();
    // The term ends within one TTL of its last renewal (it stands down before the store's expiry).
    await cw.clock.until(() => termOfOlder?.signal.aborted === true, TTL + SEC).catch(() => {
      throw new Error(`the older slot's rerun did not start, or its term did not end; ${trail(ledger, events)}`);
    });
    await cw.clock.advance(100);
    const row = ledger.rows.get(`tick\u0000${slotKey(S)}`);
    assert.equal(row, undefined, `${slotKey(S)}, whose job never started, has no row from the term that ended; ${trail(ledger, events)}`);
    // The store back: the next slot's term finds S missing and records it per --catch-up latest.
    cw.store.heal();
    await cw.clock.until(() => ledger.rows.get(`tick\u0000${slotKey(S)}`) !== undefined, 3 * SEC).catch(() => {
      throw new Error(`no later term recorded ${slotKey(S)}; ${trail(ledger, events)}`);
    });
    const later = ledger.rows.get(`tick\u0000${slotKey(S)}`)!;
    assert.equal(later.status, 'skipped', `${slotKey(S)} recorded per --catch-up; ${trail(ledger, events)}`);
    assert.match(later.reason ?? '', /^missed/, `as missed, not as interrupted; ${trail(ledger, events)}`);
    assert.deepEqual(events.filter((e) => e.slotAtMs === S && e.event === 'started'), [], `${slotKey(S)} never started; ${trail(ledger, events)}`);
  });

  void it('a term that runs the older slot first starts the on-time slot late, and its row and event say so', async () => {
    const cw = world();
    const now = (): number => cw.clock.outsideNow();
    const { ledger, S, release } = await setUp(cw, true);
    const events: SlotEvent[] = [];
    let olderEnded: number | undefined;
    const cron = startCron(cw.leasehold({ suspension: false }), ledger, 'tick', { schedule: everySchedule(SEC), ttl: TTL }, async (ctx: SlotContext) => {
      if (ctx.slotAtMs !== S - SEC) return;
      await new Promise<void>((resolve) => cw.clock.setTimeout(resolve, OLDER_JOB_MS));
      olderEnded = now();
    });
    crons.push(cron);
    cron.on('slot', (e) => events.push(e));
    await cw.clock.advance(S + 50 - now());
    await release();
    await cw.clock.until(() => events.some((e) => e.slotAtMs === S && e.event === 'succeeded'), TTL).catch(() => {
      throw new Error(`${slotKey(S)} did not run; ${trail(ledger, events)}`);
    });
    assert.ok(olderEnded !== undefined, `the older slot was rerun first; ${trail(ledger, events)}`);
    const started = events.find((e) => e.slotAtMs === S && e.event === 'started');
    const row = ledger.rows.get(`tick\u0000${slotKey(S)}`)!;
    // The ledger answers at once on this clock: the claim lands as the older job ends, no sooner.
    assert.ok(row.startedAtMs! >= olderEnded, `${slotKey(S)}'s row starts at ${row.startedAtMs! - S} ms past the slot, after the older job's end at ${olderEnded - S} ms; ${trail(ledger, events)}`);
    assert.ok((started?.delayMs ?? 0) >= olderEnded - S, `the 'started' event's delay (${started?.delayMs} ms) counts the older job (ended ${olderEnded - S} ms past the slot); ${trail(ledger, events)}`);
  });
});

void describe('per-slot: an early claim the ledger rejects', () => {
  void it('stops the cron through its error event, the lease released, no job run', async () => {
    const cw = world();
    const now = (): number => cw.clock.outsideNow();
    const { ledger, S, release } = await setUp(cw, false);
    const fault = new Error('slot ledger: relation "leasehold_slots" does not exist (a schema fault: not retryable)');
    // Claims rejected at once; reads answered 50 ms later, so the claim's rejection comes while
    // they are out, before anything has awaited it.
    const broken = new Proxy(ledger, {
      get(target, prop) {
        const v: unknown = Reflect.get(target, prop, target);
        if (typeof v !== 'function' || prop === 'constructor') return v;
        if (prop === 'claim') return () => Promise.reject(fault);
        const f = (...args: unknown[]): Promise<unknown> => Promise.resolve((v as (...a: unknown[]) => unknown).apply(target, args));
        if (prop !== 'records') return f;
        return (...args: unknown[]) => new Promise((resolve, reject) => cw.clock.setTimeout(() => void f(...args).then(resolve, reject), 50));
      },
    }) as SlotLedgerPort;
    const ran: number[] = [];
    const errors: unknown[] = [];
    const lh = cw.leasehold({ suspension: false });
    // --on-interrupted skip: the configuration in which the claim goes out with the reads.
    const cron = startCron(lh, broken, 'tick', { schedule: everySchedule(SEC), ttl: TTL, onInterrupted: 'skip' }, (ctx) => void ran.push(ctx.slotAtMs));
    crons.push(cron);
    cron.on('error', (e) => errors.push(e));
    await cw.clock.advance(S + 50 - now());
    await release();
    // The term's reads take 50 ms; the error then takes the cron down within a release's round trip.
    await cw.clock.until(() => errors.length > 0, SEC).catch(() => {
      throw new Error(`no error event within a second of the term; ran ${ran.map(slotKey).join(', ')}`);
    });
    assert.equal(errors[0], fault, 'the ledger\'s error, as it was thrown');
    assert.deepEqual(ran, [], 'no job ran without a recorded claim');
    await cw.clock.advance(100);
    assert.equal(cron.lease.isLeader, false, 'the process does not believe it leads');
    assert.equal(cw.store.row('tick')?.endedBy, 'released', 'the term was released, not left to run out');
  });
});
