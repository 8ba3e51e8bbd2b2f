/**
 * The scheduler's rules on a fake clock and the in-memory ledger (same claim rule, same fencing
 * by the lease row): --catch-up latest / all / none after a gap, --on-interrupted rerun / skip
 * at the engine, a leader woken late, and a stop that lands between a slot's claim and its job.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { startCron, type CatchUp, type CronHandle, type CronMode, type SlotContext } from '../../src/scheduler/cron.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { slotKey, type SlotRecord } from '../../src/scheduler/ledger.js';
import { world, type World } from '../unit/harness.js';
import { MemoryLedger } from './memory-ledger.js';

const NAME = 'tick';
const SEC = 1000;
let w: World | undefined;
const crons: CronHandle[] = [];
afterEach(async () => {
  for (const c of crons.splice(0)) await c.stop();
  await w?.close();
  w = undefined;
});

interface Setup {
  w: World;
  ledger: MemoryLedger;
  ran: SlotContext[];
  /** The next whole second of world time after start, and the world time now. */
  now: () => number;
}

/** A world whose time sits `offsetMs` after a whole second, with an empty ledger. */
function setup(offsetMs = 500): Setup {
  w = world();
  const cw = w;
  const ledger = new MemoryLedger(cw.store, () => cw.clock.outsideNow());
  cw.clock.suspend(SEC - (cw.clock.outsideNow() % SEC) + offsetMs);
  return { w: cw, ledger, ran: [], now: () => cw.clock.outsideNow() };
}

function start(s: Setup, options: { catchUp?: CatchUp; onInterrupted?: 'rerun' | 'skip'; ttl?: number; mode?: CronMode }, job?: (ctx: SlotContext) => Promise<{ exitCode: number } | void>): CronHandle {
  const cron = startCron(s.w.leasehold(), s.ledger, NAME, { schedule: everySchedule(SEC), ttl: options.ttl ?? 30_000, catchUpWindow: '1h', ...options }, async (ctx) => {
    s.ran.push(ctx);
    return job?.(ctx);
  });
  crons.push(cron);
  return cron;
}

const statuses = (rows: SlotRecord[]): Array<[number, string]> => rows.map((r) => [r.slotAtMs!, r.status]);

// Both modes keep the same rules: catch-up, interrupted, a late wake, a stop mid-claim.
for (const mode of ['per-slot', 'leader'] as const) {

  void describe(`${mode}: catch-up after a gap with no leader`, () => {
    // The ledger knows the name (a slot ran 5.5 s ago), so the 5 slots since were missed.
    const gap = (s: Setup): { first: number; missed: number[] } => {
      const first = Math.floor(s.now() / SEC) * SEC - 5 * SEC;
      s.ledger.put({ name: NAME, key: slotKey(first), slotAtMs: first, status: 'succeeded', token: 0n });
      return { first, missed: [1, 2, 3, 4, 5].map((i) => first + i * SEC) };
    };

    void it('latest: runs the newest missed slot and records the others skipped', async () => {
      const s = setup();
      const { missed } = gap(s);
      start(s, { mode, catchUp: 'latest' });
      await s.w.clock.until(() => s.ran.length >= 1);
      assert.deepEqual(s.ran.map((c) => c.slotAtMs), [missed[4]]);
      const rows = await s.ledger.records(NAME);
      assert.deepEqual(statuses(rows).slice(1, 5), missed.slice(0, 4).map((t) => [t, 'skipped']));
      assert.match(rows[1]!.reason!, /--catch-up latest ran/);
    });

    void it('all: runs every missed slot, oldest first, then the schedule goes on', async () => {
      const s = setup();
      const { missed } = gap(s);
      start(s, { mode, catchUp: 'all' });
      await s.w.clock.until(() => s.ran.length >= 6);
      assert.deepEqual(s.ran.slice(0, 5).map((c) => c.slotAtMs), missed);
      assert.equal(s.ran[5]!.slotAtMs, missed[4]! + SEC);
      const rows = await s.ledger.records(NAME);
      assert.ok(rows.every((r) => r.status !== 'skipped'), JSON.stringify(statuses(rows)));
    });

    void it('none: records every missed slot skipped and runs only slots that come due after', async () => {
      const s = setup();
      const { missed } = gap(s);
      start(s, { mode, catchUp: 'none' });
      await s.w.clock.until(() => s.ran.length >= 1);
      assert.deepEqual(s.ran.map((c) => c.slotAtMs), [missed[4]! + SEC]);
      const rows = await s.ledger.records(NAME);
      assert.deepEqual(statuses(rows).slice(1, 6), missed.map((t) => [t, 'skipped']));
      assert.match(rows[1]!.reason!, /--catch-up none/);
    });
  });

  void describe(`${mode}: a slot an ended term left claimed`, () => {
    const leftClaimed = (s: Setup): number => {
      const t = Math.floor(s.now() / SEC) * SEC - 2 * SEC;
      s.ledger.put({ name: NAME, key: slotKey(t), slotAtMs: t, status: 'claimed', token: 0n });
      return t;
    };

    void it('rerun: the new leader runs it again, as the rerun of term 0, with the same idempotency key', async () => {
      const s = setup();
      const t = leftClaimed(s);
      start(s, { mode, onInterrupted: 'rerun' });
      await s.w.clock.until(() => s.ran.some((c) => c.slotAtMs === t));
      const ctx = s.ran.find((c) => c.slotAtMs === t)!;
      assert.equal(ctx.rerunOf, 0n);
      assert.equal(ctx.idempotencyKey, `leasehold:${NAME}:slot:${slotKey(t)}`);
      await s.w.clock.advance(10);
      const row = (await s.ledger.records(NAME)).find((r) => r.slotAtMs === t)!;
      assert.equal(row.status, 'succeeded');
    });

    void it('skip: the new leader records it skipped and never runs it', async () => {
      const s = setup();
      const t = leftClaimed(s);
      start(s, { mode, onInterrupted: 'skip' });
      // Past the next two slots: the schedule goes on, the interrupted slot stays unrun.
      await s.w.clock.until(() => s.ran.length >= 2);
      assert.ok(!s.ran.some((c) => c.slotAtMs === t), `ran ${slotKey(t)}`);
      const row = (await s.ledger.records(NAME)).find((r) => r.slotAtMs === t)!;
      assert.equal(row.status, 'skipped');
      assert.match(row.reason!, /interrupted in term 0; --on-interrupted skip/);
    });
  });

  void describe(`${mode}: a leader woken late (paused, or a slow store)`, () => {
    for (const [catchUp, runs] of [
      ['latest', [4]],
      ['all', [1, 2, 3, 4]],
      ['none', []],
    ] as Array<[CatchUp, number[]]>) {
      void it(`--catch-up ${catchUp}: the slots that fell due while it slept follow the catch-up rule`, async () => {
        const s = setup(100);
        start(s, { mode, catchUp });
        // First slot: the next whole second.
        await s.w.clock.until(() => s.ran.length >= 1);
        const base = s.ran[0]!.slotAtMs;
        // Paused for 4.4 s: every clock moves and no timer runs. Four more slots are due on waking.
        s.w.clock.block(4400);
        await s.w.clock.advance(1);
        await s.w.clock.advance(10);
        assert.deepEqual(s.ran.slice(1).map((c) => (c.slotAtMs - base) / SEC), runs);
        const rows = (await s.ledger.records(NAME)).filter((r) => r.slotAtMs! > base && r.slotAtMs! <= base + 4 * SEC);
        assert.equal(rows.length, 4, 'each late slot has a row');
        for (const r of rows) {
          const ran = runs.includes((r.slotAtMs! - base) / SEC);
          assert.equal(r.status, ran ? 'succeeded' : 'skipped', `${r.key}: ${r.status} ${r.reason ?? ''}`);
          // Leader: 'the leader was late'; per-slot: 'this replica was late'.
          if (!ran) assert.match(r.reason!, /was late/);
        }
        // And the schedule goes on from there.
        await s.w.clock.until(() => s.ran.some((c) => c.slotAtMs === base + 5 * SEC), 2000);
      });
    }
  });

  void describe(`${mode}: a stop between a slot's claim and its job`, () => {
    void it('the job never starts; the slot is recorded interrupted and the next leader reruns it', async () => {
      const s = setup();
      const first = start(s, { mode });
      // The stop lands right after the claim is written, before its answer reaches the scheduler.
      let claimed: number | undefined;
      s.ledger.afterClaim = (req, r) => {
        if (r.outcome !== 'claimed' || claimed !== undefined) return;
        claimed = req.slotAtMs!;
        first.drain('SIGTERM');
      };
      await s.w.clock.until(() => claimed !== undefined);
      await s.w.clock.advance(10);
      s.ledger.afterClaim = undefined;
      assert.equal(s.ran.length, 0, 'a job started after the stop');
      let row = (await s.ledger.records(NAME)).find((r) => r.slotAtMs === claimed)!;
      assert.equal(row.status, 'interrupted');
      assert.match(row.reason!, /not started: SIGTERM/);
      // No further slot is claimed while draining.
      await s.w.clock.advance(3 * SEC);
      assert.deepEqual((await s.ledger.records(NAME)).map((r) => r.slotAtMs), [claimed]);
      await first.stop();
      start(s, { mode });
      await s.w.clock.until(() => s.ran.some((c) => c.slotAtMs === claimed));
      assert.equal(s.ran.find((c) => c.slotAtMs === claimed)!.rerunOf, row.token);
      await s.w.clock.advance(10);
      row = (await s.ledger.records(NAME)).find((r) => r.slotAtMs === claimed)!;
      assert.equal(row.status, 'succeeded');
    });

    void it('a job that fails after the stop was forwarded to it is recorded interrupted, one that succeeds succeeded', async () => {
      for (const exitCode of [143, 0]) {
        const s = setup();
        const cron: CronHandle = start(s, { mode }, async () => {
          cron.drain('SIGTERM');
          return { exitCode };
        });
        await s.w.clock.until(() => s.ran.length >= 1);
        await s.w.clock.advance(10);
        const rows = await s.ledger.records(NAME);
        assert.equal(rows.length, 1);
        assert.equal(rows[0]!.status, exitCode === 0 ? 'succeeded' : 'interrupted', rows[0]!.reason ?? '');
        if (exitCode !== 0) assert.match(rows[0]!.reason!, /SIGTERM while the job ran \(exit 143\)/);
        for (const c of crons.splice(0)) await c.stop();
        await s.w.close();
      }
    });
  });
}

void describe('per-slot: replicas firing at the same instant', () => {
  void it('run each slot once, each in a term of its own, and the lease is free between slots', async () => {
    const s = setup();
    const a = start(s, {});
    const b = start(s, {});
    const c = start(s, {});
    await s.w.clock.until(() => s.ran.length >= 6);
    const slots = s.ran.map((c) => c.slotAtMs);
    assert.equal(new Set(slots).size, slots.length, `a slot ran twice: ${slots.map(slotKey).join(', ')}`);
    for (let i = 1; i < s.ran.length; i++) {
      assert.equal(slots[i]! - slots[i - 1]!, SEC, 'a slot was skipped');
      assert.ok(s.ran[i]!.token > s.ran[i - 1]!.token, 'two slots ran in one term');
    }
    // Half a second after a slot, nobody holds the schedule's lease: a replica that died now would block nothing.
    await s.w.clock.advance(SEC - (s.now() % SEC) + SEC / 2);
    assert.ok(![a, b, c].some((x) => x.lease.isLeader), 'a replica holds the lease between slots');
    const rows = await s.ledger.records(NAME);
    assert.ok(rows.every((r) => r.status === 'succeeded'), JSON.stringify(statuses(rows)));
  });
});
