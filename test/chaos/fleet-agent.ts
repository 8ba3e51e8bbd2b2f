/**
 * One fleet agent for the fleet chaos run: a real OS process running `Agent.start` with a short
 * heartbeat, and doing the work of the resources it owns the way an owner would: look up the
 * owner of a resource, and if it is this agent, work a little and write to the resource carrying
 * the generation, WITHOUT looking again. A process frozen mid-unit wakes up right at the write:
 * only the fence (advanced by whoever took the resource over) can stop it.
 *
 *   node fleet-agent.js '<json FleetAgentConfig>'
 *
 * Log (synchronous JSON lines, so SIGKILL loses nothing): every claim of its liveness lease with
 * the store's answer (store now and expiry: the record the checker judges placements and "dead"
 * answers against), releases, lost, deregistration, units and write outcomes. Signals: SIGTERM
 * stops gracefully (deregister, release); SIGUSR2 snapshots the liveness lease and the unit in
 * hand and SIGSTOPs itself, like a VM paused for a snapshot. Exit 3: the agent stood down (its
 * liveness lease was lost); 4: it could not become live (the id is alive elsewhere).
 */
import { existsSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorMessage } from '../../src/core/errors.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Lease } from '../../src/core/lease.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { MysqlStore } from '../../src/backends/mysql/store.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { Agent } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';
import { resumeLease, snapshotLease, type LeaseSnapshot } from '../../src/testing/index.js';
import { resourcePool, writeUnit } from './resource.js';
import { monoMs } from './types.js';

export interface FleetAgentConfig {
  /** The agent id (its liveness lease is agent/<id>); several processes may carry one. */
  id: string;
  /** This process's name in the run (a1, a7...). */
  proc: string;
  storeKind: 'postgres' | 'sqlite' | 'mysql';
  url: string;
  resourceUrl: string;
  schema: string;
  /** Every resource name the run may place: the agent works those it owns. */
  resources: string[];
  heartbeatMs: number;
  staleAfterMs: number;
  log: string;
  stateDir: string;
  /** Restore from this snapshot file (waits for it to appear). */
  resume?: string;
}

/** One line of an agent's log. `t` is mono; store times are the store's clock, epoch ms. */
export type AgentEvent = { t: number; p: string; id: string; pid: number } & (
  | { ev: 'start'; resumed: boolean }
  | { ev: 'live'; token: string }
  | { ev: 'claim-sent'; sent: number }
  | { ev: 'claim'; sent: number; outcome: string; token?: string; storeNow?: number; expiresAt?: number; error?: string }
  | { ev: 'release'; sent: number; ok: boolean | null }
  | { ev: 'lost'; reason: string }
  | { ev: 'deregistering' }
  | { ev: 'unit'; resource: string; gen: string; seq: number; resumed?: boolean }
  | { ev: 'accepted' | 'fenced' | 'duplicate' | 'write-error'; resource: string; gen: string; seq: number; message?: string }
  | { ev: 'snapshot'; file: string }
  | { ev: 'not-live'; message: string }
  | { ev: 'error'; message: string }
);

type Body = AgentEvent extends infer E ? (E extends AgentEvent ? Omit<E, 't' | 'p' | 'id' | 'pid'> : never) : never;

const cfg = JSON.parse(process.argv[2] ?? '{}') as FleetAgentConfig;
const logFd = openSync(cfg.log, 'a');
process.stdout.on('error', () => {}); // the harness went away; the IPC disconnect stops us
function log(body: Body): void {
  const line = `${JSON.stringify({ t: monoMs(), p: cfg.proc, id: cfg.id, pid: process.pid, ...body })}\n`;
  writeSync(logFd, line);
  process.stdout.write(line);
}

/** Every claim and release of this process, with the store's own answer. */
function logged(inner: LeaseStore): LeaseStore {
  const claim: LeaseStore['claim'] = async (reqs, o) => {
    const sent = monoMs();
    // Logged before it goes: a process stopped or killed between the store's answer and the
    // 'claim' line leaves this one alone, and the checker knows a renewal may have landed.
    log({ ev: 'claim-sent', sent });
    try {
      const res = await inner.claim(reqs, o);
      const r = res[0];
      if (r === undefined) log({ ev: 'claim', sent, outcome: 'none' });
      else if (r.outcome === 'acquired' || r.outcome === 'renewed') {
        log({ ev: 'claim', sent, outcome: r.outcome, token: String(r.token), storeNow: r.storeNowMs, expiresAt: r.expiresAtMs });
      } else log({ ev: 'claim', sent, outcome: r.outcome === 'lost' ? `lost:${r.reason}` : r.outcome, storeNow: r.storeNowMs });
      return res;
    } catch (err) {
      log({ ev: 'claim', sent, outcome: 'error', error: errorMessage(err).slice(0, 200) });
      throw err;
    }
  };
  const release: LeaseStore['release'] = async (req, o) => {
    const sent = monoMs();
    try {
      const ok = await inner.release(req, o);
      log({ ev: 'release', sent, ok });
      return ok;
    } catch (err) {
      log({ ev: 'release', sent, ok: null });
      throw err;
    }
  };
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'claim') return claim;
      if (prop === 'release') return release;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

interface Snapshot {
  lease: LeaseSnapshot | undefined;
  unit: { resource: string; gen: string; seq: number } | null;
  seq: number;
}

const stop = new AbortController();
let agent: Agent | undefined;
let liveness: Lease | undefined;
let unit: Snapshot['unit'] = null;
let seq = 0;
const pool = resourcePool(cfg.resourceUrl, 2000);

async function write(resource: string, gen: bigint, unitSeq: number): Promise<void> {
  const base = { resource, gen: String(gen), seq: unitSeq };
  try {
    const r = await writeUnit(pool, cfg.schema, { token: gen, worker: cfg.proc, pid: process.pid, holder: resource, seq: unitSeq, mono: monoMs(), resource }, false, 2000);
    log({ ev: r.outcome, ...base });
  } catch (err) {
    log({ ev: 'write-error', ...base, message: errorMessage(err).slice(0, 200) });
    await sleep(100);
  }
}

/** The owner's loop: find a resource this agent owns, work on it, write with its generation. */
async function work(fleet: Awaited<ReturnType<typeof openFleet>>): Promise<void> {
  while (!stop.signal.aborted) {
    await sleep(20 + Math.random() * 40);
    const resource = cfg.resources[Math.floor(Math.random() * cfg.resources.length)]!;
    let gen: bigint;
    try {
      const o = await fleet.owner(resource);
      if (o.agent !== cfg.id) continue;
      gen = o.generation;
    } catch {
      continue; // no owner, a dead one, or the store is away: nothing to do here
    }
    const unitSeq = ++seq;
    unit = { resource, gen: String(gen), seq: unitSeq };
    log({ ev: 'unit', ...unit });
    await sleep(50 + Math.random() * 150); // the work; no re-check after it
    await write(resource, gen, unitSeq);
    unit = null;
  }
}

async function main(): Promise<number> {
  const timeouts = { url: cfg.url, queryTimeoutMs: cfg.staleAfterMs, connectTimeoutMs: cfg.staleAfterMs };
  const inner =
    cfg.storeKind === 'postgres' ? await PostgresStore.create(timeouts) : cfg.storeKind === 'mysql' ? await MysqlStore.create(timeouts) : new SqliteStore({ url: cfg.url });
  const lh = new Leasehold({ store: logged(inner), closeStore: true });
  const fleet = await openFleet(inner);
  // Logged before a restore waits for its snapshot: the harness starts restores warm, then snapshots.
  log({ ev: 'start', resumed: cfg.resume !== undefined });
  let snap: Snapshot | undefined;
  if (cfg.resume !== undefined) {
    for (let i = 0; i < 6000 && !existsSync(cfg.resume) && !stop.signal.aborted; i++) await sleep(10);
    snap = JSON.parse(readFileSync(cfg.resume, 'utf8')) as Snapshot;
    seq = snap.seq;
  }
  // Agent.start makes its liveness lease through leasehold.lease(): keep a handle on it (for
  // snapshots), and a restored process resumes its term there, so start() finds it held.
  const make = lh.lease.bind(lh);
  lh.lease = (name, options) => {
    const l = make(name, options);
    if (snap?.lease !== undefined) resumeLease(l, snap.lease);
    liveness = l;
    return l;
  };
  process.on('SIGUSR2', () => {
    const s: Snapshot = { lease: liveness === undefined ? undefined : snapshotLease(liveness), unit, seq };
    const file = join(cfg.stateDir, 'snapshot.json');
    writeFileSync(file, JSON.stringify(s));
    log({ ev: 'snapshot', file });
    process.kill(process.pid, 'SIGSTOP'); // frozen right here, like a paused VM
  });
  try {
    agent = await Agent.start(lh, fleet, { id: cfg.id, heartbeat: cfg.heartbeatMs, staleAfter: cfg.staleAfterMs, wait: cfg.staleAfterMs + cfg.heartbeatMs, signal: stop.signal });
  } catch (err) {
    log({ ev: 'not-live', message: errorMessage(err).slice(0, 200) });
    await lh.close();
    return 4;
  }
  log({ ev: 'live', token: String(agent.token) });
  let code = 0;
  agent.on('lost', (e) => {
    log({ ev: 'lost', reason: e.message.slice(0, 200) });
    code = 3;
    stop.abort();
  });
  // A restored process finishes the unit in hand first, with the generation it had read.
  const pending = snap?.unit;
  if (pending != null) {
    log({ ev: 'unit', ...pending, resumed: true });
    await write(pending.resource, BigInt(pending.gen), pending.seq);
  }
  await work(fleet);
  if (code === 0) log({ ev: 'deregistering' });
  await agent.stop();
  await lh.close();
  await pool.end().catch(() => {});
  return code;
}

const requestStop = (): void => stop.abort();
process.on('SIGTERM', requestStop);
process.on('disconnect', requestStop);
// Bounded: a stop that hangs (a store call stuck) must not outlive the run.
stop.signal.addEventListener(
  'abort',
  () =>
    setTimeout(() => {
      log({ ev: 'error', message: 'did not stop within 10s of being asked' });
      process.exit(2);
    }, 10_000).unref(),
  { once: true },
);

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    log({ ev: 'error', message: errorMessage(err).slice(0, 500) });
    process.exit(1);
  },
);
