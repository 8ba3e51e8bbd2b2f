/**
 * `leasehold/metrics` on a real prom-client Registry and `leasehold/metrics/otel` on a meter:
 * leadership, token, terms won and lost by reason, renewal latency, jeopardy, suspicions and
 * fenced writes, from a real SQLite store and its real fence.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Registry } from 'prom-client';
import { Leasehold } from '../../src/core/leasehold.js';
import { FencedError, StoreUnavailableError } from '../../src/core/errors.js';
import { registerMetrics } from '../../src/metrics/index.js';
import { registerOtelMetrics, type MeterLike } from '../../src/metrics/otel.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { createSqliteFenceTable, fencedWriteSync } from '../../src/backends/sqlite/fence.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';
import { until } from '../cli/helpers.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

async function value(registry: Registry, metric: string, labels: Record<string, string>): Promise<number | undefined> {
  const m = registry.getSingleMetric(metric);
  assert.ok(m !== undefined, `${metric} is registered`);
  const got = await m.get();
  return got.values.find((v) => Object.entries(labels).every(([k, x]) => String(v.labels[k]) === x))?.value;
}

/** A store whose claims can be made to fail (outcome unknown), to put a holder in jeopardy. */
function breakable(inner: LeaseStore): LeaseStore & { broken: boolean } {
  const state = { broken: false };
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'broken') return state.broken;
      if (prop === 'claim') {
        return (...a: Parameters<LeaseStore['claim']>) =>
          state.broken ? Promise.reject(new StoreUnavailableError('injected: the claim was not answered')) : target.claim(...a);
      }
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...x: unknown[]) => unknown).bind(target) : v;
    },
    set(_t, prop, v) {
      if (prop === 'broken') {
        state.broken = v as boolean;
        return true;
      }
      return false;
    },
  }) as LeaseStore & { broken: boolean };
}

void describe('metrics (prom-client, sqlite)', () => {
  let ts: TestStore;
  before(async () => {
    ts = await makeTestStore('sqlite');
  });
  after(async () => {
    await ts.cleanup();
  });

  void it('leader, token, terms won and lost by reason, renewal latency, suspicions', async () => {
    const lh = new Leasehold({ store: await ts.open() });
    const registry = new Registry();
    const metrics = registerMetrics(lh, { registry });
    const name = uniq('job');
    try {
      // Created after registration: instrumented without being named.
      const lease = lh.lease(name, { ttl: 600 });
      assert.equal(await value(registry, 'leasehold_leader', { lease: name }), 0, 'a follower reads 0');
      const term = await lease.acquire();
      assert.equal(await value(registry, 'leasehold_leader', { lease: name }), 1);
      assert.equal(await value(registry, 'leasehold_token', { lease: name }), Number(term.token));
      assert.equal(await value(registry, 'leasehold_terms_won_total', { lease: name }), 1);
      // The engine's renewal timer is unref'd (a lease never keeps a process alive by itself), and a
      // SQLite store holds no socket: a ref'd timer keeps this test's process running while it waits
      // (CI: "Promise resolution is still pending but the event loop has already resolved"). Its bound,
      // 10 TTLs, is many renewals (one per TTL/3): reached only if renewals stopped.
      let keep: NodeJS.Timeout | undefined;
      const renewed = new Promise<void>((resolve, reject) => {
        keep = setTimeout(() => reject(new Error('no renewal within 10 TTLs')), 6000);
        lease.once('renewed', () => resolve());
      });
      await renewed.finally(() => clearTimeout(keep));
      const hist = await registry.getSingleMetric('leasehold_renewal_seconds')!.get();
      const series = (suffix: string): { value: number } | undefined =>
        hist.values.find((v) => (v as { metricName?: string }).metricName === `leasehold_renewal_seconds_${suffix}` && v.labels['lease'] === name);
      const count = series('count');
      const sum = series('sum');
      assert.ok(count !== undefined && count.value >= 1, 'a renewal was timed');
      assert.ok(sum !== undefined && sum.value >= 0 && sum.value <= 0.6 * count.value, `renewal seconds within a TTL each: ${sum?.value} over ${count.value}`);
      await lease.release();
      assert.equal(await value(registry, 'leasehold_leader', { lease: name }), 0);
      assert.equal(await value(registry, 'leasehold_token', { lease: name }), undefined, 'no token while not holding');
      assert.equal(await value(registry, 'leasehold_terms_lost_total', { lease: name, reason: 'released' }), 1);

      await lease.acquire();
      lh.suspect('manual', 'test');
      assert.equal(await value(registry, 'leasehold_suspicions_total', { detector: 'manual' }), 1);
      assert.equal(await value(registry, 'leasehold_terms_lost_total', { lease: name, reason: 'suspended' }), 1);
      const text = await registry.metrics();
      assert.match(text, new RegExp(`leasehold_terms_won_total\\{lease="${name}"\\} 2`));
      await lease.close();
      // A closed lease's gauges disappear.
      assert.equal(await value(registry, 'leasehold_leader', { lease: name }), undefined);
    } finally {
      metrics.close();
      await lh.close();
    }
    assert.equal(registry.getSingleMetric('leasehold_leader'), undefined, 'close() unregisters');
    assert.ok(!Object.prototype.hasOwnProperty.call(lh, 'lease'), 'close() puts leasehold.lease back');
  });

  void it('jeopardy: a renewal whose answer never came is counted', async () => {
    const store = breakable(await ts.open());
    const lh = new Leasehold({ store });
    const registry = new Registry();
    const metrics = registerMetrics(lh, { registry });
    const name = uniq('shaky');
    try {
      const lease = lh.lease(name, { ttl: 900 });
      await lease.acquire();
      store.broken = true;
      await until('the lease is in jeopardy', () => lease.state === 'jeopardy', 5000);
      assert.equal(await value(registry, 'leasehold_jeopardy_total', { lease: name }), 1);
      assert.equal(await value(registry, 'leasehold_leader', { lease: name }), 0, 'in jeopardy is not leading');
      store.broken = false;
      await until('the term recovered or ended', () => lease.state !== 'jeopardy', 5000);
    } finally {
      metrics.close();
      await lh.close();
    }
  });

  void it('fenced writes refused by the SQLite fence are counted by resource', async () => {
    const lh = new Leasehold({ store: await ts.open() });
    const registry = new Registry();
    const metrics = registerMetrics(lh, { registry });
    const db = (ts.store as SqliteStore).database;
    createSqliteFenceTable(db);
    const resource = uniq('ledger');
    try {
      fencedWriteSync(db, { resource, token: 5n }, () => 'ok');
      await assert.rejects(
        metrics.countFenced(() => fencedWriteSync(db, { resource, token: 4n }, () => 'stale')),
        (e: unknown) => e instanceof FencedError,
      );
      assert.equal(await metrics.countFenced(() => fencedWriteSync(db, { resource, token: 6n }, () => 'newer')), 'newer');
      assert.equal(metrics.fenced(new Error('not a fence')), false);
      assert.equal(await value(registry, 'leasehold_fenced_writes_total', { resource }), 1);
    } finally {
      metrics.close();
      await lh.close();
    }
  });

  void it('OpenTelemetry: the same events on a meter', async () => {
    const recorded: Array<[string, number, Record<string, string> | undefined]> = [];
    const callbacks = new Map<string, Array<(r: { observe(v: number, a?: Record<string, string>): void }) => void>>();
    const meter: MeterLike = {
      createCounter: (n) => ({ add: (v, a) => recorded.push([n, v, a]) }),
      createHistogram: (n) => ({ record: (v, a) => recorded.push([n, v, a]) }),
      createObservableGauge: (n) => ({
        addCallback: (cb) => callbacks.set(n, [...(callbacks.get(n) ?? []), cb]),
        removeCallback: (cb) => callbacks.set(n, (callbacks.get(n) ?? []).filter((x) => x !== cb)),
      }),
    };
    const observeGauge = (n: string): Array<[number, Record<string, string> | undefined]> => {
      const out: Array<[number, Record<string, string> | undefined]> = [];
      for (const cb of callbacks.get(n) ?? []) cb({ observe: (v, a) => out.push([v, a]) });
      return out;
    };
    const lh = new Leasehold({ store: await ts.open() });
    const metrics = registerOtelMetrics(lh, { meter });
    const name = uniq('otel');
    try {
      const term = await lh.lease(name, { ttl: 600 }).acquire();
      assert.deepEqual(observeGauge('leasehold.leader'), [[1, { lease: name }]]);
      assert.deepEqual(observeGauge('leasehold.token'), [[Number(term.token), { lease: name }]]);
      assert.deepEqual(recorded.filter(([n]) => n === 'leasehold.terms_won'), [['leasehold.terms_won', 1, { lease: name }]]);
    } finally {
      metrics.close();
      await lh.close();
    }
    assert.deepEqual(observeGauge('leasehold.leader'), [], 'close() removes the callbacks');
  });
});
