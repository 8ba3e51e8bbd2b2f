/**
 * One chaos worker: a real OS process using the leasehold library the way an application would.
 *
 *   node worker.js --id w3 --store-kind postgres --store URL --resource PGURL --schema S
 *                  --lease NAME --ttl 1000 --log FILE --state-dir DIR [--mode elector|acquire]
 *                  [--unfenced] [--resume SNAPSHOT] [--forked-from w1] [--max-life MS] [--liveness ttl|session]
 *
 * While it believes it leads it loops over units: read `lease.token`, work 100-300ms, then write
 * to the resource with that token WITHOUT re-checking the lease. A process frozen mid-unit
 * resumes right at the write; only the resource's fence can stop it. `--unfenced` writes with
 * no fence at all (the negative control).
 *
 * Its state dir holds what applications keep on disk: `identity` (a label written on first start,
 * used as leasehold's holderLabel) and `leader.json` (leasehold's `marker`, written while it
 * leads). A fork inherits both; leasehold appends fresh random bits to the label and deletes the
 * inherited marker before contending. `--resume` starts from another worker's snapshot: the
 * Lease resumes the term (`lease.resume`) and the unit in hand is finished.
 *
 * Every event goes to its own JSON-lines log (synchronously, so a SIGKILL loses nothing) and the
 * ones the harness watches live also go to stdout. Signals: SIGTERM drains (finish the unit in
 * hand, release, exit); SIGUSR2 writes a snapshot of its in-memory state and SIGSTOPs itself,
 * like a VM paused for a snapshot.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { AbortedError, NotLeaderError, errorMessage } from '../../src/core/errors.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Lease } from '../../src/core/lease.js';
import { resumeLease, snapshotLease, type LeaseSnapshot } from '../../src/testing/index.js';
import { Elector } from '../../src/core/elector.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { MysqlStore } from '../../src/backends/mysql/store.js';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { createRedisStore } from '../../src/backends/redis/index.js';
import { createEtcdStore } from '../../src/backends/etcd/index.js';
import { resourcePool, writeUnit } from './resource.js';
import { monoMs, type StoreKind, type WorkerEventBody, type WorkerMode } from './types.js';

const { values: opt } = parseArgs({
  options: {
    id: { type: 'string' },
    'store-kind': { type: 'string' },
    store: { type: 'string' },
    resource: { type: 'string' },
    schema: { type: 'string' },
    lease: { type: 'string' },
    ttl: { type: 'string', default: '1000' },
    'work-min': { type: 'string', default: '100' },
    'work-max': { type: 'string', default: '300' },
    log: { type: 'string' },
    'state-dir': { type: 'string' },
    mode: { type: 'string', default: 'acquire' },
    unfenced: { type: 'boolean', default: false },
    resume: { type: 'string' },
    'forked-from': { type: 'string' },
    'max-life': { type: 'string', default: '900000' },
    liveness: { type: 'string', default: 'ttl' },
  },
  strict: true,
});

const id = opt.id ?? '?';
const need = (v: string | undefined, name: string): string => {
  if (v === undefined || v === '') throw new Error(`worker: --${name} is required`);
  return v;
};
const storeKind = need(opt['store-kind'], 'store-kind') as StoreKind;
const storeUrl = need(opt.store, 'store');
const resourceUrl = need(opt.resource, 'resource');
const schema = need(opt.schema, 'schema');
const leaseName = need(opt.lease, 'lease');
const stateDir = need(opt['state-dir'], 'state-dir');
const ttlMs = Number(opt.ttl);
const workMin = Number(opt['work-min']);
const workMax = Number(opt['work-max']);
const mode = opt.mode as WorkerMode;
const unfenced = opt.unfenced === true;
const liveness = opt.liveness === 'session' ? 'session' : 'ttl';

// ---- the log ---------------------------------------------------------------------------------

const logFd = openSync(need(opt.log, 'log'), 'a');
/** Events the harness follows live (who leads, when a unit starts, what the resource said). */
const LIVE = new Set(['start', 'acquired', 'lost', 'released', 'unit', 'accepted', 'fenced', 'duplicate', 'write-error', 'snapshot', 'stopped', 'error']);
process.stdout.on('error', () => {}); // the harness went away; the IPC disconnect stops us

function log(body: WorkerEventBody): void {
  const line = `${JSON.stringify({ t: monoMs(), wall: Date.now(), w: id, pid: process.pid, ...body })}\n`;
  writeSync(logFd, line);
  if (LIVE.has(body.ev)) process.stdout.write(line);
}

// ---- what a naive application keeps on disk ----------------------------------------------------

mkdirSync(stateDir, { recursive: true });
const identityFile = join(stateDir, 'identity');
/** leasehold's `marker` option keeps it: written while leading, deleted on the way in and out. */
const markerFile = join(stateDir, 'leader.json');
if (!existsSync(identityFile)) writeFileSync(identityFile, `chaos-${id}`);
/** Inherited by a fork: that is the hazard. leasehold appends 128 kernel-random bits to it. */
const label = readFileSync(identityFile, 'utf8').trim();

// ---- the store, with every claim logged ---------------------------------------------------------

/** Store timeouts follow the TTL: an answer later than that is useless to a lease anyway. */
async function openChaosStore(): Promise<LeaseStore> {
  switch (storeKind) {
    case 'postgres':
      return PostgresStore.create({ url: storeUrl, queryTimeoutMs: ttlMs, connectTimeoutMs: ttlMs });
    case 'sqlite':
      return new SqliteStore({ url: storeUrl });
    case 'redis':
      // Long history streams so the checker sees every term of the run (until Redis loses them).
      return createRedisStore({ url: storeUrl, commandTimeoutMs: ttlMs, connectTimeoutMs: ttlMs, historyMaxLen: 1_000_000, leaseHistoryMaxLen: 1_000_000 });
    case 'etcd':
      return createEtcdStore({ url: storeUrl, callTimeoutMs: ttlMs });
    case 'mysql':
      return MysqlStore.create({ url: storeUrl, queryTimeoutMs: ttlMs, connectTimeoutMs: ttlMs });
  }
}

function logged(inner: LeaseStore): LeaseStore {
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'claim') {
        return async (reqs: Parameters<LeaseStore['claim']>[0], o: Parameters<LeaseStore['claim']>[1]) => {
          const sent = monoMs();
          const kind = reqs[0]?.expect === null ? 'acquire' : 'renew';
          const holder = reqs[0]?.holder ?? '';
          try {
            const res = await target.claim(reqs, o);
            const r = res[0];
            const token = r !== undefined && (r.outcome === 'acquired' || r.outcome === 'renewed') ? String(r.token) : undefined;
            log({ ev: 'claim', kind, sent, outcome: r?.outcome ?? 'none', holder, ...(token === undefined ? {} : { token }), ...(r !== undefined && 'session' in r && r.session !== undefined ? { session: r.session } : {}) });
            return res;
          } catch (err) {
            log({ ev: 'claim', kind, sent, outcome: 'error', holder, error: errorMessage(err).slice(0, 200) });
            throw err;
          }
        };
      }
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

// ---- stopping ---------------------------------------------------------------------------------

const stop = new AbortController();
function requestStop(why: string): void {
  if (stop.signal.aborted) return;
  log({ ev: 'draining' });
  stop.abort(new AbortedError(why));
  // Bounded: a drain that hangs (a store call stuck in a partition) must not outlive the run.
  setTimeout(() => {
    log({ ev: 'error', message: 'drain took longer than 10s; exiting' });
    process.exit(2);
  }, 10_000).unref();
}
process.on('SIGTERM', () => requestStop('SIGTERM'));
process.on('SIGINT', () => requestStop('SIGINT'));
process.on('disconnect', () => requestStop('the harness went away'));
setTimeout(() => requestStop('max life reached'), Number(opt['max-life'])).unref();

// ---- units -------------------------------------------------------------------------------------

const pool = resourcePool(resourceUrl, Math.max(2000, ttlMs * 2));
let seq = 0;
let currentUnit: { token: string; seq: number; holder: string } | null = null;
const MAX_UNITS = 10_000_000;

async function write(token: bigint, unitSeq: number, holder: string, resumed: boolean): Promise<void> {
  const base = { token: String(token), seq: unitSeq, ...(resumed ? { resumed } : {}) };
  try {
    const r = await writeUnit(pool, schema, { token, worker: id, pid: process.pid, holder, seq: unitSeq, mono: monoMs() }, unfenced, ttlMs);
    if (r.outcome === 'fenced') log({ ev: 'fenced', ...base, highWater: r.highWater === null ? null : String(r.highWater) });
    else log({ ev: r.outcome, ...base });
  } catch (err) {
    log({ ev: 'write-error', ...base, message: errorMessage(err).slice(0, 200) });
    await sleep(100); // the resource is down: do not spin
  }
}

/** Waits (bounded) for a renewal to land or the term to end; the token is withheld meanwhile. */
async function waitOutJeopardy(lease: Lease): Promise<void> {
  await new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      lease.off('recovered', done);
      lease.off('lost', done);
      stop.signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ttlMs);
    lease.on('recovered', done);
    lease.on('lost', done);
    stop.signal.addEventListener('abort', done, { once: true });
  });
}

/** Units until the term ends or we are asked to stop. */
async function units(lease: Lease): Promise<void> {
  for (let i = 0; i < MAX_UNITS && !stop.signal.aborted; i++) {
    let token: bigint;
    let holder: string;
    try {
      token = lease.token; // the only leadership check a unit makes: at its start
      holder = lease.currentTerm?.holder ?? '';
    } catch (err) {
      if (!(err instanceof NotLeaderError)) throw err;
      if (lease.state === 'jeopardy') {
        await waitOutJeopardy(lease);
        continue;
      }
      return;
    }
    const unitSeq = ++seq;
    currentUnit = { token: String(token), seq: unitSeq, holder };
    log({ ev: 'unit', token: String(token), seq: unitSeq, holder });
    // The work. No signal, no re-check: a worker frozen here wakes up and carries on.
    await sleep(workMin + Math.random() * (workMax - workMin));
    await write(token, unitSeq, holder, false);
    currentUnit = null;
  }
}

// ---- main --------------------------------------------------------------------------------------

interface Snapshot {
  worker: string;
  pid: number;
  holder: string;
  term: { token: string; holder: string } | null;
  unit: { token: string; seq: number; holder: string } | null;
  seq: number;
  takenAt: number;
  /** What the Lease remembered (`snapshotLease(lease)`); absent when it held no term. */
  lease?: LeaseSnapshot | undefined;
}

/** Waits (bounded) for the snapshot this process is to be restored from. */
async function awaitSnapshot(file: string): Promise<Snapshot> {
  for (let i = 0; i < 6000 && !existsSync(file); i++) {
    if (stop.signal.aborted) throw new AbortedError('stopped before the snapshot arrived');
    await sleep(10);
  }
  return JSON.parse(readFileSync(file, 'utf8')) as Snapshot;
}

async function openStoreWithRetry(): Promise<LeaseStore> {
  // A replacement may start while the store restarts: retry (bounded) rather than crash.
  let lastErr: unknown;
  for (let i = 0; i < 60; i++) {
    try {
      return await openChaosStore();
    } catch (err) {
      lastErr = err;
      if (stop.signal.aborted) break;
      await sleep(500);
    }
  }
  throw lastErr;
}

/** The lease this process contends for (the elector's, in elector mode). */
let active: Lease | undefined;

async function main(): Promise<number> {
  const store = logged(await openStoreWithRetry());
  const lh = new Leasehold({ store, closeStore: true, holderLabel: label });
  lh.on('identity', (holder, why) => log({ ev: 'identity', holder, why: why.slice(0, 200) }));
  lh.on('suspected', (detector, detail) => log({ ev: 'suspected', detector, detail: detail.slice(0, 200) }));
  const wire = (l: Lease): Lease => {
    l.on('acquired', (term) => log({ ev: 'acquired', token: String(term.token), holder: term.holder }));
    l.on('lost', (term, err) => {
      if (err.reason !== 'released') log({ ev: 'lost', token: String(term.token), reason: err.reason });
    });
    l.on('released', (term, handedOver) => log({ ev: 'released', token: String(term.token), handedOver }));
    l.on('jeopardy', (term) => log({ ev: 'jeopardy', token: String(term.token) }));
    l.on('recovered', (term) => log({ ev: 'recovered', token: String(term.token) }));
    return l;
  };

  // Installed before 'start' is logged: SIGUSR2's default action is to terminate.
  process.on('SIGUSR2', () => {
    const l = active;
    const t = l?.currentTerm;
    const snap: Snapshot = {
      worker: id,
      pid: process.pid,
      holder: lh.holder,
      term: t === undefined ? null : { token: String(t.token), holder: t.holder },
      unit: currentUnit,
      seq,
      takenAt: monoMs(),
      lease: l === undefined ? undefined : snapshotLease(l),
    };
    const file = join(stateDir, 'snapshot.json');
    writeFileSync(file, JSON.stringify(snap));
    log({ ev: 'snapshot', file, token: snap.term?.token ?? null, seq: snap.unit?.seq ?? null, api: snap.lease !== undefined });
    // Freeze right here, between the snapshot and the next instruction, like a paused VM.
    process.kill(process.pid, 'SIGSTOP');
  });

  log({
    ev: 'start',
    holder: lh.holder,
    label,
    mode,
    unfenced,
    ...(opt.resume === undefined ? {} : { resumedFrom: opt.resume }),
    ...(opt['forked-from'] === undefined ? {} : { forkedFrom: opt['forked-from'] }),
    ...(process.env['FAKETIME_TIMESTAMP_FILE'] === undefined ? {} : { clock: readClock(process.env['FAKETIME_TIMESTAMP_FILE']) }),
  });

  // A fork inherits the parent's disk, marker included. leasehold's `marker` option deletes it
  // when the Lease is created, before contending; we only note what was there.
  let inherited: string | null = null;
  if (existsSync(markerFile)) {
    try {
      inherited = String((JSON.parse(readFileSync(markerFile, 'utf8')) as { token?: unknown }).token ?? null);
    } catch {
      inherited = '?';
    }
  }
  const leaseOptions = { ttl: ttlMs, marker: markerFile, liveness } as const;
  // A restore is started (and warm) before the snapshot exists, because restores are fast (a
  // microVM restore is ~200ms): it waits for the file, then carries on from it.
  const snapshot = opt.resume === undefined ? undefined : await awaitSnapshot(opt.resume);
  let lease: Lease;
  let elector: Elector | undefined;
  const handlers = { onElected: () => units(lease) };
  if (mode === 'elector' && snapshot?.lease === undefined) {
    elector = lh.elect(leaseName, handlers, { ...leaseOptions, signal: stop.signal });
    lease = wire(elector.lease); // no event can have fired yet: acquiring takes a round trip
  } else {
    lease = wire(lh.lease(leaseName, leaseOptions));
  }
  active = lease;
  if (inherited !== null) log({ ev: 'marker', action: existsSync(markerFile) ? 'kept' : 'dropped', token: inherited });

  // Restored from a snapshot: this process "is" the snapshotted one. Its Lease resumes the term
  // (believing it leads, as a restored process would) and its unit resumes mid-way: the write
  // it was about to make goes out with the token it read before the snapshot. Only the resource
  // can stop that write: the fence, and for the other copy of the unit, its idempotency key.
  let pending: Promise<void> = Promise.resolve();
  if (snapshot !== undefined) {
    seq = snapshot.seq;
    if (snapshot.lease !== undefined) resumeLease(lease, snapshot.lease);
    const unit = snapshot.unit;
    if (unit !== null) {
      log({ ev: 'unit', token: unit.token, seq: unit.seq, holder: unit.holder, resumed: true });
      pending = sleep(Math.random() * workMax).then(() => write(BigInt(unit.token), unit.seq, unit.holder, true));
    }
  }

  try {
    await pending;
    if (mode === 'elector') {
      if (elector === undefined) {
        // A resumed term: the elector must start from it, so it is built on the resumed Lease.
        elector = new Elector(lease, handlers, lh.logger, stop.signal);
        elector.start();
      }
      await new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve(), { once: true }));
      await elector.stop();
    } else {
      for (let i = 0; i < MAX_UNITS && !stop.signal.aborted; i++) {
        try {
          await lease.acquire({ signal: stop.signal });
        } catch (err) {
          if (stop.signal.aborted) break;
          log({ ev: 'error', message: `acquire failed: ${errorMessage(err).slice(0, 200)}` });
          await sleep(ttlMs);
          continue;
        }
        await units(lease);
      }
    }
  } finally {
    await lh.close(); // releases the lease if held, so a successor need not wait for the TTL
    await pool.end().catch(() => {});
  }
  log({ ev: 'stopped' });
  return 0;
}

function readClock(file: string): string {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    return '?';
  }
}

main().then(
  (code) => {
    closeSync(logFd);
    process.exit(code);
  },
  (err: unknown) => {
    log({ ev: 'error', message: errorMessage(err).slice(0, 500) });
    process.exit(1);
  },
);
