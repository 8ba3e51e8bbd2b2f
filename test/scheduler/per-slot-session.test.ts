/**
 * Per-slot cron with liveness 'session' (issue 33 item 5), three `leasehold cron --every 2s
 * --ttl 30s --liveness session` replicas as real processes on each store that supports the
 * mode. The replica running a slot's job is SIGKILLed (its job with it, as a host dies) just after
 * the job starts: the slot is rerun by another replica at its session's end, before the next slot
 * is due, not at the next slot's claim (what it was before) nor at the dead term's TTL. And every
 * slot's term is tied to its winner's session: no replica logs that it could not tie one.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Sandbox, until, type Running } from '../cli/helpers.js';
import { HangingJob } from './hanging-job.js';
import { overlapByRule, type Row } from './ledger-rows.js';
import { makeTestStore, selectedStores, SIDE_BY_SIDE } from '../helpers/stores.js';

const TTL_MS = 30_000;
const PERIOD_MS = 2000;
const KILLS = 2;
const sb = new Sandbox('cron-per-slot-session');
after(() => sb.cleanup());


void describe('per-slot cron with liveness session on each store', SIDE_BY_SIDE, () => {
  for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'mysql' || k === 'sqlite')) {
    void describe(`per-slot cron with liveness session on ${kind}`, { concurrency: 1 }, () => {
      void it('a replica killed mid-job: its slot is rerun at its session\'s end, before the next slot, and every term is tied to its session', async () => {
        const ts = await makeTestStore(kind);
        const replicas: Running[] = [];
        /** Every replica started, the killed ones too: their lines say what each did when a wait times out. */
        const all: Running[] = [];
        const killedJobs: number[] = [];
        // Every start is logged with its wall time in ms.
        const hj = new HangingJob(sb, `res-${kind}`, '$(date +%s%3N)');
        try {
          const args = ['cron', '--name', 'tick', '--every', '2s', '--ttl', `${TTL_MS}ms`, '--liveness', 'session', '--store', ts.url, '--', hj.job];
          const lines = (): string[][] => hj.lines();
          const ends = (): number => lines().filter((l) => l[0] === 'end').length;
          // A slot every 2 s, with room for a loaded host; far below the 30 s TTL, so nothing
          // here can pass by waiting for a dead term to expire.
          const BOUND_MS = 8 * PERIOD_MS;
          for (let i = 0; i < 3; i++) replicas.push(sb.start(args));
          all.push(...replicas);
          await until('three slots ran', () => ends() >= 3, BOUND_MS + PERIOD_MS * 3);

          const tookMs: number[] = [];
          for (let kill = 0; kill < KILLS; kill++) {
            hj.arm();
            await until('a job hangs', () => hj.hung() !== undefined, BOUND_MS);
            const { pid, slot: hung } = hj.hung()!;
            const runner = replicas.find((r) => r.stderr.includes(`slot ${hung}: started`));
            assert.ok(runner !== undefined, `no replica says it started ${hung}`);
            const killedAt = Date.now();
            killedJobs.push(Number(pid));
            hj.killReplicaMidJob(runner.pid);
            replicas.splice(replicas.indexOf(runner), 1);
            await until(`slot ${hung} rerun`, () => lines().some((l) => l[0] === 'end' && l[1] === hung), BOUND_MS);
            const starts = lines().filter((l) => l[0] === 'start' && l[1] === hung);
            assert.equal(starts.length, 2, `slot ${hung} started ${starts.length} times`);
            const rerunAt = Number(starts[1]![3]);
            const hungAt = Date.parse(hung!);
            tookMs.push(rerunAt - killedAt);
            // The property: the death is seen when the dead holder's session ends (its connection
            // closes, or its process is gone), and the rerun follows in a few round trips; before,
            // it waited for the next slot's claim (or, for a term tied to no session, the TTL).
            // The kill usually lands within a few hundred ms of the slot, so "before the next slot
            // is due" leaves over a second for those round trips on a loaded host. A kill that lands
            // past half the period (CI2: the job itself started 2.9 s late, the kill at +2431 ms) has
            // no room left for that comparison; the bound on the rerun after the kill still holds.
            if (killedAt - hungAt < PERIOD_MS / 2) {
              assert.ok(rerunAt < hungAt + PERIOD_MS, `slot ${hung} was rerun ${rerunAt - hungAt}ms after it was due, at or after the next slot (killed at +${killedAt - hungAt}ms)`);
            } else {
              process.stdout.write(`# ${kind}: the kill landed at +${killedAt - hungAt}ms of slot ${hung} (a late job on a loaded host): rerun ${rerunAt - killedAt}ms after it\n`);
            }
            assert.ok(rerunAt - killedAt < TTL_MS / 4, `rerun ${rerunAt - killedAt}ms after the kill`);
            assert.ok(BigInt(starts[1]![2]!) > BigInt(starts[0]![2]!), 'the rerun has a larger token');
            replicas.push(sb.start(args));
            all.push(replicas.at(-1)!);
            const before = ends();
            await until('two more slots after the rerun', () => ends() >= before + 2, BOUND_MS);
          }

          // A replica started after the last kill on a loaded host may still be loading: a SIGTERM
          // before its handler is installed kills it without the exit code this checks.
          await until('every replica has scheduled the cron', () => replicas.every((r) => r.stderr.includes('scheduled:')), BOUND_MS);
          for (const r of replicas) r.proc.kill('SIGTERM');
          for (const d of await Promise.all(replicas.map((r) => r.done))) assert.equal(d.code, 143, `exit ${String(d.code)}: ${d.stderr}`);
          for (const d of await Promise.all(replicas.map((r) => r.done))) assert.doesNotMatch(d.stderr, /could not tie this term/);

          const h = await sb.run(['cron', 'history', 'tick', '--json', '--limit', '1000', '--store', ts.url]);
          assert.equal(h.code, 0, h.stderr);
          const rows = JSON.parse(h.stdout) as Row[];
          assert.equal(new Set(rows.map((r) => r.slot)).size, rows.length, 'a slot has two rows');
          // No slot lost or skipped behind a dead term: each killed one rerun, every other run once
          // (an overlap kept by its rule is neither: a job that really ran past the next slot).
          assert.deepEqual(rows.filter((r) => r.status !== 'succeeded' && !overlapByRule(rows, r)).map((r) => `${r.slot} ${r.status} ${r.reason}`), []);
          assert.equal(rows.filter((r) => /rerun: term \d+ was interrupted/.test(r.reason ?? '')).length, KILLS);
          process.stdout.write(`# ${kind}: kill -> rerun start ${tookMs.map((t) => `${t}ms`).join(', ')} (TTL ${TTL_MS}ms, every ${PERIOD_MS}ms)\n`);
        } catch (e) {
          // What each replica said (pid, then its lines), and the jobs' log: a timeout alone says nothing of why.
          const said = all.map((r) => `--- replica ${r.pid}${replicas.includes(r) ? '' : ' (killed)'}:\n${r.stderr}`).join('\n');
          throw new Error(`${e instanceof Error ? e.message : String(e)}\n${said}\n--- jobs:\n${hj.text()}`, { cause: e });
        } finally {
          for (const r of replicas) {
            try {
              r.proc.kill('SIGKILL');
            } catch {
              // gone
            }
          }
          for (const pid of killedJobs) {
            try {
              process.kill(-pid, 'SIGKILL');
            } catch {
              // gone
            }
          }
          await ts.cleanup();
        }
      });
    });
  }
});
