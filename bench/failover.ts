/**
 * Crash failover: a holder in its own process is SIGKILLed; the time until a follower (waiting
 * in this process) holds the lease, as a fraction of the TTL. A killed holder's lease must run
 * out; a lease can do no better than the time left on it (between TTL - renew interval and TTL).
 * Baselines, on the same store in the same run: the polling elector with Kubernetes' timings
 * (PostgreSQL, Redis, SQLite has none), etcd3's Election (etcd), and pg_advisory_lock, which the
 * server frees when the dead process's socket closes (no TTL at all; nothing a paused VM gets).
 * On PostgreSQL, MySQL and SQLite also liveness 'session' (docs/liveness.md): the holder's term
 * ends with its connection (its process, on SQLite), so its follower should land near the
 * advisory-lock (PostgreSQL) or GET_LOCK (MySQL) waiter, not near the TTL.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Leasehold } from '../src/core/leasehold.js';
import { makeTestStore, TEST_PG_URL, type StoreKind } from '../test/helpers/stores.js';
import { TEST_REDIS_URL } from '../test/helpers/redis-store.js';
import { TEST_ETCD_URL } from '../test/helpers/etcd-store.js';
import { parseEtcdUrl } from '../src/backends/etcd/index.js';
import { stat, uniq, type Recorder } from './lib.js';
import type { HolderConfig } from './holder.js';
import { K8sElector, pgRecords, redisRecords } from './k8s-elector.js';
import { advisoryClient, etcdClient, namedLockClient } from './peers.js';

const holderJs = fileURLToPath(new URL('./holder.js', import.meta.url));

/**
 * Each step of a crash has this long: far above any takeover measured here (at most a few TTLs,
 * 60 s for the followers that wait), so only a step that never ends reaches it. CI54's smoke
 * run sat in this figure for eight minutes, silent, until the test's own bound killed the bench:
 * now the step that hung is named.
 */
const STEP_MS = 90_000;

function bounded<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${STEP_MS / 1000} s`)), STEP_MS);
  });
  return Promise.race([p, limit]).finally(() => clearTimeout(timer));
}

/** Starts a holder, waits for "held", starts the follower, SIGKILLs the holder; ms to takeover. */
async function crash(config: HolderConfig, follow: () => Promise<void>, settleMs: number): Promise<number> {
  const step = (what: string): string => `crash (${config.mode}${'liveness' in config && config.liveness !== undefined ? `, liveness ${config.liveness}` : ''}): ${what}`;
  const child = spawn(process.execPath, [holderJs, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  // Listened for from the start: a holder can end before its SIGKILL (below), and an 'exit' listened
  // for only at the kill then never comes (ci1 of 2026-12-07: "did not exit: not within 90 s").
  let endedAs: string | undefined;
  const exited = new Promise<void>((r) =>
    child.once('exit', (code, signal) => {
      endedAs = String(code ?? signal);
      r();
    }),
  );
  await bounded(
    new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (d: Buffer) => d.toString().includes('held') && resolve());
      child.once('exit', (code) => reject(new Error(`holder exited (${code}) before holding: ${err}`)));
      child.once('error', reject);
    }),
    step('the holder did not say "held"'),
  ).catch((e: unknown) => {
    child.kill('SIGKILL');
    throw e;
  });
  const followed = follow();
  // Let the follower see the live holder (and the holder renew) before the crash.
  await new Promise((r) => setTimeout(r, settleMs));
  if (endedAs !== undefined) {
    // A leasehold holder whose term ended (a stall past a short TTL on a loaded host) exits: nothing
    // holds its process open. There is no crash to time; the follower takes the freed lease.
    await bounded(followed, step('the follower did not take the lease its holder lost'));
    throw new HolderEndedEarly(`${step(`the holder ended (${endedAs}) before its SIGKILL, its term lost`)}: ${err.slice(-1000)}`);
  }
  const t0 = performance.now();
  child.kill('SIGKILL');
  await bounded(followed, step('the follower did not take over after the SIGKILL'));
  const ms = performance.now() - t0;
  await bounded(exited, step('the SIGKILLed holder did not exit'));
  return ms;
}

class HolderEndedEarly extends Error {}

/**
 * A crash sample of a leasehold holder, taken again with a fresh lease name (at most twice) when
 * the holder lost its term before the SIGKILL: the smoke run's 500 ms TTL does not outlast every
 * stall of a loaded host, and such a sample measures no crash. Said on stderr each time.
 */
async function leaseholdCrash(make: () => { config: HolderConfig; follow: () => Promise<void> }, settleMs: () => number): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const { config, follow } = make();
    try {
      return await crash(config, follow, settleMs());
    } catch (e) {
      if (!(e instanceof HolderEndedEarly) || attempt === 3) throw e;
      process.stderr.write(`bench: ${e.message.split('\n')[0]}; the sample is taken again (attempt ${attempt + 1} of 3)\n`);
    }
  }
}

async function pgTable(): Promise<{ table: string; drop(): Promise<void> }> {
  const table = `lh_bench_k8s_${randomBytes(4).toString('hex')}`;
  return {
    table,
    async drop() {
      const c = new pg.Client({ connectionString: TEST_PG_URL });
      await c.connect();
      await c.query(`DROP TABLE IF EXISTS ${table}`);
      await c.end();
    },
  };
}

export async function failover(rec: Recorder, kind: StoreKind, reps: number, baseTtl: number): Promise<void> {
  const ttl = kind === 'etcd' ? Math.max(1000, baseTtl * 2) : baseTtl;
  // A random moment in the renew cycle, as a real crash would be.
  const settle = (): number => ttl / 2 + Math.random() * (ttl / 3);
  const t = await makeTestStore(kind);
  const follower = new Leasehold({ store: await t.open() });
  const ours: number[] = [];
  const session: number[] = [];
  const baselines = new Map<string, number[]>();
  const push = (name: string, ms: number): void => void baselines.set(name, [...(baselines.get(name) ?? []), ms / ttl]);
  const table = await pgTable();
  try {
    for (let i = 0; i < reps; i++) {
      let name = '';
      ours.push(
        (await leaseholdCrash(() => {
          name = uniq('failover');
          const n = name;
          return { config: { mode: 'leasehold', url: t.url, name: n, ttl }, follow: async () => void (await follower.lease(n, { ttl }).acquire({ wait: '60s' })) };
        }, settle)) / ttl,
      );
      if (kind === 'postgres' || kind === 'redis') {
        const records = kind === 'postgres' ? await pgRecords(TEST_PG_URL, table.table) : await redisRecords(TEST_REDIS_URL);
        const e = new K8sElector(records, name, ttl);
        const config: HolderConfig =
          kind === 'postgres' ? { mode: 'k8s-postgres', address: TEST_PG_URL, table: table.table, name, ttl } : { mode: 'k8s-redis', address: TEST_REDIS_URL, name, ttl };
        try {
          push('polling elector (k8s timings)', await crash(config, () => new Promise<void>((resolve) => void e.run(resolve)), settle()));
        } finally {
          // Also when the crash fails: the records (no TTL) are deleted either way.
          e.stop();
          await records.close();
        }
      }
      if (kind === 'postgres' || kind === 'mysql' || kind === 'sqlite') {
        const ms = await leaseholdCrash(() => {
          const s = uniq('failover-session');
          return { config: { mode: 'leasehold', url: t.url, name: s, ttl, liveness: 'session' }, follow: async () => void (await follower.lease(s, { ttl, liveness: 'session' }).acquire({ wait: '60s' })) };
        }, settle);
        session.push(ms / ttl);
      }
      if (kind === 'mysql') {
        const c = await namedLockClient();
        const lock = uniq('lhbench-getlock');
        push('GET_LOCK (socket close)', await crash({ mode: 'getlock', lock }, async () => void (await c.query('SELECT GET_LOCK(?, 60)', [lock])), settle()));
        await c.end();
      }
      if (kind === 'postgres') {
        const c = await advisoryClient();
        const key = Math.floor(Math.random() * 2 ** 31);
        push('pg_advisory_lock (socket close)', await crash({ mode: 'advisory', address: TEST_PG_URL, key }, async () => void (await c.query('SELECT pg_advisory_lock($1)', [key])), settle()));
        await c.end();
      }
      if (kind === 'etcd') {
        const { Election } = await import('etcd3');
        const c = await etcdClient();
        const prefix = uniq('lhbench-election');
        // The follower campaigns once the holder leads (created earlier, it would lead itself).
        let campaign: ReturnType<InstanceType<typeof Election>['campaign']> | undefined;
        const follow = (): Promise<void> =>
          new Promise<void>((r) => void (campaign = new Election(c, prefix, Math.ceil(ttl / 1000)).campaign('follower')).once('elected', () => r()));
        push('etcd3 Election', await crash({ mode: 'election', hosts: parseEtcdUrl(TEST_ETCD_URL).hosts.join(','), prefix, ttl }, follow, settle()));
        await campaign?.resign();
        await c.delete().prefix(prefix);
        c.close();
      }
    }
    if (session.length > 0) {
      const label = `crash (SIGKILL), liveness session, ttl ${ttl}ms`;
      rec.add({ figure: 'failover', store: kind, label, unit: 'x TTL', leasehold: stat(session), baselineName: 'liveness ttl (the default)', baseline: stat(ours) });
      for (const waiter of ['pg_advisory_lock (socket close)', 'GET_LOCK (socket close)']) {
        const xs = baselines.get(waiter);
        if (xs !== undefined) rec.add({ figure: 'failover', store: kind, label, unit: 'x TTL', leasehold: stat(session), baselineName: waiter, baseline: stat(xs) });
      }
    }
    if (baselines.size === 0) baselines.set('TTL (the lease must run out)', [1]);
    for (const [name, xs] of baselines) {
      rec.add({ figure: 'failover', store: kind, label: `crash (SIGKILL), ttl ${ttl}ms`, unit: 'x TTL', leasehold: stat(ours), baselineName: name, baseline: stat(xs) });
    }
  } finally {
    await follower.close();
    await t.cleanup();
    await table.drop();
  }
}
