/**
 * Benchmarks, printed as ratios against a baseline measured in the same run (never asserted).
 *
 *   npm run bench -- [--stores postgres,sqlite,redis,etcd] [--handovers 25] [--leases 10000]
 *
 * 1. Clean handover: a holder releases while a follower waits; time from release() to the
 *    follower's acquire resolving. Baseline: the store's own round trip (a claim of a free lease
 *    by a fresh holder, which is the least a handover can cost).
 * 2. Bulk renewal: one process holds N leases; the renewal scheduler's round trips per renew
 *    interval and the wall time of one N-lease claim, against one single-lease claim.
 * 3. Follower load: 50 idle followers for 4 TTLs; claims per follower per TTL.
 */
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../src/core/leasehold.js';
import { newNonce } from '../src/core/identity.js';
import type { LeaseStore } from '../src/backends/store.js';
import { countingStore, makeTestStore, type StoreKind } from '../test/helpers/stores.js';

const { values } = parseArgs({
  options: {
    stores: { type: 'string', default: 'postgres,sqlite,redis,etcd' },
    handovers: { type: 'string', default: '25' },
    leases: { type: 'string', default: '10000' },
    followers: { type: 'string', default: '50' },
  },
});
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const p = (xs: number[], q: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const fmt = (n: number): string => n.toFixed(2);

async function baselineRtt(store: LeaseStore, n = 30): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const name = `rtt-${randomBytes(4).toString('hex')}`;
    const t0 = performance.now();
    await store.claim([{ name, holder: 'bench', ttlMs: 1000, expect: null, nextNonce: newNonce() }]);
    times.push(performance.now() - t0);
  }
  return median(times);
}

async function handover(kind: StoreKind, count: number): Promise<void> {
  const t = await makeTestStore(kind);
  try {
    const rtt = await baselineRtt(t.store);
    const a = new Leasehold({ store: t.store });
    const b = new Leasehold({ store: await t.open() });
    const name = `handover-${randomBytes(4).toString('hex')}`;
    const times: number[] = [];
    let holder = a;
    let waiter = b;
    let current = holder.lease(name, { ttl: 30_000 });
    await current.acquire();
    for (let i = 0; i < count; i++) {
      const next = waiter.lease(name, { ttl: 30_000 });
      const acquired = next.acquire({ wait: '60s' });
      await sleep(50); // the waiter is asleep until the 30s expiry or a notification
      const t0 = performance.now();
      await current.release();
      await acquired;
      times.push(performance.now() - t0);
      current = next;
      [holder, waiter] = [waiter, holder];
    }
    await current.release();
    await a.close();
    await b.close();
    const med = median(times);
    console.log(
      `${kind.padEnd(8)} clean handover: median ${fmt(med)}ms, p90 ${fmt(p(times, 0.9))}ms over ${count}; ` +
        `store round trip ${fmt(rtt)}ms; ratio ${fmt(med / rtt)}x a round trip (ttl 30s, so without notification ~30000ms)`,
    );
  } finally {
    await t.cleanup();
  }
}

async function bulkRenewal(kind: StoreKind, n: number): Promise<void> {
  const t = await makeTestStore(kind);
  try {
    const single = await baselineRtt(t.store, 10);
    // One claim carrying every lease, timed alone, before the engine loads the store.
    const batchStart = performance.now();
    await t.store.claim(Array.from({ length: n }, (_, i) => ({ name: `batch-${i}`, holder: 'bench', ttlMs: 1000, expect: null, nextNonce: newNonce() })));
    const batchMs = performance.now() - batchStart;
    const counted = countingStore(t.store);
    const lh = new Leasehold({ store: counted });
    const renewMs = 2000;
    const names = Array.from({ length: n }, (_, i) => `bulk-${i}`);
    // Acquire in batches through the store directly would bypass the engine; acquire via leases.
    const leases = names.map((name) => lh.lease(name, { ttl: renewMs * 3 }));
    const t0 = performance.now();
    for (let i = 0; i < leases.length; i += 500) await Promise.all(leases.slice(i, i + 500).map((l) => l.acquire({ wait: false })));
    const acquireMs = performance.now() - t0;
    const before = counted.calls;
    const reqBefore = counted.requests;
    const windowMs = renewMs * 3;
    await sleep(windowMs);
    const calls = counted.calls - before;
    const renewed = counted.requests - reqBefore;
    const lost = leases.filter((l) => !l.isLeader).length;
    await lh.close();
    console.log(
      `${kind.padEnd(8)} ${n} leases: ${calls} claim round trips in ${windowMs}ms (${fmt(calls / (windowMs / renewMs))} per renew interval), ` +
        `${renewed} lease renewals sent, ${lost} lost; one ${n}-lease claim ${fmt(batchMs)}ms = ${fmt(batchMs / single)}x a 1-lease claim (${fmt(single)}ms); ` +
        `acquiring them one by one took ${fmt(acquireMs)}ms`,
    );
  } finally {
    await t.cleanup();
  }
}

async function followerLoad(kind: StoreKind, count: number): Promise<void> {
  const t = await makeTestStore(kind);
  try {
    const ttl = kind === 'etcd' ? 2000 : 1000;
    const name = `followers-${randomBytes(4).toString('hex')}`;
    const leader = new Leasehold({ store: t.store });
    await leader.lease(name, { ttl }).acquire();
    const shared = countingStore(await t.open());
    const clients = Array.from({ length: count }, () => new Leasehold({ store: shared }));
    const ac = new AbortController();
    const waits = clients.map((c) => c.lease(name, { ttl }).acquire({ signal: ac.signal }).catch(() => undefined));
    await sleep(500);
    const start = shared.calls;
    const windowMs = ttl * 4;
    await sleep(windowMs);
    const calls = shared.calls - start;
    ac.abort();
    await Promise.all(waits);
    await Promise.all(clients.map((c) => c.close()));
    await leader.close();
    console.log(
      `${kind.padEnd(8)} ${count} idle followers: ${calls} claims in ${windowMs}ms = ${fmt(calls / count / (windowMs / ttl))} per follower per TTL ` +
        `(${fmt((calls * 1000) / windowMs)} requests/s in all; budget: about 1 per follower per TTL)`,
    );
  } finally {
    await t.cleanup();
  }
}

const stores = values.stores.split(',').map((s) => s.trim()) as StoreKind[];
if (stores.includes('etcd')) {
  const { ensureEtcd } = (await import(new URL('../../scripts/services/etcd.mjs', import.meta.url).href)) as {
    ensureEtcd(o: object): Promise<{ started: boolean; stop(): Promise<void> }>;
  };
  const etcd = await ensureEtcd({});
  process.on('beforeExit', () => void (etcd.started ? etcd.stop() : undefined));
}
console.log('# clean handover (release -> waiting follower acquired)');
for (const kind of stores) await handover(kind, Number(values.handovers));
console.log('# bulk renewal (one process, many leases)');
for (const kind of stores) await bulkRenewal(kind, kind === 'etcd' ? Math.min(1000, Number(values.leases)) : Number(values.leases));
console.log('# follower load');
for (const kind of stores) await followerLoad(kind, Number(values.followers));
