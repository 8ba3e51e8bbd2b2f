/**
 * One chaos run, start to finish: a fresh lease namespace and resource schema, a proxy in front
 * of the store, N worker processes, the nemesis until the time is up (and every kind has been
 * injected once), then the checker over the logs and the report. Everything it starts, it stops;
 * every wait is bounded.
 */
import { appendFileSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorMessage } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import type { HistoryEntry } from '../../src/backends/store.js';
import { makeTestStore, TEST_PG_URL } from '../helpers/stores.js';
import { check } from './checker.js';
import { Fleet, type Worker } from './fleet.js';
import { Nemesis, Prng } from './nemesis.js';
import { ChaosProxy, isLoopback } from './proxy.js';
import { type ChaosReport, summaryText, writeReport } from './report.js';
import { createResource, dropResource, newResourceSchema, readCounters, readLog } from './resource.js';
import { findFaketime, pgAnswers, storeRestarter, storeUnreachable, type Restarter } from './services.js';
import { sessionEnder } from './sessions.js';
import { FAULT_KINDS, monoMs, type ChaosLiveness, type FaultKind, type FaultRecord, type StoreKind, type Timing } from './types.js';

export interface ChaosOptions {
  store: StoreKind;
  durationMs: number;
  workers: number;
  seed: number;
  reportDir: string;
  unfenced: boolean;
  profile: 'short' | 'long';
  ttlMs: number;
  /** The workers' LeaseOptions.liveness (default 'ttl'). */
  liveness?: ChaosLiveness;
  /** Restrict the nemesis to these kinds (default: every kind the store supports). */
  faults?: FaultKind[];
  /** Keep the resource schema and lease namespace after the run (for digging). */
  keep: boolean;
  /** How to replay this run, for the report. */
  command: string;
  signal?: AbortSignal;
}

const LEASE = 'chaos-singleton';
const MAX_FAULTS = 10_000;

export async function runChaos(o: ChaosOptions, say: (line: string) => void): Promise<ChaosReport> {
  const dir = o.reportDir;
  for (const sub of ['workers', 'state', 'snapshots']) rmSync(join(dir, sub), { recursive: true, force: true });
  rmSync(join(dir, 'nemesis.jsonl'), { force: true });
  mkdirSync(dir, { recursive: true });

  // Only loopback, ever: the nemesis restarts servers and cuts connections.
  const pgHost = new URL(TEST_PG_URL).hostname;
  if (!isLoopback(pgHost)) throw new Error(`the chaos resource must be a PostgreSQL on loopback, not ${pgHost} (LEASEHOLD_TEST_PG_URL)`);
  if (!(await pgAnswers())) throw new Error(`the chaos resource needs PostgreSQL at ${TEST_PG_URL.replace(/:[^:@/]*@/, ':***@')}`);
  const down = await storeUnreachable(o.store);
  if (down !== null) throw new Error(down);

  const storeTtlMs = o.store === 'etcd' ? Math.max(2, Math.ceil(o.ttlMs / 1000)) * 1000 : o.ttlMs;
  const timing: Timing = { ttlMs: o.ttlMs, storeTtlMs, renewMs: Math.floor(o.ttlMs / 3), workMinMs: 100, workMaxMs: 300 };
  const prng = new Prng(o.seed);
  const ts = await makeTestStore(o.store);
  const schema = newResourceSchema();
  await createResource(TEST_PG_URL, schema);

  const liveness = o.liveness ?? 'ttl';
  let proxy: ChaosProxy | null = null;
  let workerStoreUrl = ts.url;
  // liveness 'session' refuses a connection whose server listens on another port than the URL
  // names (a pooler or proxy, docs/liveness.md case 4): the workers go straight to the store, and
  // the server's side of the link is cut by ending sessions there instead.
  if (o.store !== 'sqlite' && liveness === 'ttl') {
    const u = new URL(ts.url);
    if (!isLoopback(u.hostname)) throw new Error(`the chaos store must be on loopback, not ${u.hostname}`);
    const defaultPort = { postgres: 5432, redis: 6379, etcd: 2379, mysql: 3306 }[o.store];
    proxy = await new ChaosProxy(u.hostname, u.port === '' ? defaultPort : Number(u.port)).start();
    u.hostname = '127.0.0.1';
    u.port = String(proxy.port);
    workerStoreUrl = u.toString();
  }

  const faketime = findFaketime();
  const r = await storeRestarter(o.store);
  const restarter: Restarter | null = 'unsupported' in r ? null : r;
  const se = sessionEnder(o.store, ts.url, liveness);
  const sessions = 'unsupported' in se ? null : se;
  const unsupported: Partial<Record<FaultKind, string>> = {};
  for (const k of FAULT_KINDS) {
    if ((k === 'clock-jump' || k === 'clock-past') && faketime === null) unsupported[k] = 'libfaketime not found (Debian package faketime)';
    else if (k === 'clock-past' && o.store === 'sqlite') {
      unsupported[k] =
        "SQLite's clock is each process's own: processes sharing one file share one kernel clock, so one of them weeks in the past cannot happen (clock-jump steps every worker's clock instead)";
    }
    if (k.startsWith('proxy-') && proxy === null) {
      unsupported[k] =
        o.store === 'sqlite'
          ? 'SQLite is opened as a file: there is no connection to cut'
          : "liveness 'session' refuses a proxy between the holder and the store (its server listens on another port): the workers connect directly";
    }
    if (k === 'session-end' && 'unsupported' in se) unsupported[k] = se.unsupported;
    if (k === 'restart' && 'unsupported' in r) unsupported[k] = r.unsupported;
    if (o.faults !== undefined && !o.faults.includes(k) && unsupported[k] === undefined) unsupported[k] = 'not selected with --faults';
  }
  const kinds = FAULT_KINDS.filter((k) => unsupported[k] === undefined);

  const wallMinusMono = Date.now() - monoMs();
  const fleet = new Fleet({
    dir,
    storeKind: o.store,
    workerStoreUrl,
    resourceUrl: TEST_PG_URL,
    schema,
    lease: LEASE,
    timing,
    unfenced: o.unfenced,
    faketime,
    maxLifeMs: o.durationMs * 3 + 300_000,
    liveness,
  });
  const nemesis = new Nemesis({ fleet, proxy, restarter, sessions, lease: LEASE, timing, prng, profile: o.profile, hostClock: o.store === 'sqlite', dir, say }, kinds);
  const faults: FaultRecord[] = [];
  const trims: Array<{ worker: string; at: number }> = [];
  const harnessErrors: string[] = [];
  const live = { accepted: 0, fenced: 0, duplicate: 0, errors: 0 };
  fleet.onEvent((w, e) => {
    if (e.ev === 'accepted') live.accepted++;
    else if (e.ev === 'fenced') live.fenced++;
    else if (e.ev === 'duplicate') live.duplicate++;
    else if (e.ev === 'error') {
      live.errors++;
      say(`  ${w.id} reported an error: ${e.message}`);
    }
  });

  const runStart = monoMs();
  const elapsed = (): string => `${((monoMs() - runStart) / 1000).toFixed(1).padStart(6)}s`;
  say(
    `[chaos] store ${o.store} (${ts.store.description}), resource ${schema}, seed ${o.seed}, ${o.workers} workers, ttl ${timing.ttlMs}ms, ` +
      `${o.unfenced ? 'UNFENCED' : 'fenced'}, liveness ${liveness}, ${Math.round(o.durationMs / 1000)}s, faults: ${kinds.join(' ')}`,
  );
  for (const [k, why] of Object.entries(unsupported)) say(`[chaos] not injecting ${k}: ${why}`);
  const mode = (): 'elector' | 'acquire' => (prng.chance(0.5) ? 'elector' : 'acquire');
  for (let i = 0; i < o.workers; i++) fleet.spawn({ origin: 'initial', mode: mode() });

  const progress = setInterval(
    () => {
      const leaders = fleet.leaders.map((w) => `${w.id}${w.state === 'stopped' ? '(frozen)' : ''} token ${w.token}`).join(', ') || 'none';
      say(
        `[chaos ${elapsed()}] faults ${faults.length} | leader ${leaders} | writes ${live.accepted} accepted, ${live.fenced} fenced, ` +
          `${live.duplicate} duplicate | ${fleet.live.length} workers`,
      );
    },
    o.profile === 'short' ? 5000 : 10_000,
  );
  progress.unref();

  try {
    const first = await fleet.waitForEvent((_w, e) => e.ev === 'accepted', 30_000);
    if (first === null) throw new Error('no worker got a write accepted within 30s of starting; see the workers/*.jsonl logs');
    say(`[chaos ${elapsed()}] first leader ${first.w.id} wrote; the nemesis starts`);
    const hardCap = o.durationMs + (o.profile === 'short' ? 90_000 : 300_000);
    for (let i = 0; i < MAX_FAULTS && o.signal?.aborted !== true; i++) {
      const t = monoMs() - runStart;
      if (t >= hardCap || (t >= o.durationMs && nemesis.firstRoundDone)) break;
      const kind = nemesis.nextKind();
      const tokensBefore = new Map(fleet.workers.map((w) => [w.id, w.token]));
      let rec: FaultRecord;
      try {
        rec = await nemesis.inject(kind);
      } catch (err) {
        harnessErrors.push(`fault ${kind}: ${errorMessage(err)}`);
        say(`[chaos ${elapsed()}] could not inject ${kind}: ${errorMessage(err)}; stopping the nemesis`);
        break;
      }
      appendFileSync(join(dir, 'nemesis.jsonl'), `${JSON.stringify(rec)}\n`);
      if (rec.params['skipped'] === true) {
        say(`[chaos ${elapsed()}] ${kind} ${rec.note}; ${nemesis.retry(kind) ? 'will retry' : 'given up on for the first round'}`);
        await sleep(500);
        continue;
      }
      faults.push(rec);
      say(`[chaos ${elapsed()}] #${rec.n} ${kind}${rec.role === 'leader' ? ' (leader)' : ''}: ${rec.note}`);
      // Let the system heal before the next fault: wait (bounded) for a write after the heal.
      // Healed as the checker's failover-bounded judges it: a write by the faulted process (or a
      // restored copy of it) in its old term does not show that a leader is back. Taking one for
      // the heal let the next fault start while the lease still sat with a frozen or cloned term,
      // and the checker then charged the next fault's outage to this one.
      const stale = staleTerms(rec, tokensBefore);
      const back = await fleet.waitForEvent(
        (w, e) => e.ev === 'accepted' && e.t > rec.heal && !(stale.has(w.id) && stale.get(w.id) === e.token),
        10 * timing.ttlMs + 5000,
      );
      if (back === null) say(`[chaos ${elapsed()}]   no write accepted within ${10 * timing.ttlMs + 5000}ms of fault #${rec.n} healing`);
      await sleep(o.profile === 'short' ? prng.range(300, 800) : prng.range(500, 2000));
      await resize(fleet, o.workers, trims, say, elapsed, mode);
    }
    // A last quiet stretch so the final fault's failover shows in the log.
    await sleep(2 * timing.ttlMs);
  } catch (err) {
    harnessErrors.push(errorMessage(err));
    say(`[chaos ${elapsed()}] ${errorMessage(err)}`);
  } finally {
    clearInterval(progress);
    say(`[chaos ${elapsed()}] stopping ${fleet.live.length} workers`);
    await fleet.stopAll(5000);
    await proxy?.stop();
  }
  const runEnd = monoMs();

  const workers = fleet.collect();
  const writes = await readLog(TEST_PG_URL, schema, wallMinusMono);
  const counters = await readCounters(TEST_PG_URL, schema);
  let history: HistoryEntry[] = [];
  try {
    const reader = await openStore(ts.url);
    try {
      history = (await reader.history({ name: LEASE, limit: 1_000_000 })).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    } finally {
      await reader.close();
    }
  } catch (err) {
    harnessErrors.push(`could not read the store's history: ${errorMessage(err)}`);
  }
  const result = check({
    timing,
    unfenced: o.unfenced,
    runStart,
    runEnd,
    writes,
    counters,
    workers,
    history,
    faults,
    slack: { processMs: 1000, storeMs: 2 * timing.ttlMs + 1000 },
    inProcessLocks: o.store === 'sqlite',
  });

  let exitCode: number;
  let verdict: string;
  if (o.unfenced) {
    exitCode = result.safetyViolated ? 0 : 1;
    verdict = result.safetyViolated
      ? `VIOLATIONS DETECTED without the fence (${result.verdicts.filter((v) => v.safety && !v.ok).map((v) => v.name).join(', ')}), as the negative control must`
      : 'NO VIOLATION DETECTED WITHOUT THE FENCE: the harness is not testing anything';
  } else if (harnessErrors.length > 0 || writes.length === 0) {
    exitCode = 1;
    verdict = `HARNESS ERROR: ${harnessErrors[0] ?? 'no write was accepted'}`;
  } else {
    exitCode = result.ok ? 0 : 1;
    verdict = result.ok ? 'ALL INVARIANTS HELD' : `INVARIANTS VIOLATED: ${result.verdicts.filter((v) => !v.ok).map((v) => v.name).join(', ')}`;
  }

  const report: ChaosReport = {
    meta: {
      store: o.store,
      storeDescription: ts.store.description,
      seed: o.seed,
      profile: o.profile,
      requestedMs: o.durationMs,
      workers: o.workers,
      timing,
      unfenced: o.unfenced,
      liveness,
      startedAt: new Date(Date.now() - (monoMs() - runStart)).toISOString(),
      resourceSchema: schema,
      kinds,
      unsupported,
      faketime,
      command: o.command,
    },
    runStart,
    runEnd,
    wallMinusMono,
    faults,
    trims,
    workers,
    history,
    writes,
    highWater: counters.highWater === null ? null : String(counters.highWater),
    result,
    exitCode,
    verdict,
    harnessErrors,
  };
  writeReport(dir, report);
  if (!o.keep) {
    await ts.cleanup().catch((err: unknown) => say(`[chaos] could not clean the lease namespace: ${errorMessage(err)}`));
    await dropResource(TEST_PG_URL, schema).catch((err: unknown) => say(`[chaos] could not drop ${schema}: ${errorMessage(err)}`));
  } else {
    await Promise.allSettled([ts.store.close()]);
    say(`[chaos] kept the resource schema ${schema} and the lease namespace ${ts.url}`);
  }
  say(summaryText(report));
  return report;
}

/** The terms whose writes do not count as a leader being back after `rec` (worker id to token). */
function staleTerms(rec: FaultRecord, tokensBefore: Map<string, string | null>): Map<string, string> {
  const stale = new Map<string, string>();
  if (rec.kind === 'fork' || rec.kind === 'clock-past') return stale; // the leader was left alone
  for (const id of rec.targets) {
    const token = tokensBefore.get(id);
    if (token == null) continue;
    stale.set(id, token);
    if (rec.kind === 'snapshot') for (const copy of rec.spawned) stale.set(copy, token);
  }
  return stale;
}

/** Back to N live workers: SIGTERM the oldest followers beyond N; replace any that died. */
async function resize(
  fleet: Fleet,
  n: number,
  trims: Array<{ worker: string; at: number }>,
  say: (line: string) => void,
  elapsed: () => string,
  mode: () => 'elector' | 'acquire',
): Promise<void> {
  for (let i = 0; i < 10 && fleet.live.length > n; i++) {
    const w: Worker | undefined = fleet.live.filter((x) => !x.leading && x.state === 'running').sort((a, b) => a.info.spawnedAt - b.info.spawnedAt)[0];
    if (w === undefined) break;
    await fleet.stopWorker(w, 3000);
    trims.push({ worker: w.id, at: monoMs() });
  }
  if (fleet.live.length < n) {
    const gone = fleet.workers.filter((w) => !w.alive && !w.info.askedToStop).map((w) => `${w.id} (${w.info.exit})`);
    if (gone.length > 0) say(`[chaos ${elapsed()}]   workers ended on their own: ${gone.join(', ')}`);
  }
  for (let i = 0; i < 10 && fleet.live.length < n; i++) fleet.spawn({ origin: 'replacement', mode: mode() });
}
