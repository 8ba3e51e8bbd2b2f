/**
 * Three replicas of a real node-cron 4 app (`* * * * * *`, `distributed: true`, the leasehold
 * coordinator), the second started 300 ms after the first and the third with its wall clock
 * 400 ms behind (libfaketime, when installed); on the second store selected, two replicas, the
 * second both late and behind. The leader is SIGKILLed in the middle of a job.
 * Every slot from the first to the last is in the ledger once, final, and started at most once
 * at the resource; the killed slot is recorded (interrupted, then skipped: node-cron cannot hand
 * a coordinator a past slot to run), and so are the slots that fired while no replica led.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';
import { checkEverySlotOnce, hasFaketime, justifiedOverlaps, ledgerRows, readRuns, startReplica, until, whenReady, type Replica } from './replicas.js';

const TTL_MS = 2000;
const JOB_MS = 400;
const script = fileURLToPath(new URL('./fixtures/node-cron-replica.js', import.meta.url));
const kinds = selectedStores().filter((k): k is StoreKind => k === 'postgres' || k === 'sqlite');
const dir = mkdtempSync(join(tmpdir(), 'lh-node-cron-'));
const stores: TestStore[] = [];
const replicas: Replica[] = [];
after(async () => {
  for (const r of replicas) r.proc.kill('SIGKILL');
  for (const s of stores) await s.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

// The stores' runs side by side: each is mostly waiting for one-second slots.
void describe('node-cron with leaseholdCoordinator', { concurrency: true }, () => {
  for (const [i, kind] of kinds.entries()) {
    const count = i === 1 ? 2 : 3;
    void it(`on ${kind}: ${count} replicas, one late and one with its clock behind: every slot once, through a SIGKILL of the leader mid-job`, async () => {
      const ts = await makeTestStore(kind);
      stores.push(ts);
      const resource = join(dir, `resource-${kind}.log`);
      const args = [ts.url, resource, String(JOB_MS)];
      const a = startReplica(script, args);
      replicas.push(a);
      await new Promise((r) => setTimeout(r, 300));
      const all = count === 3 ? [a, startReplica(script, args), startReplica(script, args, '-0.4')] : [a, startReplica(script, args, '-0.4')];
      replicas.push(...all.slice(1));
      const ended = (): number => readRuns(resource).filter((r) => r.what === 'end').length;
      // Every replica booted (whenReady's own bound), then 4 one-second slots; generous on a loaded machine.
      await whenReady(all);
      await until('four slots ran', () => ended() >= 4, 20_000);
      // Kill the leader while its job runs: wait for a start without its end.
      await until('a job is running', () => {
        const runs = readRuns(resource);
        const last = runs.at(-1);
        return last?.what === 'start';
      }, 5000);
      const running = readRuns(resource).at(-1)!;
      const leader = all.find((r) => r.pid === running.pid)!;
      assert.ok(leader !== undefined, `the pid ${running.pid} that ran the slot is none of the replicas`);
      leader.proc.kill('SIGKILL');
      await leader.exited;
      const survivors = all.filter((r) => r !== leader);
      const before = ended();
      // A new leader within a TTL (the dead one's lease must expire) plus renewal slack, then 6 slots.
      await until('six slots ran under a new leader', () => readRuns(resource).filter((r) => r.what === 'end' && r.pid !== leader.pid).length >= 6 && ended() >= before + 6, 2 * TTL_MS + 15_000);
      for (const r of survivors) r.proc.kill('SIGTERM');
      const codes = await Promise.all(survivors.map((r) => r.exited));
      assert.deepEqual(codes, survivors.map(() => 0), survivors.map((r) => r.out).join('\n---\n'));

      const rows = await ledgerRows(ts.url, 'tick');
      const runs = readRuns(resource);
      const { succeeded, skipped, twice } = checkEverySlotOnce(rows, runs, 1000);
      assert.equal(twice, 0, 'node-cron never reruns a slot');
      assert.ok(rows.length >= 10, `only ${rows.length} slots`);
      const killed = rows.find((r) => r.key === running.slot);
      assert.equal(killed?.status, 'skipped', `the killed slot ${running.slot} is ${killed?.status}`);
      assert.match(killed?.reason ?? '', /interrupted in term/);
      // The unled slots: at most the TTL's worth (and the next leader's first slot) plus one.
      const unled = skipped.filter((r) => /while no replica led/.test(r.reason ?? ''));
      assert.ok(unled.length <= TTL_MS / 1000 + 2, `${unled.length} slots fired while no replica led`);
      // One job at a time: a fire while the leader's previous job still ran is recorded overlap.
      // It is correct when that job really was running (its claim and completion, by the store's
      // clock, either side of the skip): on a loaded machine a 400 ms job and its two ledger
      // writes can outlast the 1 s period, and fires queued behind a new term's takeover resume
      // together. An overlap with no such job is a lost slot.
      const { justified: overlaps } = justifiedOverlaps(rows);
      // None missed while a replica led: every other skipped row is the killed slot.
      const other = skipped.filter((r) => r.key !== running.slot && !unled.includes(r) && !overlaps.includes(r));
      assert.deepEqual(
        other.map((r) => [r.key, r.reason]),
        [],
        `slots skipped while a replica led: ${rows.map((r) => `${r.key.slice(11, 19)} ${r.status} ${r.holder?.slice(0, 8) ?? ''} ${r.startedAtMs}-${r.endedAtMs} ${(r.reason ?? '').slice(0, 20)}`).join(' | ')}`,
      );
      // Slots the killed process started never reached "end": the only unfinished start.
      const unfinished = runs.filter((r) => r.what === 'start' && !runs.some((e) => e.what === 'end' && e.slot === r.slot));
      assert.deepEqual(unfinished.map((r) => r.slot), [running.slot]);
      process.stdout.write(`# node-cron on ${kind}, ${count} replicas: ${rows.length} slots, ${succeeded} ran once, 0 twice, ${skipped.length} recorded skipped (${unled.length} unled, 1 interrupted, ${overlaps.length} overlap while a job ran); clock offset ${hasFaketime() ? 'on' : 'off (no libfaketime)'}\n`);
    });
  }
});
