/**
 * Per-slot mode on the real stores: every term's release reaches the store after the next slot's
 * time (its client gave up on it at once, as on a loaded store; it lands 900 ms later), although
 * every job ends before the next slot. The next slot's contenders find the lease held by the
 * earlier slot's term, which the store dates before their slot (ClaimResult.grantedAtMs): they
 * wait for its release and run the slot late. Before, each such slot was recorded 'missed: no
 * replica could claim it (a term ran past it ...)' (the unit form: per-slot-ran-past.test.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import { startCron, type CronHandle } from '../../src/scheduler/cron.js';
import { openScheduling, type Scheduling } from '../../src/scheduler/open.js';
import { everySchedule } from '../../src/scheduler/schedule.js';
import { makeTestStore, selectedStores } from '../helpers/stores.js';
import { lateReleases } from '../helpers/late-releases.js';

// A release lands RELEASE_LATE_MS after its job ends: past the next slot (JOB_MS + RELEASE_LATE_MS >
// PERIOD) and, by PERIOD - JOB_MS... well before the slot after it, where a contender's wait ends
// (1.7 s of slack). With a 1 s period the slack was 0.7 s, and a stressed host (stress-ng --cpu 2
// beside the suite) stretched claim, job and completion past it: a first slot recorded missed.
const SEC = 2000;
const JOB_MS = 400;
const RELEASE_LATE_MS = 1900;
const SLOTS = 6;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// A slot can also be missed because this process stood still past it (CI2 at load 9: PostgreSQL,
// Redis and etcd all missed the same two wall-clock slots, side by side in this process): the
// property is about late releases, so a miss inside a stall of the event loop does not count, and
// the attempt is made again (at most 3), saying so. Stalls are gaps over STALL_MS between ticks of
// a 50 ms timer, in wall-clock time as the slots are.
const STALL_MS = 500;
const stalls: Array<[number, number]> = [];
let lastTick = Date.now();
setInterval(() => {
  const now = Date.now();
  if (now - lastTick > STALL_MS) stalls.push([lastTick, now]);
  lastTick = now;
}, 50).unref();

// The stores side by side: each case is mostly sleeping through its slots (about 20 s), and one
// after another they made this file 106 s.
void describe('per-slot: releases that land after the next slot', { concurrency: true }, () => {
  for (const kind of selectedStores()) {
    void describe(`per-slot on ${kind}: releases that land after the next slot`, () => {
      // etcd was left out here from 2026-12-06 (2 of 3 runs, then 1 of 25, missed a slot; the one
      // history seen: a replica took the slot's term just after the earlier term's release landed
      // and let it go at once, with no ledger row or slot event). Two mends since cover that shape:
      // a first term told 'early' keeps the lease for its slot (per-slot-early), and a term begun
      // at or after the next slot runs it (per-slot-began-after). After the second it passed every
      // one of 55 runs on etcd but the 5 during which another process restarted the shared etcd (an
      // outage of 3-7 s: the late release never landed, and the slots meanwhile were rightly
      // missed). The failure message carries the lease's history and each replica's events.
      void it('each next slot runs late, once, after the earlier term is released; none is recorded missed', async () => {
        for (let attempt = 1; ; attempt++) {
          const ts = await makeTestStore(kind);
          const opened: Scheduling[] = [];
          const leaseholds: Leasehold[] = [];
          const crons: CronHandle[] = [];
          const delay = { ms: RELEASE_LATE_MS };
          try {
            await ts.store.migrate();
            const ran: number[] = [];
            const startedAt = Date.now();
            const trail: string[] = [];
            let running = 0;
            let maxRunning = 0;
            for (let i = 0; i < 2; i++) {
              const s = await openScheduling({ store: ts.url });
              opened.push(s);
              const lh = new Leasehold({ store: lateReleases(s.leasehold.store, delay), suspension: false });
              leaseholds.push(lh);
              const cron = startCron(lh, s.ledger, 'tick', { schedule: everySchedule(SEC), ttl: '6s', retention: false }, async (ctx) => {
                ran.push(ctx.slotAtMs);
                maxRunning = Math.max(maxRunning, ++running);
                await sleep(JOB_MS);
                running--;
              });
              crons.push(cron);
              // What each replica did, for a failure's message.
              const at = (): string => new Date().toISOString().slice(17, 23);
              cron.on('slot', (e) => trail.push(`${at()} replica ${i}: ${e.slot.slice(17)} ${e.event} token ${e.token}${e.reason === undefined ? '' : ` (${e.reason})`}`));
              cron.lease.on('acquired', (t) => trail.push(`${at()} replica ${i}: acquired token ${t.token}`));
              cron.lease.on('lost', (t, err) => trail.push(`${at()} replica ${i}: term ${t.token} ended: ${err.reason}: ${err.message}`));
              cron.lease.on('busy', (h, ms) => trail.push(`${at()} replica ${i}: busy (${h === lh.holder ? 'itself' : h}, ${ms} ms left)`));
            }
            // The first slots include each replica's startup term; the window is the slots after.
            await sleep(2 * SEC);
            const first = Math.ceil(Date.now() / SEC) * SEC;
            await sleep(SLOTS * SEC);
            const last = first + (SLOTS - 2) * SEC;
            // The last slots' late runs end; then releases land at once, for the stop.
            await sleep(2 * SEC);
            delay.ms = 0;
            await Promise.all(crons.map((c) => c.stop()));
            const rows = (await opened[0]!.ledger.records('tick', { sinceMs: first - 1, untilMs: last, limit: 1000 })).filter((r) => r.slotAtMs !== null && r.slotAtMs >= first);
            const said = rows.map((r) => `${r.key} ${r.status}${r.reason === null ? '' : ` (${r.reason})`}`).join('\n');
            // A loaded host can stretch a 400 ms job past its next slot: that slot is then an overlap
            // by the rule (the job's own term records it), never a missed one.
            const overlap = (reason: string | null): boolean => /^overlap/.test(reason ?? '');
            const missed = rows.filter((r) => r.status !== 'succeeded' && !(r.status === 'skipped' && overlap(r.reason)));
            const inStall = (at: number): boolean => stalls.some(([a, b]) => b >= at - SEC && a <= at + SEC);
            if (attempt < 3 && missed.length > 0 && missed.every((r) => inStall(r.slotAtMs!))) {
              process.stdout.write(`# ${kind}: attempt ${attempt}: ${missed.length} slot(s) missed while this process stood still (${stalls.map(([a, b]) => `${b - a} ms`).join(', ')}); again\n`);
              continue;
            }
            // The lease's terms around the window and what each replica did, for a failure's message.
            const story = async (): Promise<string> => {
              const hist = await ts.store.history({ name: 'tick', limit: 200 });
              const t0 = startedAt - SEC;
              const terms = hist.filter((h) => h.atMs >= t0).map((h) => `${new Date(h.atMs).toISOString()} ${h.event} ${h.holder ?? '-'} (was ${h.previousHolder ?? '-'}) token ${h.token}${h.detail === null ? '' : ` ${h.detail}`}`).join('\n');
              const who = leaseholds.map((l, i) => `replica ${i}: ${l.holder}`).join('\n');
              return `the ledger:\n${said}\nthe lease's history:\n${terms}\n${who}\nwhat the replicas did:\n${trail.join('\n')}`;
            };
            if (missed.length > 0) assert.fail(`every slot ran (or was an overlap); ${await story()}`);
            if (rows.length !== (last - first) / SEC + 1) assert.fail(`a row for every slot (${rows.length} of ${(last - first) / SEC + 1}); ${await story()}`);
            for (const r of rows.filter((x) => x.status === 'succeeded')) assert.equal(ran.filter((t) => t === r.slotAtMs).length, 1, `${r.key} ran once`);
            assert.equal(maxRunning, 1, 'no two jobs ran at once');
            break;
          } finally {
            delay.ms = 0;
            await Promise.all(crons.map((c) => c.stop()));
            for (const lh of leaseholds) await lh.close();
            for (const s of opened) await s.close();
            await ts.cleanup();
          }
        }
      });
    });
  }
});
