/**
 * Leader mode, on the fake clock: a schedule name the ledger has never seen, whose first leader
 * dies before writing any row. A follower was up and waiting all along, so the slot that came due
 * while the dead leader's term ran out was owed: the new leader catches it up (--catch-up), as it
 * would for a name with rows. It used to read a name with no rows as starting "with the next
 * slot" after its own election, and that slot had no row at all.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron, type SlotContext } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey, type SlotLedgerPort } from '../../src/scheduler/ledger.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { LeasePort } from '../../src/core/port.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';

const SEC = 1000;
const PERIOD = 10 * SEC;
const { world, crons } = useCronWorld();

interface Death {
  now: boolean;
  /** The calls sent since, unanswered: failed at the test's end so that the dead cron can stop. */
  unanswered: Array<(e: Error) => void>;
}

/** `target` as a process that dies when `dead.now` is set: every call from then on goes unanswered. */
function dies<T extends object>(target: T, dead: Death): T {
  return new Proxy(target, {
    get(t, prop) {
      const v: unknown = Reflect.get(t, prop, t);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]): unknown => (dead.now ? new Promise((_, reject) => dead.unanswered.push(reject)) : (v as (...a: unknown[]) => unknown).apply(t, args));
    },
  });
}

void describe('leader: a new name whose first leader dies before its first slot', () => {
  void it('the follower that was waiting catches up the slot that came due meanwhile (--catch-up latest runs it)', async () => {
    const cw = world();
    const now = (): number => cw.clock.outsideNow();
    // 3 s past a slot: nothing is due at start.
    cw.clock.suspend(PERIOD - (now() % PERIOD) + 3 * SEC);
    const ledger = new MemoryLedger(cw.store, now);
    const ran: Array<{ who: string; slot: number }> = [];
    const job = (who: string) => (ctx: SlotContext): void => void ran.push({ who, slot: ctx.slotAtMs });
    const slot = Math.ceil(now() / PERIOD) * PERIOD;
    const dead: Death = { now: false, unanswered: [] };
    const options = { schedule: everySchedule(PERIOD), ttl: 6 * SEC, mode: 'leader' as const };
    // Stopped last, once its unanswered calls have failed: left out of `crons`.
    const a = startCron(new Leasehold({ store: dies(cw.store as LeasePort, dead), clock: cw.clock, suspension: false }), dies<SlotLedgerPort>(ledger, dead), 'tick', options, job('a'));
    await cw.clock.advance(200);
    crons.push(startCron(new Leasehold({ store: cw.store, clock: cw.clock, suspension: false }), ledger, 'tick', options, job('b')));
    try {
      // A leads; it dies 2 s before the slot, so its term runs out after it.
      await cw.clock.advance(slot - 2 * SEC - now());
      dead.now = true;
      await cw.clock.advance(slot + PERIOD + 500 - now());
      const rows = [...ledger.rows.values()].filter((r) => r.slotAtMs !== null).sort((a, b) => a.slotAtMs! - b.slotAtMs!);
      const said = `the ledger:\n${rows.map((r) => `${slotKey(r.slotAtMs!)} ${r.status} ${r.reason ?? ''}`).join('\n') || '(none)'}\nran: ${ran.map((r) => `${r.who} ${slotKey(r.slot)}`).join(', ') || '(none)'}`;
      assert.deepEqual(rows.map((r) => r.slotAtMs), [slot, slot + PERIOD], `a row for the slot due while the dead leader's term ran out, and the next; ${said}`);
      assert.deepEqual(ran, [{ who: 'b', slot }, { who: 'b', slot: slot + PERIOD }], said);
    } finally {
      dead.now = false;
      for (const reject of dead.unanswered.splice(0)) reject(new StoreUnavailableError('the process was dead'));
      const stopping = a.stop();
      await cw.clock.advance(10 * SEC);
      await stopping;
    }
  });
});
