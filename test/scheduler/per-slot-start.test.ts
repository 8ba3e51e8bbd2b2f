/**
 * Per-slot mode, on the fake clock, with every ledger call answered 50 ms after it is sent (the
 * lease store at once): how many ledger round trips a slot's winner waits for between winning the
 * slot's term and starting the job (issue 33: the winner's job should start within the first
 * fire plus one round trip). A winner that ran the slot before this one only claims; one that did
 * not reads what the ledger owes first, and one in its first term also marks stale claims and
 * writes the schedule's record. The claim used to wait for all of these, one after another: a
 * read and a claim (100 ms) for the first, five calls (250 ms) for the second. Now the first
 * term's two reads go out together and the schedule's record beside the job: three calls. The
 * slot's claim goes out with the reads, one round trip less, only on a store that refuses a late
 * contender and only when no older slot can run a job first (../../src/scheduler/early-claim.ts):
 * --on-interrupted skip, --catch-up not all.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCron, type SlotContext } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import type { ScheduleRecord } from '../../src/scheduler/schedule-record.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { LeasePort } from '../../src/core/port.js';
import type { World } from '../unit/harness.js';
import { useCronWorld } from './cron-world.js';
import { MemoryLedger } from './memory-ledger.js';

const SEC = 1000;
/** Every ledger call's round trip. */
const RTT = 50;
const { world, crons } = useCronWorld();

/** A memory ledger that also keeps the schedule's record, as every built-in ledger does. */
class RecordingLedger extends MemoryLedger {
  readonly written: ScheduleRecord[] = [];
  putSchedule(record: ScheduleRecord): Promise<void> {
    this.written.push(record);
    return Promise.resolve();
  }
}

/**
 * `ledger` with each call reaching it `RTT` ms after it is sent, on the world's clock (answered
 * at once from there, so that the store's time in an answer is the world's when it arrives).
 */
function slow(cw: World, ledger: RecordingLedger): RecordingLedger {
  return new Proxy(ledger, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function' || prop === 'constructor') return v;
      return (...args: unknown[]) =>
        new Promise((resolve, reject) => {
          cw.clock.setTimeout(() => void Promise.resolve((v as (...a: unknown[]) => unknown).apply(target, args)).then(resolve, reject), RTT);
        });
    },
  });
}

/**
 * The world's store with this replica's lease claims sent `delay.ms` late (the replica that loses
 * the slots it should); `acquires` gets the world's time as each contender's claim reaches it.
 * Without `honours`, it says it does not honour unlessReleasedSince, as PostgreSQL does not.
 */
function lagging(cw: World, delay: { ms: number }, acquires: number[], honours: boolean): LeasePort {
  const store = cw.store as LeasePort;
  return new Proxy(store, {
    get(target, prop) {
      // The store's own answers are unchanged: the flag only decides what the cron sends.
      if (prop === 'honoursReleasedSince' && !honours) return undefined;
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      const f = (...args: unknown[]): unknown => {
        if (prop === 'claim' && (args[0] as Array<{ expect: unknown }>)[0]?.expect === null) acquires.push(cw.clock.outsideNow());
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
      if (prop !== 'claim') return f;
      return (...args: unknown[]) => (delay.ms === 0 ? f(...args) : new Promise((resolve) => cw.clock.setTimeout(() => resolve(f(...args)), delay.ms)));
    },
  });
}

/**
 * Replicas A and B on `store`: B's first term wins S2, A (which ran S1, not S2) wins S3. Resolves
 * with how many ledger round trips after its term's acquire each started its job.
 */
async function measureStarts(cw: World, options: { onInterrupted?: 'skip' }, honours: boolean): Promise<{ b2: number; a3: number }> {
  const now = (): number => cw.clock.outsideNow();
  // 100 ms past a second.
  cw.clock.suspend(SEC - (now() % SEC) + 100);
  const ledger = slow(cw, new RecordingLedger(cw.store, now));
  const cronOptions = { schedule: everySchedule(SEC), ttl: 3 * SEC, ...options };
  /** Each job's start, after its term's acquire by how long (the store answers those at once). */
  const starts: Array<{ who: string; slot: number; afterWon: number }> = [];
  const acquires: Record<string, number[]> = { A: [], B: [] };
  const job = (who: string) => (ctx: SlotContext): void => void starts.push({ who, slot: ctx.slotAtMs, afterWon: now() - acquires[who]!.filter((t) => t <= now()).at(-1)! });
  const delayA = { ms: 0 };
  const delayB = { ms: 0 };
  const replica = (who: string, delay: { ms: number }): Leasehold => new Leasehold({ store: lagging(cw, delay, acquires[who]!, honours), clock: cw.clock, suspension: false });
  // A starts alone: its startup term, then the first slot (S1).
  crons.push(startCron(replica('A', delayA), ledger, 'tick', cronOptions, job('A')));
  const s1 = Math.ceil(now() / SEC) * SEC;
  await cw.clock.advance(s1 - now() + 10);
  // B starts while A's term for S1 holds the lease: B's startup try is busy, so its first term is S2's.
  crons.push(startCron(replica('B', delayB), ledger, 'tick', cronOptions, job('B')));
  const s2 = s1 + SEC;
  const s3 = s2 + SEC;
  // S2 goes to B (A's claims 5 ms late), S3 to A (B's late): A has not run S2, so it reads what is owed.
  delayA.ms = 5;
  await cw.clock.advance(s2 - now() + 500);
  delayA.ms = 0;
  delayB.ms = 5;
  await cw.clock.advance(s3 - now() + 500);
  const said = starts.map((s) => `${s.who} ${slotKey(s.slot)}: ${s.afterWon} ms after its term's acquire`).join('\n');
  const b2 = starts.find((s) => s.slot === s2);
  const a3 = starts.find((s) => s.slot === s3);
  assert.equal(b2?.who, 'B', `B ran S2 (its first term); the starts:\n${said}`);
  assert.equal(a3?.who, 'A', `A ran S3; the starts:\n${said}`);
  const rows = [...ledger.rows.values()].filter((r) => r.slotAtMs !== null && r.slotAtMs >= s1 && r.slotAtMs <= s3);
  assert.deepEqual(
    rows.map((r) => [r.key, r.status]).sort(),
    [s1, s2, s3].map((t) => [slotKey(t), 'succeeded']),
    'each slot has its row, succeeded',
  );
  assert.ok(ledger.written.length > 0, "the schedule's record was written");
  return { b2: b2.afterWon / RTT, a3: a3.afterWon / RTT };
}

void describe("per-slot: a slot's winner starts the job", () => {
  void it('three ledger round trips after winning its first term, two after one whose previous slot another replica ran (the defaults)', async () => {
    const { b2, a3 } = await measureStarts(world(), {}, true);
    // An older slot could be rerun first: the claim waits for the reads (early-claim.ts).
    assert.equal(b2, 3, "B's first term: marking stale claims, the two reads together, then the claim");
    assert.equal(a3, 2, "A's term: its read, then the claim");
  });

  void it('with --on-interrupted skip, on a store that refuses a late contender: the claim goes with the reads, two and one', async () => {
    const { b2, a3 } = await measureStarts(world(), { onInterrupted: 'skip' }, true);
    assert.equal(b2, 2, "B's first term: marking stale claims, then the reads and the claim together");
    assert.equal(a3, 1, "A's term: its read and its claim together");
  });

  void it('with --on-interrupted skip, on a store that does not refuse one (PostgreSQL, etcd): three and two, as with the defaults', async () => {
    const { b2, a3 } = await measureStarts(world(), { onInterrupted: 'skip' }, false);
    assert.equal(b2, 3, "B's first term: marking stale claims, the two reads together, then the claim");
    assert.equal(a3, 2, "A's term: its read, then the claim");
  });
});
