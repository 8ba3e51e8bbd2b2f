/**
 * Scheduled singletons through replica deaths: three `startCron` replicas (processes of their
 * own) fire every second; the replica that ran the latest slot is SIGKILLed between slots,
 * several times, and a fresh one replaces it. Then ten replicas and no kill: the cost of
 * contention alone. Per mode, same run, same store: slot start
 * lateness (the claim's store time minus the slot's), slots lost per kill (neither run nor
 * recorded interrupted, from the ledger), and store requests per slot (every lease-store and
 * ledger call of every replica, renewals included, over the slots of the run). The baseline is
 * the leader mode: what per-slot mode (the default) is measured against.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { openSlotLedger, openStore } from '../src/backends/index.js';
import { makeTestStore, type StoreKind } from '../test/helpers/stores.js';
import type { CronMode } from '../src/scheduler/cron.js';
import { sleep, stat, uniq, type Recorder, type Stat } from './lib.js';
import type { CronReplicaConfig } from './cron-replica.js';

const replicaJs = fileURLToPath(new URL('./cron-replica.js', import.meta.url));
const PERIOD_MS = 1000;

interface Replica {
  proc: ChildProcess;
  ran: string[];
  requests: number;
  /** Its requests by method (`store.acquire`, `ledger.claim`, `store.acquire!NotAcquiredError` for the refused). */
  byMethod: Record<string, number>;
  /** When it last printed "ran". */
  ranAt: number;
}

function startReplica(config: CronReplicaConfig): Promise<Replica> {
  const proc = spawn(process.execPath, [replicaJs, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const r: Replica = { proc, ran: [], requests: 0, byMethod: {}, ranAt: 0 };
  let buf = '';
  return new Promise((resolve, reject) => {
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const lines = buf.split('\n');
      buf = lines.pop()!;
      for (const l of lines) {
        if (l === 'up') resolve(r);
        else if (l.startsWith('ran ')) {
          r.ran.push(l.slice(4));
          r.ranAt = Date.now();
        } else if (l.startsWith('requests ')) {
          const [n, by] = l.slice(9).split(' ', 2);
          r.requests = Number(n);
          if (by !== undefined) r.byMethod = JSON.parse(by) as Record<string, number>;
        }
      }
    });
    proc.once('exit', (code) => reject(new Error(`a cron replica exited (${code}) before it was up`)));
  });
}

export interface Outcome {
  lateness: Stat;
  /** Per slot, by method: where the requests went. */
  perSlotByMethod: Record<string, number>;
  lostPerKill: number;
  requestsPerSlot: number;
  slots: number;
}

function sumBy(rs: Replica[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of rs) for (const [k, v] of Object.entries(r.byMethod)) out[k] = (out[k] ?? 0) + v;
  return out;
}

export async function oneMode(kind: StoreKind, mode: CronMode, kills: number, ttl: number, replicas: number): Promise<Outcome> {
  const ts = await makeTestStore(kind);
  const name = uniq('cron-bench');
  const config: CronReplicaConfig = { url: ts.url, name, mode, ttl, periodMs: PERIOD_MS };
  const all: Replica[] = [];
  const live: Replica[] = [];
  try {
    for (let i = 0; i < replicas; i++) {
      const r = await startReplica(config);
      all.push(r);
      live.push(r);
    }
    const ranCount = (): number => all.reduce((n, r) => n + r.ran.length, 0);
    const waitSlots = async (n: number): Promise<void> => {
      const target = ranCount() + n;
      for (const end = Date.now() + 60_000; ranCount() < target && Date.now() < end; ) await sleep(20);
    };
    await waitSlots(3);
    const t0 = Date.now();
    const requestsAt0 = all.reduce((n, r) => n + r.requests, 0);
    const byAt0 = sumBy(all);
    const firstSlot = Math.ceil(t0 / PERIOD_MS) * PERIOD_MS;
    for (let k = 0; k < kills; k++) {
      // Between slots: about 400 ms after the latest slot ran.
      const victim = live.reduce((a, b) => ((b.ran.at(-1) ?? '') > (a.ran.at(-1) ?? '') ? b : a));
      await sleep(Math.max(0, victim.ranAt + 400 - Date.now()));
      victim.proc.kill('SIGKILL');
      live.splice(live.indexOf(victim), 1);
      const fresh = await startReplica(config);
      all.push(fresh);
      live.push(fresh);
      // The next kill once a killed leader's lease has run out and slots run again.
      await sleep(ttl);
      await waitSlots(2);
    }
    // With no kills: a steady run of 8 slots, for the contention cost alone.
    await waitSlots(kills === 0 ? 8 : 2);
    const lastSlot = Math.floor(Date.now() / PERIOD_MS) * PERIOD_MS - PERIOD_MS;
    // The request counts of the dead are their last report (at most 200 ms old).
    const requests = all.reduce((n, r) => n + r.requests, 0);
    const byEnd = sumBy(all);
    const tEnd = Date.now();
    for (const r of live) r.proc.kill('SIGTERM');
    await Promise.all(live.map((r) => new Promise((res) => (r.proc.exitCode !== null ? res(null) : r.proc.once('exit', res)))));
    const store = await openStore(ts.url);
    const ledger = await openSlotLedger(store, ts.url);
    const rows = (await ledger.records(name, { limit: 100_000 })).filter((r) => r.slotAtMs !== null && r.slotAtMs >= firstSlot && r.slotAtMs <= lastSlot);
    await ledger.close();
    await store.close();
    const slots = (lastSlot - firstSlot) / PERIOD_MS + 1;
    const kept = rows.filter((r) => r.status === 'succeeded' || r.status === 'interrupted').length;
    const lateness = rows.filter((r) => r.status === 'succeeded' && r.startedAtMs !== null).map((r) => r.startedAtMs! - r.slotAtMs!);
    // Over the measured span: the restarted replicas' start-up requests are part of the cost.
    const spanSlots = (tEnd - t0) / PERIOD_MS;
    const perSlotByMethod = Object.fromEntries(Object.entries(byEnd).map(([k, v]) => [k, Math.round(((v - (byAt0[k] ?? 0)) / spanSlots) * 100) / 100]));
    return { lateness: stat(lateness), perSlotByMethod, lostPerKill: kills === 0 ? slots - kept : (slots - kept) / kills, requestsPerSlot: (requests - requestsAt0) / ((tEnd - t0) / PERIOD_MS), slots };
  } finally {
    for (const r of live) r.proc.kill('SIGKILL');
    await ts.cleanup();
  }
}

/**
 * `smoke` (the suite's own test): one kill, a 1 s TTL, no ten-replica run; proves the figure
 * runs, its numbers mean nothing.
 */
export async function cronFailover(rec: Recorder, kind: StoreKind, kills: number, ttlMs: number, smoke: boolean): Promise<void> {
  // Three seconds at least: the death of a leader should cost several slots of a 1 s schedule.
  const ttl = smoke ? 1000 : Math.max(3000, ttlMs);
  const extra = (o: Outcome, tag: string, k: number): Record<string, number> => ({
    [`${tag} lost${k === 0 ? '' : '/kill'}`]: o.lostPerKill,
    [`${tag} requests/slot`]: o.requestsPerSlot,
    [`${tag} slots`]: o.slots,
    [`${tag} p90`]: o.lateness.p90,
  });
  // Kills with 3 replicas; then 10 replicas and no kill, for what contention costs per slot.
  const runs: Array<[number, number]> = smoke ? [[3, 1]] : [[3, kills], [10, 0]];
  for (const [replicas, k] of runs) {
    const perSlot = await oneMode(kind, 'per-slot', k, ttl, replicas);
    const leader = await oneMode(kind, 'leader', k, ttl, replicas);
    rec.add({
      figure: 'cron-failover',
      store: kind,
      label: `${replicas} replicas, ${k} kills`,
      unit: 'ms late',
      leasehold: perSlot.lateness,
      baselineName: 'leader mode',
      baseline: leader.lateness,
      extra: { ...extra(perSlot, 'per-slot', k), ...extra(leader, 'leader', k) },
    });
  }
}
