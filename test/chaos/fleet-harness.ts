/**
 * One fleet chaos run: agents as real processes (test/chaos/fleet-agent.ts) under a supervisor
 * that restarts an agent id whenever none of its processes is alive, clients in this process
 * placing, looking up (through the store and through an OwnerCache), reassigning from dead
 * owners and writing with generations to a fenced PostgreSQL resource, a nemesis hurting the
 * agents, then the checker (test/chaos/fleet-checker.ts). See docs/chaos.md, "Fleet".
 *
 * Glossary
 * - agent id: a name in the registry (f0..fN); a "host". Several processes may carry one over a
 *   run (restarts, restores, forks), one at a time if the registry is right.
 * - client: a loop here with its own store connection, Fleet and OwnerCache.
 * - takeover: the fenced write a client makes with the new generation right after a reassign,
 *   so the fence refuses the old owner's writes from then on.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, copyFileSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorMessage } from '../../src/core/errors.js';
import { NoOwnerError, OwnerDeadError } from '../../src/fleet/errors.js';
import { openStore } from '../../src/backends/index.js';
import type { CallOptions } from '../../src/core/port.js';
import { Fleet, type Owner } from '../../src/fleet/fleet.js';
import { OwnerCache } from '../../src/fleet/cache.js';
import { openFleet } from '../../src/fleet/open.js';
import type { FleetPort, OwnerRow } from '../../src/fleet/port.js';
import { makeTestStore, TEST_PG_URL } from '../helpers/stores.js';
import type { AgentEvent, FleetAgentConfig } from './fleet-agent.js';
import { checkFleet, type ClientEvent, type FleetCheckResult } from './fleet-checker.js';
import { faketimeEnv, readJsonLines, stopProcess, Worker } from './fleet.js';
import { FAKETIME_CACHE_MS, Prng } from './nemesis.js';
import { createResource, dropResource, newResourceSchema, readLog, resourcePool, writeUnit } from './resource.js';
import { findFaketime, pgAnswers } from './services.js';
import { monoMs, type WorkerInfo } from './types.js';

const agentJs = fileURLToPath(new URL('./fleet-agent.js', import.meta.url));

export const FLEET_FAULTS = ['pause', 'kill', 'term', 'snapshot', 'fork', 'clock-jump'] as const;
export type FleetFault = (typeof FLEET_FAULTS)[number];
const WEIGHTS: Record<FleetFault, number> = { pause: 3, kill: 2, term: 1, snapshot: 1.5, fork: 1, 'clock-jump': 1.5 };

export interface FleetChaosOptions {
  store: 'postgres' | 'sqlite' | 'mysql';
  durationMs: number;
  agents: number;
  clients: number;
  seed: number;
  reportDir: string;
  heartbeatMs: number;
  staleAfterMs: number;
  /** Negative controls: `lookup` filters ownership on liveness, `cache` caches "dead" answers. */
  broken?: 'lookup' | 'cache';
  signal?: AbortSignal;
}

export interface FleetFaultRecord {
  n: number;
  kind: FleetFault;
  target: string;
  start: number;
  heal: number;
  note: string;
}

export interface FleetChaosReport {
  options: Omit<FleetChaosOptions, 'signal'>;
  faults: FleetFaultRecord[];
  faultsByKind: Partial<Record<FleetFault, number>>;
  processes: number;
  result: FleetCheckResult;
  /** 0: proved (all held; with `broken`, violations found); 1: not proved. */
  exitCode: number;
  verdict: string;
  harnessErrors: string[];
}

/** The agent processes of a run, and the supervisor that restarts an id with none alive. */
class Agents {
  readonly procs: Worker[] = [];
  /** Process name -> agent id. */
  readonly idOf = new Map<string, string>();
  /** No restart of this id before this mono time (a killed host stays down a while). */
  readonly downUntil = new Map<string, number>();
  private seq = 0;
  private readonly cfg: Omit<FleetAgentConfig, 'id' | 'proc' | 'log' | 'stateDir' | 'resume'>;
  constructor(
    private readonly dir: string,
    private readonly faketime: string | null,
    cfg: Omit<FleetAgentConfig, 'id' | 'proc' | 'log' | 'stateDir' | 'resume'>,
  ) {
    this.cfg = cfg;
    mkdirSync(join(dir, 'agents'), { recursive: true });
    process.on('exit', () => {
      for (const w of this.procs) if (w.alive) w.signal('SIGKILL');
    });
  }

  clockFile(id: string): string {
    return join(this.dir, 'agents', `${id}.clock`);
  }

  spawn(id: string, origin: WorkerInfo['origin'], resume?: string): Worker {
    const proc = `a${++this.seq}`;
    const stateDir = join(this.dir, 'agents', proc);
    mkdirSync(stateDir, { recursive: true });
    const clockFile = this.clockFile(id);
    try {
      writeFileSync(clockFile, '+0\n', { flag: 'wx' });
    } catch {
      // the host's clock file is kept across its processes
    }
    const log = join(this.dir, 'agents', `${proc}.jsonl`);
    const config: FleetAgentConfig = { ...this.cfg, id, proc, log, stateDir, ...(resume === undefined ? {} : { resume }) };
    const child = spawn(process.execPath, [agentJs, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], env: faketimeEnv(this.faketime, clockFile) });
    if (child.pid === undefined) throw new Error(`could not start agent process ${proc}`);
    const info: WorkerInfo = { id: proc, pid: child.pid, origin, mode: 'acquire', spawnedAt: monoMs(), exitedAt: null, exit: 'running', askedToStop: false, stopped: [], events: [] };
    const w = new Worker(child, info, stateDir, clockFile, log, () => {});
    child.unref();
    (child as unknown as { channel?: { unref(): void } }).channel?.unref();
    this.procs.push(w);
    this.idOf.set(proc, id);
    return w;
  }

  /** Live processes carrying `id`. */
  of(id: string): Worker[] {
    return this.procs.filter((w) => w.alive && this.idOf.get(w.id) === id);
  }

  supervise(ids: string[]): void {
    const now = monoMs();
    for (const id of ids) if (this.of(id).length === 0 && now >= (this.downUntil.get(id) ?? 0)) this.spawn(id, 'replacement');
  }

  events(): AgentEvent[] {
    return this.procs.flatMap((w) => readJsonLines<AgentEvent>(w.logFile));
  }
}

/** A port that records the rows it returns (the store's own view), and optionally breaks owner(). */
function recordingPort(inner: FleetPort, broken: boolean): FleetPort & { calls: number; last: OwnerRow | undefined } {
  const rec = { calls: 0, last: undefined as OwnerRow | undefined };
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'calls' || prop === 'last') return rec[prop];
      if (prop === 'owner') {
        return async (resource: string, options?: CallOptions) => {
          rec.calls++;
          const row = await target.owner(resource, options);
          rec.last = row;
          // The negative control: "who owns it" filtered on liveness turns a dead owner into none.
          return broken && row !== undefined && !row.live ? undefined : row;
        };
      }
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as FleetPort & { calls: number; last: OwnerRow | undefined };
}

/** The negative control for the cache: it remembers "dead" answers too, for 3s. */
class NegativeCache {
  private readonly dead = new Map<string, { err: unknown; until: number }>();
  constructor(private readonly inner: OwnerCache) {}
  async owner(r: string): Promise<Owner> {
    const d = this.dead.get(r);
    if (d !== undefined && monoMs() < d.until) throw d.err;
    try {
      return await this.inner.owner(r);
    } catch (err) {
      if (err instanceof OwnerDeadError) this.dead.set(r, { err, until: monoMs() + 3000 });
      throw err;
    }
  }
  invalidate(r: string): void {
    this.dead.delete(r);
    this.inner.invalidate(r);
  }
}

export async function runFleetChaos(o: FleetChaosOptions, say: (line: string) => void): Promise<FleetChaosReport> {
  const dir = o.reportDir;
  rmSync(join(dir, 'agents'), { recursive: true, force: true });
  for (const f of ['clients.jsonl', 'nemesis.jsonl']) rmSync(join(dir, f), { force: true });
  mkdirSync(join(dir, 'snapshots'), { recursive: true });
  if (!(await pgAnswers())) throw new Error(`the fleet chaos resource needs PostgreSQL at ${TEST_PG_URL.replace(/:[^:@/]*@/, ':***@')}`);
  const prng = new Prng(o.seed);
  const ts = await makeTestStore(o.store);
  const schema = newResourceSchema();
  await createResource(TEST_PG_URL, schema);
  const faketime = findFaketime();
  const kinds = FLEET_FAULTS.filter((k) => k !== 'clock-jump' || faketime !== null);
  if (faketime === null) say('[fleet-chaos] not injecting clock-jump: libfaketime not found (Debian package faketime)');
  const resources = Array.from({ length: 24 }, (_, i) => `res-${i}`);
  const ids = Array.from({ length: o.agents }, (_, i) => `f${i}`);
  const agents = new Agents(dir, faketime, {
    storeKind: o.store,
    url: ts.url,
    resourceUrl: TEST_PG_URL,
    schema,
    resources,
    heartbeatMs: o.heartbeatMs,
    staleAfterMs: o.staleAfterMs,
  });
  const clientEvents: ClientEvent[] = [];
  const logClient = (e: ClientEvent): void => {
    clientEvents.push(e);
    appendFileSync(join(dir, 'clients.jsonl'), `${JSON.stringify(e)}\n`);
  };
  const harnessErrors: string[] = [];
  const faults: FleetFaultRecord[] = [];
  const runStart = monoMs();
  const elapsed = (): string => `${((monoMs() - runStart) / 1000).toFixed(1).padStart(6)}s`;
  say(
    `[fleet-chaos] store ${o.store}, seed ${o.seed}, ${o.agents} agents, ${o.clients} clients, heartbeat ${o.heartbeatMs}ms, stale-after ${o.staleAfterMs}ms, ` +
      `${Math.round(o.durationMs / 1000)}s, faults: ${kinds.join(' ')}${o.broken === undefined ? '' : `, BROKEN ${o.broken}`}`,
  );

  const stopping = new AbortController();
  const supervisor = setInterval(() => {
    if (!stopping.signal.aborted) agents.supervise(ids);
  }, 100);
  agents.supervise(ids);

  // ---- clients ---------------------------------------------------------------------------------
  let nextResource = 0;
  const placed: string[] = [];
  let writeSeq = 0;
  const pool = resourcePool(TEST_PG_URL, 2000);
  const fenceWrite = async (c: string, r: string, gen: string, why: 'takeover' | 'cached'): Promise<void> => {
    const sent = monoMs();
    let outcome: string;
    try {
      outcome = (await writeUnit(pool, schema, { token: BigInt(gen), worker: c, pid: process.pid, holder: r, seq: ++writeSeq, mono: sent, resource: r }, false, 2000)).outcome;
    } catch (err) {
      outcome = `error: ${errorMessage(err).slice(0, 100)}`;
    }
    logClient({ ev: 'write', c, r, sent, got: monoMs(), why, gen, outcome });
  };

  const client = async (c: string): Promise<void> => {
    const store = await openStore(ts.url);
    const raw = (await openFleet(store)).port;
    const port = recordingPort(raw, o.broken === 'lookup');
    const fleet = new Fleet(port);
    const positive = new OwnerCache(fleet, { ttl: 1000 });
    const cache = o.broken === 'cache' ? new NegativeCache(positive) : positive;
    /** The store's placed_at of the change that gave `gen`, if the record still carries it. */
    const placedAt = async (r: string, gen: bigint): Promise<number | undefined> => {
      const row = await raw.owner(r).catch(() => undefined);
      return row !== undefined && row.generation === gen ? row.placedAtMs : undefined;
    };
    try {
      while (!stopping.signal.aborted) {
        await sleep(prng.range(10, 40));
        if (nextResource < resources.length && (placed.length < 4 || prng.chance(0.12))) {
          // Clients may race for one name: the loser is answered "already owned", which is fine.
          const r = resources[nextResource]!;
          const sent = monoMs();
          try {
            const p = await fleet.place(r);
            const got = monoMs();
            if (!placed.includes(r)) placed.push(r);
            nextResource = Math.max(nextResource, resources.indexOf(r) + 1);
            const at = await placedAt(r, p.generation);
            logClient({ ev: 'place', c, r, sent, got, outcome: 'placed', agent: p.agent, gen: String(p.generation), ...(at === undefined ? {} : { placedAt: at }) });
          } catch (err) {
            const code = (err as { code?: string }).code;
            const outcome = code === 'ALREADY_OWNED' ? 'owned' : code === 'NO_LIVE_AGENT' ? 'no-agent' : 'error';
            logClient({ ev: 'place', c, r, sent, got: monoMs(), outcome, error: errorMessage(err).slice(0, 150) });
          }
          continue;
        }
        if (placed.length === 0) continue;
        const r = prng.pick(placed);
        // With the broken cache (the negative control) every lookup goes through it.
        const via = o.broken === 'cache' || prng.chance(0.5) ? 'cache' : 'store';
        const before = port.calls;
        const sent = monoMs();
        let owner: Owner | undefined;
        let dead: OwnerDeadError | undefined;
        try {
          owner = via === 'cache' ? await cache.owner(r) : await fleet.owner(r);
          logClient({ ev: 'lookup', c, r, sent, got: monoMs(), via, hit: port.calls === before, answer: 'live', agent: owner.agent, gen: String(owner.generation), heartbeatAgeMs: owner.heartbeatAgeMs });
        } catch (err) {
          const got = monoMs();
          const hit = port.calls === before;
          if (err instanceof OwnerDeadError) {
            dead = err;
            logClient({ ev: 'lookup', c, r, sent, got, via, hit, answer: 'dead', agent: err.owner, gen: String(err.generation) });
          } else if (err instanceof NoOwnerError) logClient({ ev: 'lookup', c, r, sent, got, via, hit, answer: 'none' });
          else logClient({ ev: 'lookup', c, r, sent, got, via, hit, answer: 'error', error: errorMessage(err).slice(0, 150) });
        }
        let from: string | undefined;
        let why: 'dead' | 'rebalance' = 'dead';
        // Half the time a client told "dead" only fails its request; another one moves the resource.
        if (dead !== undefined) from = prng.chance(0.5) ? dead.owner : undefined;
        else if (owner !== undefined && prng.chance(0.02)) {
          from = owner.agent;
          why = 'rebalance';
        } else if (owner !== undefined && via === 'cache' && prng.chance(0.2)) {
          // A request routed with a cached answer: it may reach the resource after a reassign.
          await sleep(prng.range(0, 300));
          await fenceWrite(c, r, String(owner.generation), 'cached');
        }
        if (from === undefined) continue;
        const rs = monoMs();
        try {
          const m = await fleet.reassign(r, { from });
          const got = monoMs();
          cache.invalidate(r);
          const at = await placedAt(r, m.generation);
          logClient({ ev: 'reassign', c, r, sent: rs, got, from, why, outcome: 'moved', agent: m.agent, gen: String(m.generation), ...(at === undefined ? {} : { placedAt: at }) });
          await fenceWrite(c, r, String(m.generation), 'takeover');
        } catch (err) {
          const code = (err as { code?: string }).code;
          const outcome = code === 'OWNER_CHANGED' ? 'owner-changed' : code === 'NO_LIVE_AGENT' ? 'no-agent' : 'error';
          logClient({ ev: 'reassign', c, r, sent: rs, got: monoMs(), from, why, outcome, error: errorMessage(err).slice(0, 150) });
        }
      }
    } finally {
      await store.close().catch(() => {});
    }
  };

  // ---- nemesis ---------------------------------------------------------------------------------
  const firstRound = prng.shuffle(kinds);
  const nextKind = (): FleetFault => {
    const f = firstRound.shift();
    if (f !== undefined) return f;
    let x = prng.next() * kinds.reduce((s, k) => s + WEIGHTS[k], 0);
    for (const k of kinds) {
      x -= WEIGHTS[k];
      if (x < 0) return k;
    }
    return kinds[kinds.length - 1]!;
  };
  const hostOffset = new Map<string, number>();
  const stale = o.staleAfterMs;
  const inject = async (n: number, kind: FleetFault): Promise<FleetFaultRecord | null> => {
    const live = agents.procs.filter((w) => w.alive && w.state === 'running' && w.started);
    if (live.length === 0) return null;
    const t = prng.pick(live);
    const id = agents.idOf.get(t.id)!;
    const rec: FleetFaultRecord = { n, kind, target: `${t.id} (${id})`, start: monoMs(), heal: 0, note: '' };
    switch (kind) {
      case 'pause': {
        const ms = Math.round(stale * prng.range(1.5, 3));
        t.signal('SIGSTOP');
        await sleep(ms);
        t.signal('SIGCONT');
        rec.note = `SIGSTOP ${t.id} for ${ms}ms (stale-after ${stale}ms), then SIGCONT`;
        break;
      }
      case 'kill': {
        const down = Math.round(stale * prng.range(0, 2.5));
        agents.downUntil.set(id, monoMs() + down);
        t.signal('SIGKILL');
        await Promise.race([t.exited, sleep(5000)]);
        rec.note = `SIGKILL ${t.id}; ${id} restarts after ${down}ms`;
        break;
      }
      case 'term': {
        agents.downUntil.set(id, monoMs() + Math.round(stale * prng.range(0, 2)));
        const how = await stopProcess(t, 5000);
        rec.note = `SIGTERM ${t.id} (${how === 'drained' ? 'deregistered and released' : 'did not stop in 5s: SIGKILLed'})`;
        break;
      }
      case 'snapshot': {
        const snap = join(dir, 'snapshots', `fault-${n}-${t.id}.json`);
        const copies = [0, 1].map(() => agents.spawn(id, 'restore', snap));
        await Promise.all(copies.map((c) => c.waitFor((x) => x.started, 15_000)));
        t.snapshotFile = null;
        t.signal('SIGUSR2');
        if (!(await t.waitFor((x) => x.snapshotFile !== null, 3000))) {
          for (const c of copies) await stopProcess(c, 3000);
          rec.note = `not injected: ${t.id} wrote no snapshot within 3s`;
          break;
        }
        t.markStopped();
        const frozen = Math.round(stale * (prng.chance(0.5) ? prng.range(0, 0.3) : prng.range(0.3, 2)));
        await sleep(frozen);
        t.signal('SIGKILL');
        await Promise.race([t.exited, sleep(5000)]);
        copyFileSync(t.snapshotFile!, `${snap}.tmp`);
        renameSync(`${snap}.tmp`, snap);
        rec.note = `snapshot of ${t.id} (frozen ${frozen}ms), original destroyed, restored twice as ${copies.map((c) => c.id).join(' and ')}`;
        break;
      }
      case 'fork': {
        const c = agents.spawn(id, 'fork');
        await c.waitFor((x) => x.started, 15_000);
        rec.note = `${c.id} started as a second process of ${id} beside ${t.id} (a cloned host)`;
        break;
      }
      case 'clock-jump': {
        if (o.store === 'sqlite') {
          // SQLite's clock is each process's own: only a forward step of the agent's host, kept.
          const secs = prng.int(1, 4);
          const total = (hostOffset.get(id) ?? 0) + secs;
          hostOffset.set(id, total);
          writeFileSync(agents.clockFile(id), `+${total}s\n`);
          await sleep(FAKETIME_CACHE_MS);
          rec.note = `${id}'s host clock stepped forward ${secs}s (now +${total}s, kept)`;
        } else {
          const offset = `${prng.chance(0.6) ? '+' : '-'}${prng.int(5, 120)}s`;
          const ms = Math.round(prng.range(1500, 3000));
          writeFileSync(agents.clockFile(id), `${offset}\n`);
          await sleep(ms);
          writeFileSync(agents.clockFile(id), '+0\n');
          rec.note = `${id}'s wall clock jumped ${offset} for ${ms}ms, then back`;
        }
        break;
      }
    }
    rec.heal = monoMs();
    return rec;
  };

  const clientsDone = Array.from({ length: o.clients }, (_, i) => client(`c${i + 1}`).catch((err: unknown) => void harnessErrors.push(`client c${i + 1}: ${errorMessage(err)}`)));
  const progress = setInterval(() => {
    const lookups = clientEvents.filter((e) => e.ev === 'lookup').length;
    say(`[fleet-chaos ${elapsed()}] faults ${faults.length} | ${placed.length} placed | ${lookups} lookups | ${agents.procs.filter((w) => w.alive).length} agent processes`);
  }, 5000);
  progress.unref();
  try {
    await sleep(Math.max(2000, 2 * stale));
    for (let n = 1; n < 10_000 && o.signal?.aborted !== true; n++) {
      const t = monoMs() - runStart;
      if (t >= o.durationMs + 60_000 || (t >= o.durationMs && firstRound.length === 0)) break;
      const kind = nextKind();
      const rec = await inject(n, kind);
      if (rec === null || rec.note.startsWith('not injected')) {
        firstRound.unshift(kind);
        await sleep(300);
        continue;
      }
      faults.push(rec);
      appendFileSync(join(dir, 'nemesis.jsonl'), `${JSON.stringify(rec)}\n`);
      say(`[fleet-chaos ${elapsed()}] #${n} ${kind}: ${rec.note}`);
      await sleep(prng.range(500, 1500));
    }
    await sleep(2 * stale);
  } catch (err) {
    harnessErrors.push(errorMessage(err));
  } finally {
    clearInterval(progress);
    stopping.abort();
    clearInterval(supervisor);
    await Promise.all(clientsDone);
    await Promise.all(agents.procs.filter((w) => w.alive).map((w) => stopProcess(w, 5000)));
  }

  // ---- records and the checker -------------------------------------------------------------------
  const writes = await readLog(TEST_PG_URL, schema, 0);
  const finalGens = new Map<string, bigint>();
  const reader = await openFleet(ts.store);
  for (const r of placed) {
    const row = await reader.port.owner(r);
    if (row !== undefined) finalGens.set(r, row.generation);
  }
  await pool.end().catch(() => {});
  const result = checkFleet({ clients: clientEvents, agents: agents.events(), writes, finalGens, staleAfterMs: o.staleAfterMs });
  const faultsByKind: Partial<Record<FleetFault, number>> = {};
  for (const f of faults) faultsByKind[f.kind] = (faultsByKind[f.kind] ?? 0) + 1;
  let exitCode: number;
  let verdict: string;
  const failed = result.verdicts.filter((v) => !v.ok).map((v) => v.name);
  if (o.broken !== undefined) {
    exitCode = failed.length > 0 ? 0 : 1;
    verdict = failed.length > 0 ? `VIOLATIONS DETECTED with the broken ${o.broken} (${failed.join(', ')}), as the negative control must` : `NO VIOLATION DETECTED with the broken ${o.broken}: the checker tests nothing`;
  } else if (harnessErrors.length > 0 || placed.length === 0) {
    exitCode = 1;
    verdict = `HARNESS ERROR: ${harnessErrors[0] ?? 'nothing was placed'}`;
  } else {
    exitCode = result.ok ? 0 : 1;
    verdict = result.ok ? 'ALL FLEET INVARIANTS HELD' : `FLEET INVARIANTS VIOLATED: ${failed.join(', ')}`;
  }
  const { signal: _signal, ...options } = o;
  const report: FleetChaosReport = { options, faults, faultsByKind, processes: agents.procs.length, result, exitCode, verdict, harnessErrors };
  writeFileSync(join(dir, 'fleet-report.json'), JSON.stringify(report, null, 2));
  const summary = fleetSummary(report);
  writeFileSync(join(dir, 'summary.txt'), summary);
  await ts.cleanup().catch((err: unknown) => say(`[fleet-chaos] could not clean the store: ${errorMessage(err)}`));
  await dropResource(TEST_PG_URL, schema).catch((err: unknown) => say(`[fleet-chaos] could not drop ${schema}: ${errorMessage(err)}`));
  say(summary);
  return report;
}

/** One screen: the verdicts, what was done, and the worst numbers seen. */
export function fleetSummary(r: FleetChaosReport): string {
  const o = r.options;
  const c = r.result.counts;
  const w = r.result.worst;
  const ms = (v: number | null): string => (v === null ? '-' : `${v}ms`);
  const lines = [
    '',
    `fleet chaos on ${o.store}, seed ${o.seed}: ${r.verdict}`,
    `  replay: npm run chaos:fleet -- --store ${o.store} --seed ${o.seed} --duration ${Math.round(o.durationMs / 1000)}s${o.broken === undefined ? '' : ` --broken ${o.broken}`}`,
    `  ${o.agents} agent ids, ${r.processes} agent processes, ${o.clients} clients; heartbeat ${o.heartbeatMs}ms, stale-after ${o.staleAfterMs}ms`,
    `  faults ${r.faults.length}: ${Object.entries(r.faultsByKind).map(([k, n]) => `${k} ${n}`).join(', ')}`,
    '',
    ...r.result.verdicts.map((v) => `  ${v.ok ? 'ok  ' : 'FAIL'} ${v.name.padEnd(28)} ${v.detail}${v.violations.slice(0, 3).map((x) => `\n         ${x}`).join('')}`),
    '',
    `  placements ${c['placements']} (unverified ${c['unverifiedPlacements']}, of which ${c['unverifiedByUnansweredRenewal']} after a renewal whose answer went unlogged), reassigns ${c['reassigns']} (${c['reassignsRefused']} refused)`,
    `  lookups ${c['lookups']} (${c['lookupsViaCache']} via the cache, ${c['cacheHits']} hits): live ${c['live']}, dead ${c['dead']}, no owner ${c['noOwner']}, errors ${c['lookupErrors']}`,
    `  writes accepted ${c['writesAccepted']}, fenced ${c['writesFenced']}, duplicate ${c['writesDuplicate']}; confirmed heartbeats ${c['confirmedHeartbeats']}`,
    `  worst: closest placement to its agent's expiry ${ms(w['closestPlacementMarginMs'] ?? null)}, oldest heartbeat in a live answer ${ms(w['oldestLiveHeartbeatAgeMs'] ?? null)}, ` +
      `longest silence before a reassign ${ms(w['longestDeadBeforeReassignMs'] ?? null)}`,
    ...(r.harnessErrors.length > 0 ? [`  harness errors: ${r.harnessErrors.slice(0, 3).join('; ')}`] : []),
    '',
  ];
  return lines.join('\n');
}

