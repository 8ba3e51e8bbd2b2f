/**
 * A replica that dies mid-job (issue 33 item 5): three per-slot `startCron` replicas (processes
 * of their own, bench/cron-replica.ts) run a slot every 2 s whose job takes 1.2 s; the replica
 * running a job is SIGKILLed 200 ms into it, a fresh one takes its place, and the figure is how
 * long after the kill another replica starts that same slot again (onInterrupted 'rerun'). With
 * liveness 'session' the dead replica's session ends with its connection, and the rerun should
 * follow in milliseconds; the baseline, same store, same run, is liveness 'ttl', where it waits
 * for the dead term's TTL to run out. Both by this host's clock (the kill and the replicas' job
 * starts). Stores without sessions (Redis, etcd) are skipped, saying so.
 */
import { openSlotLedger, openStore } from '../src/backends/index.js';
import { makeTestStore, type StoreKind } from '../test/helpers/stores.js';
import { sleep, stat, uniq, type Recorder, type Stat } from './lib.js';
import { startReplica, type Replica } from './cron-failover.js';
import type { CronReplicaConfig } from './cron-replica.js';

const PERIOD_MS = 2000;
const JOB_MS = 1200;
/** Into the job: the kill lands while it runs, not as it starts or ends. */
const KILL_AFTER_MS = 200;
const SESSION_STORES: readonly StoreKind[] = ['postgres', 'mysql', 'sqlite'];

interface MidJob {
  /** Per kill: from the SIGKILL to another replica's start of the killed slot. */
  rerun: Stat;
  /** Kills whose slot no replica started again before the bound (the next kill's wait ends it). */
  notRerun: number;
  /** The killed slots the ledger ends with as succeeded (each should be). */
  succeeded: number;
}

async function oneLiveness(kind: StoreKind, liveness: 'ttl' | 'session', kills: number, ttl: number): Promise<MidJob> {
  const ts = await makeTestStore(kind);
  const name = uniq('cron-midjob');
  const config: CronReplicaConfig = { url: ts.url, name, mode: 'per-slot', ttl, periodMs: PERIOD_MS, liveness, jobMs: JOB_MS };
  const live: Replica[] = [];
  const reruns: number[] = [];
  const killed: number[] = [];
  let notRerun = 0;
  try {
    for (let i = 0; i < 3; i++) live.push(await startReplica(config));
    const starts = (): number => live.reduce((n, r) => n + r.starts.length, 0);
    // Two slots started with every replica up: past start-up.
    for (const end = Date.now() + 30_000; starts() < 2 && Date.now() < end; ) await sleep(20);
    for (let k = 0; k < kills; k++) {
      // The next job to start, wherever it starts.
      const before = new Map(live.map((r) => [r, r.starts.length]));
      let runner: Replica | undefined;
      for (const end = Date.now() + 4 * PERIOD_MS; runner === undefined && Date.now() < end; ) {
        runner = live.find((r) => r.starts.length > before.get(r)!);
        if (runner === undefined) await sleep(5);
      }
      if (runner === undefined) throw new Error(`no job started within ${4 * PERIOD_MS} ms (${liveness})`);
      const [slot, startedAt] = runner.starts.at(-1)!;
      await sleep(Math.max(0, startedAt + KILL_AFTER_MS - Date.now()));
      const killedAt = Date.now();
      runner.proc.kill('SIGKILL');
      live.splice(live.indexOf(runner), 1);
      killed.push(slot);
      live.push(await startReplica(config));
      // The rerun: the dead term's TTL (the baseline) and two slots more bound the wait.
      let rerunAt: number | undefined;
      for (const end = killedAt + ttl + 2 * PERIOD_MS; rerunAt === undefined && Date.now() < end; ) {
        rerunAt = live.flatMap((r) => r.starts).find(([s, at]) => s === slot && at > killedAt)?.[1];
        if (rerunAt === undefined) await sleep(5);
      }
      if (rerunAt === undefined) notRerun++;
      else reruns.push(rerunAt - killedAt);
      // The next kill after the rerun's job has ended, not while it runs.
      await sleep(JOB_MS + 200);
    }
    for (const r of live) r.proc.kill('SIGTERM');
    await Promise.all(live.map((r) => new Promise((res) => (r.proc.exitCode !== null ? res(null) : r.proc.once('exit', res)))));
    live.length = 0;
    const store = await openStore(ts.url);
    const ledger = await openSlotLedger(store, ts.url);
    const rows = await ledger.records(name, { limit: 10_000 });
    await ledger.close();
    await store.close();
    const succeeded = killed.filter((s) => rows.some((r) => r.slotAtMs === s && r.status === 'succeeded')).length;
    return { rerun: stat(reruns), notRerun, succeeded };
  } finally {
    for (const r of live) r.proc.kill('SIGKILL');
    await ts.cleanup();
  }
}

/** `kills` per liveness; the TTL is the baseline's wait (3 s at least: a slot and a half). */
export async function cronMidJob(rec: Recorder, kind: StoreKind, kills: number, ttlMs: number): Promise<void> {
  if (!SESSION_STORES.includes(kind)) {
    rec.skip('cron-failover', kind, `mid-job kill: liveness 'session' is PostgreSQL, MySQL and SQLite only; on ${kind} a killed job's slot is rerun when the dead term's TTL runs out`);
    return;
  }
  const ttl = Math.max(3000, ttlMs);
  const session = await oneLiveness(kind, 'session', kills, ttl);
  const ttlRun = await oneLiveness(kind, 'ttl', kills, ttl);
  rec.add({
    figure: 'cron-failover',
    store: kind,
    label: `mid-job kill, TTL ${ttl / 1000}s`,
    unit: 'ms to rerun',
    leasehold: session.rerun,
    baselineName: "liveness 'ttl'",
    baseline: ttlRun.rerun,
    extra: {
      kills,
      'session not rerun': session.notRerun,
      'ttl not rerun': ttlRun.notRerun,
      'session killed slots succeeded': session.succeeded,
      'ttl killed slots succeeded': ttlRun.succeeded,
    },
  });
}
