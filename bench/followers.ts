/**
 * Idle follower load, counted at the server: F followers wait for a lease a live leader holds.
 * The server's own counter (servers.ts) over two runs, a short one (start-up only) and a long
 * one (start-up and W TTLs), less the leader's steady traffic (its rate measured alone first):
 * (long - short) / (F * W) is what one idle follower costs the server per TTL, start-up excluded.
 * Baseline: the polling elector with Kubernetes' timings (k8s-elector.ts) on PostgreSQL, MySQL
 * and Redis, etcd3's Election on etcd, on the same server in the same run.
 */
import { openStore } from '../src/backends/index.js';
import { Leasehold } from '../src/core/leasehold.js';
import type { StoreKind } from '../test/helpers/stores.js';
import { sleep, uniq, type Recorder } from './lib.js';
import { etcdCounted, mysqlCounted, pgCounted, redisCounted, type CountedServer } from './servers.js';
import { K8sElector, mysqlRecords, pgRecords, redisRecords } from './k8s-elector.js';

interface System {
  name: string;
  /** Takes the lease and keeps it until the returned stop. */
  lead(name: string): Promise<() => Promise<void>>;
  /** Starts `count` idle followers of `name`; the returned stop ends and disconnects them. */
  follow(name: string, count: number): Promise<() => Promise<void>>;
}

function leaseholdSystem(server: CountedServer, ttl: number, prefix: string): System {
  // PostgreSQL and MySQL count on a database of their own: no prefix needed.
  const url = /^(postgres|mysql)/.test(server.url) ? server.url : `${server.url}${server.url.includes('?') ? '&' : '?'}prefix=${prefix}`;
  return {
    name: 'leasehold',
    async lead(name) {
      const store = await openStore(url);
      await store.migrate();
      const lh = new Leasehold({ store });
      await lh.lease(name, { ttl }).acquire();
      return async () => {
        await lh.close();
        await store.close();
      };
    },
    async follow(name, count) {
      const store = await openStore(url);
      const clients = Array.from({ length: count }, () => new Leasehold({ store }));
      const ac = new AbortController();
      const waits = clients.map((c) => c.lease(name, { ttl }).acquire({ signal: ac.signal }).catch(() => undefined));
      return async () => {
        ac.abort();
        await Promise.all(waits);
        await Promise.all(clients.map((c) => c.close()));
        await store.close();
      };
    },
  };
}

function k8sSystem(server: CountedServer, ttl: number, kind: 'postgres' | 'mysql' | 'redis'): System {
  const records = (): ReturnType<typeof pgRecords> =>
    kind === 'postgres' ? pgRecords(server.address) : kind === 'mysql' ? mysqlRecords(server.address) : redisRecords(server.address);
  return {
    name: 'polling elector (k8s timings)',
    async lead(name) {
      const r = await records();
      const e = new K8sElector(r, name, ttl);
      const running = new Promise<void>((resolve) => void e.run(resolve));
      await running;
      return async () => {
        e.stop();
        await sleep(e.retryMs * 2.5);
        await r.close();
      };
    },
    async follow(name, count) {
      const r = await records();
      const es = Array.from({ length: count }, () => new K8sElector(r, name, ttl));
      const runs = es.map((e) => e.run());
      return async () => {
        es.forEach((e) => e.stop());
        await Promise.all(runs);
        await r.close();
      };
    },
  };
}

async function electionSystem(server: CountedServer, ttl: number): Promise<System> {
  const { Etcd3, Election } = await import('etcd3');
  const prefix = uniq('election');
  const campaign = (c: InstanceType<typeof Etcd3>) => new Election(c, prefix, Math.ceil(ttl / 1000)).campaign(uniq('c'));
  return {
    name: 'etcd3 Election',
    async lead() {
      const c = new Etcd3({ hosts: server.address });
      const camp = campaign(c);
      await new Promise<void>((resolve, reject) => camp.once('elected', () => resolve()).once('error', reject));
      return async () => {
        await camp.resign();
        c.close();
      };
    },
    follow(_name, count) {
      const c = new Etcd3({ hosts: server.address });
      const camps = Array.from({ length: count }, () => campaign(c));
      camps.forEach((x) => x.on('error', () => {}));
      return Promise.resolve(async () => {
        await Promise.all(camps.map((x) => x.resign().catch(() => undefined)));
        c.close();
      });
    },
  };
}

async function measure(server: CountedServer, system: System, ttl: number, followers: number, ttls: number): Promise<{ perTtl: number; leaderPerTtl: number }> {
  const name = uniq('followers');
  const stopLeader = await system.lead(name);
  try {
    await sleep(server.settleMs + 200);
    // The leader's own traffic, alone.
    const l0 = await server.units();
    const lt0 = performance.now();
    await sleep(ttl * ttls);
    await sleep(server.settleMs);
    const rate = ((await server.units()) - l0) / (performance.now() - lt0);
    const run = async (lengthMs: number): Promise<number> => {
      const u0 = await server.units();
      const t0 = performance.now();
      const stop = await system.follow(name, followers);
      await sleep(lengthMs);
      await stop();
      await sleep(server.settleMs);
      return (await server.units()) - u0 - rate * (performance.now() - t0);
    };
    const short = await run(ttl / 2);
    const long = await run(ttl / 2 + ttl * ttls);
    return { perTtl: Math.max(0, long - short) / (followers * ttls), leaderPerTtl: rate * ttl };
  } finally {
    await stopLeader();
  }
}

export async function followerLoad(rec: Recorder, kind: StoreKind, followers: number, ttls: number, baseTtl: number): Promise<void> {
  if (kind === 'sqlite') return rec.skip('followers', kind, 'no server to count at (a file); followers sleep to the reported expiry');
  const ttl = kind === 'etcd' ? Math.max(1000, baseTtl * 2) : baseTtl;
  const server = kind === 'postgres' ? await pgCounted() : kind === 'mysql' ? await mysqlCounted() : kind === 'redis' ? await redisCounted() : await etcdCounted();
  try {
    const lh = await measure(server, leaseholdSystem(server, ttl, uniq('lhb')), ttl, followers, ttls);
    const peer = kind === 'etcd' ? await electionSystem(server, ttl) : k8sSystem(server, ttl, kind);
    const base = await measure(server, peer, ttl, followers, ttls);
    const unit = kind === 'postgres' ? 'xact/follower/TTL' : kind === 'mysql' ? 'statements/follower/TTL' : kind === 'redis' ? 'requests/follower/TTL' : 'grpc msgs/follower/TTL';
    rec.add({
      figure: 'followers',
      store: kind,
      label: `${followers} idle followers`,
      unit,
      leasehold: { median: lh.perTtl, p90: lh.perTtl, n: 1 },
      baselineName: peer.name,
      baseline: { median: base.perTtl, p90: base.perTtl, n: 1 },
      extra: { 'leader/TTL': lh.leaderPerTtl, 'baseline leader/TTL': base.leaderPerTtl },
    });
  } finally {
    await server.stop();
  }
}
