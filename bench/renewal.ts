/**
 * Renewal at N leases: one process holds N leases and renews them all, as the renewal scheduler
 * does on each tick (src/core/renewal-batcher.ts: batches of the store's maxClaimBatch, else MAX_BATCH, sent at once). Figure: the wall
 * time of one tick and the store calls it makes; baseline: the raw driver renewing the same N
 * rows or keys in one call (etcd: one lease keepalive, which keeps any number of keys).
 */
import { newNonce, newNonces } from '../src/core/identity.js';
import { MAX_BATCH } from '../src/core/renewal-batcher.js';
import { ReleaseBatcher } from '../src/core/release-batcher.js';
import type { ClaimRequest, ClaimResult, LeaseStore, ReleaseRequest } from '../src/backends/store.js';
import { StoreUnavailableError } from '../src/core/errors.js';
import { makeTestStore, type StoreKind } from '../test/helpers/stores.js';
import { interleave, stat, timed, type Recorder } from './lib.js';
import { rawRenewer, type RawRenewer } from './raw.js';
import { redisClient, redlockOn, randomKey } from './peers.js';
import { CLAIM } from '../src/backends/redis/scripts.js';

const TTL_MS = 60_000;

/**
 * `names` acquired by `holder` in batches of the store's maxClaimBatch, each asked again on a
 * retryable error as the engine would (after a failed baseline of N etcd calls at once, its gRPC
 * channel can still be closing: UNAVAILABLE, "Channel closed before call started", which cost
 * the full run of 2026-12-07 its etcd close-1,000 row).
 */
async function acquireAll(store: LeaseStore, holder: string, names: readonly string[], nonces: readonly string[]): Promise<void> {
  const cap = store.maxClaimBatch ?? MAX_BATCH;
  for (let i = 0; i < names.length; i += cap) {
    const part = names.slice(i, i + cap).map((name, j) => ({ name, holder, ttlMs: TTL_MS, expect: null, nextNonce: nonces[i + j]! }));
    let got: ClaimResult[] | undefined;
    for (let attempt = 1; got === undefined; attempt++) {
      try {
        got = await store.claim(part);
      } catch (e) {
        if (!(e instanceof StoreUnavailableError) || attempt >= 5) throw e;
        await new Promise((r) => setTimeout(r, 200 * attempt));
      }
    }
    if (got.some((g) => g.outcome !== 'acquired')) throw new Error('bench could not acquire its leases');
  }
}

async function hold(store: LeaseStore, n: number): Promise<() => Promise<number>> {
  const holder = `bench-${newNonce().slice(0, 8)}`;
  const names = Array.from({ length: n }, (_, i) => `renew-${i}`);
  let nonces = newNonces(n);
  const cap = store.maxClaimBatch ?? MAX_BATCH;
  await acquireAll(store, holder, names, nonces);
  // One tick, as the scheduler sends it: every batch at once.
  return async () => {
    // One kernel read for the tick's nonces, as the renewal batcher draws them (not one per lease).
    const next = newNonces(n);
    const batches: ClaimRequest[][] = [];
    for (let i = 0; i < n; i += cap) {
      batches.push(names.slice(i, i + cap).map((name, j) => ({ name, holder, ttlMs: TTL_MS, expect: [nonces[i + j]!], nextNonce: next[i + j]! })));
    }
    const results = (await Promise.all(batches.map((b) => store.claim(b)))).flat();
    const lost = results.filter((r) => r.outcome !== 'renewed').length;
    if (lost > 0) throw new Error(`${lost} of ${n} renewals failed`);
    nonces = next;
    return batches.length;
  };
}

export async function renewal(rec: Recorder, kind: StoreKind, counts: number[], samples: number): Promise<void> {
  for (const n of counts) {
    const t = await makeTestStore(kind);
    const raw = await rawRenewer(kind, n, TTL_MS);
    try {
      const tick = await hold(t.store, n);
      let calls = 0;
      const slow = kind === 'redis' ? await slowlogOn() : undefined;
      // Big batches are slow enough that fewer samples say as much.
      const reps = n >= 10_000 ? Math.max(3, Math.ceil(samples / 5)) : n >= 1000 ? Math.max(3, Math.ceil(samples / 2)) : samples;
      // The client's CPU per tick beside its wall time: on a loaded host the wall time (and the
      // keepalive it is divided by) swings with the neighbours, the CPU the client spent much less.
      const cpu: number[] = [];
      const [a, b] = await interleave(
        reps,
        () =>
          timed(async () => {
            const c0 = process.cpuUsage();
            calls = await tick();
            const c = process.cpuUsage(c0);
            cpu.push((c.user + c.system) / 1000);
          }),
        () => timed(() => raw!.renew()),
      );
      rec.add({
        figure: 'renewal',
        store: kind,
        label: `${n} lease${n === 1 ? '' : 's'}`,
        unit: 'ms',
        leasehold: stat(a),
        baselineName: raw!.name,
        baseline: stat(b),
        extra: {
          'store calls/tick': calls,
          // The first sample is interleave's unrecorded warm-up.
          'client CPU ms/tick': stat(cpu.slice(1)).median,
          'baseline calls/tick': 1,
          ...(slow === undefined ? {} : await slow.longest()),
          ...(kind === 'etcd' && n >= 1000 ? await sessionFloor(raw!, portFloor(n, reps, stat(a).median, stat(b).median), stat(a).median, reps) : {}),
        },
      });
      if (kind === 'redis' && n === 1) await redlockRenewal(rec, tick, reps);
      if (n >= 100) {
        // Its baseline (N releases at once, each its own call) can fail where the engine's
        // batches do not (etcd at 1,000 on a loaded host: every release past its attempt
        // deadline): that is this row's finding, not a reason to leave out the larger counts.
        await closeMany(rec, kind, t.store, n, reps).catch((e: unknown) =>
          rec.skip('release', kind, `close ${n} leases: ${(e instanceof Error ? e.message : String(e)).split('\n')[0]}`),
        );
      }
    } finally {
      await raw?.close();
      await t.cleanup();
    }
  }
}

/**
 * etcd keeps any number of keys alive with one keepalive, so at N leases its baseline does no
 * work per lease, while any API that renews N named leases and answers each (the engine's port:
 * one request in, one answer out, per lease) does: building N requests with fresh nonces and N
 * answers, measured here without a store. leasehold's tick against that floor plus the keepalive
 * says how much of the ratio is the per-lease port and how much is the store's code.
 */
function portFloor(n: number, reps: number, leaseholdMs: number, keepaliveMs: number): Record<string, number> {
  const holder = 'floor';
  const names = Array.from({ length: n }, (_, i) => `renew-${i}`);
  let nonces = newNonces(n);
  const times: number[] = [];
  for (let r = 0; r < Math.max(5, reps); r++) {
    const t0 = performance.now();
    const next = newNonces(n);
    const requests: ClaimRequest[] = names.map((name, i) => ({ name, holder, ttlMs: TTL_MS, expect: [nonces[i]!], nextNonce: next[i]! }));
    const answers = requests.map((q) => ({ name: q.name, outcome: 'renewed' as const, token: 1n, holder: q.holder, expiresAtMs: 0, storeNowMs: 0 }));
    if (answers.filter((x) => x.outcome !== 'renewed').length > 0) throw new Error('unreachable');
    nonces = next;
    times.push(performance.now() - t0);
  }
  const port = stat(times).median;
  return { 'port floor ms': port, 'x (keepalive + port floor)': leaseholdMs / (keepaliveMs + port) };
}

/**
 * etcd's floor for a renewal tick of a session (src/backends/etcd/session.ts): the swap that
 * proves this process is not a clone (a compare-and-put on the session key with the read of its
 * end markers) and then the keepalive, done raw, one after the other as the session must, plus
 * the port floor. A keepalive alone renews the keys but cannot tell two copies of a process
 * apart; this is the least a tick that can costs.
 */
async function sessionFloor(raw: RawRenewer, port: Record<string, number>, leaseholdMs: number, reps: number): Promise<Record<string, number>> {
  const times: number[] = [];
  for (let r = 0; r < Math.max(5, reps); r++) times.push(await timed(() => raw.sessionTick!()));
  const tickMs = stat(times).median;
  const floor = tickMs + port['port floor ms']!;
  return { ...port, 'raw session tick ms': tickMs, 'x (raw session tick + port floor)': leaseholdMs / floor };
}

/**
 * How long Redis's single thread was held by one script, by Redis's own measure (SLOWLOG for the
 * figure, the server's settings put back after): the longest claim script
 * and the longest baseline script. leasehold splits a batch to keep each under maxScriptMs.
 */
async function slowlogOn(): Promise<{ longest(): Promise<Record<string, number>> }> {
  const r = redisClient();
  const before = (await r.config('GET', 'slowlog-*')) as string[];
  // 100 µs, not 0: Redis 7 also logs each command a script runs, and 0 would let the ~20,000
  // inner GETs and SETs of one raw 10,000-key script push the script's own entry out of the log.
  await r.config('SET', 'slowlog-log-slower-than', '100');
  await r.config('SET', 'slowlog-max-len', '10000');
  await r.slowlog('RESET');
  return {
    async longest() {
      try {
        const entries = (await r.slowlog('GET', 10000)) as [number, number, number, string[]][];
        let ours = 0;
        let theirs = 0;
        for (const [, , us, args] of entries) {
          const cmd = String(args[0]).toLowerCase();
          if (cmd !== 'evalsha' && cmd !== 'eval') continue;
          if (args[1] === CLAIM.sha) ours = Math.max(ours, us);
          else theirs = Math.max(theirs, us);
        }
        return { 'longest script ms': ours / 1000, 'baseline longest ms': theirs / 1000 };
      } finally {
        for (let i = 0; i + 1 < before.length; i += 2) await r.config('SET', before[i]!, before[i + 1]!);
        r.disconnect();
      }
    },
  };
}

/** redlock's extend: the peer's renewal of one lock. */
async function redlockRenewal(rec: Recorder, tick: () => Promise<number>, reps: number): Promise<void> {
  const r = redisClient();
  try {
    const redlock = redlockOn(r);
    let lock = await redlock.lock(randomKey('redlock'), TTL_MS);
    const [a, b] = await interleave(
      reps,
      () => timed(() => tick()),
      () => timed(async () => (lock = await lock.extend(TTL_MS))),
    );
    await lock.unlock();
    rec.add({ figure: 'renewal', store: 'redis', label: '1 lease', unit: 'ms', leasehold: stat(a), baselineName: 'redlock extend', baseline: stat(b) });
  } finally {
    r.disconnect();
  }
}

/**
 * Closing a process that holds N leases: the engine's releases, sent together as Leasehold.close
 * sends them (core/release-batcher.ts: one releaseMany per batch where the store has it), against
 * the same N releases sent one by one, as every store was sent them before batching.
 */
async function closeMany(rec: Recorder, kind: StoreKind, store: LeaseStore, n: number, reps: number): Promise<void> {
  const cap = store.maxClaimBatch ?? MAX_BATCH;
  let round = 0;
  const holdAll = async (): Promise<ReleaseRequest[]> => {
    const holder = `close-${newNonce().slice(0, 8)}`;
    // Fresh names each round: a round whose baseline failed leaves its leases to expire.
    const r = round++;
    const names = Array.from({ length: n }, (_, i) => `close-${r}-${i}`);
    const nonces = names.map(() => newNonce());
    await acquireAll(store, holder, names, nonces);
    return names.map((name, i) => ({ name, holder, expect: [nonces[i]!] }));
  };
  const check = (answers: boolean[]): void => {
    if (answers.some((a) => !a)) throw new Error(`${answers.filter((a) => !a).length} of ${n} releases were refused`);
  };
  let baselineFailed: string | undefined;
  const [a, b] = await interleave(
    reps,
    async () => {
      const reqs = await holdAll();
      const batcher = new ReleaseBatcher(store);
      return timed(async () => check(await Promise.all(reqs.map((r) => batcher.release(r)))));
    },
    async () => {
      const reqs = await holdAll();
      try {
        return await timed(async () => check(await Promise.all(reqs.map((r) => store.release(r)))));
      } catch (e) {
        // The baseline failing is a finding of its own (etcd at 1,000 and 10,000: N calls at
        // once queue past their deadline); leasehold's side is still measured and recorded.
        baselineFailed ??= (e instanceof Error ? e.message : String(e)).split('\n')[0]!;
        // Its leases expire unreleased; they are held again (new nonces) by the next holdAll.
        return Number.NaN;
      }
    },
  );
  const ok = b.filter((x) => Number.isFinite(x));
  rec.add({
    figure: 'release',
    store: kind,
    label: `close ${n} leases`,
    unit: 'ms',
    leasehold: stat(a),
    baselineName: 'one release per lease (before batching)',
    baseline: stat(ok),
    extra: {
      'store calls': store.releaseMany === undefined ? n : Math.ceil(n / cap),
      'baseline calls': n,
      ...(baselineFailed === undefined ? {} : { 'baseline failed': `${b.length - ok.length} of ${b.length} samples (${baselineFailed})` }),
    },
  });
}
