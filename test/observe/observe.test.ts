/**
 * Watching a lease without contending: observe() reports the holder, each new term (with its
 * larger token), a revocation, and never claims anything; its reads are bounded like a
 * follower's. Against every selected store.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import { observe, LeaseWatcher, type LeaseChange } from '../../src/observe/index.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { ConfigError } from '../../src/core/errors.js';
import { Sandbox, until } from '../cli/helpers.js';
import { countingStore, makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Counts every store call an observer makes, by method. */
function spyStore(inner: LeaseStore): LeaseStore & { counts: Record<string, number> } {
  const counts: Record<string, number> = {};
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'counts') return counts;
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        counts[String(prop)] = (counts[String(prop)] ?? 0) + 1;
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as LeaseStore & { counts: Record<string, number> };
}

async function next(it: AsyncIterator<LeaseChange>, what: string, ms = 10_000): Promise<LeaseChange> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const r = await Promise.race([
      it.next(),
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no change within ${ms}ms: expected ${what}`)), ms))),
    ]);
    assert.ok(r.done !== true, `the observer ended while waiting for ${what}`);
    return r.value;
  } finally {
    clearTimeout(timer);
  }
}

void describe('observe: bad input', () => {
  void it('is a ConfigError that says what to pass', async () => {
    const ts = await makeTestStore('sqlite');
    try {
      assert.throws(() => new LeaseWatcher(ts.store, { maxIntervalMs: -1 }), (e: unknown) => e instanceof ConfigError && /maxIntervalMs must be a positive/.test(e.message));
      assert.throws(() => new LeaseWatcher(ts.store, { heldRefresh: 2 }), ConfigError);
      assert.throws(() => observe(ts.store, ''), ConfigError);
      assert.throws(() => observe({} as LeaseStore, 'x'), /needs a Leasehold or a LeaseStore/);
    } finally {
      await ts.cleanup();
    }
  });
});

for (const kind of selectedStores()) {
  void describe(`observe (${kind})`, () => {
    let ts: TestStore;
    before(async () => {
      ts = await makeTestStore(kind);
    });
    after(async () => {
      await ts.cleanup();
    });

    void it('follows holder and token through a release, a takeover and a revocation, without ever claiming', async () => {
      const name = uniq('observed');
      const a = new Leasehold({ store: await ts.open() });
      const b = new Leasehold({ store: await ts.open() });
      const watched = spyStore(await ts.open());
      const stop = new AbortController();
      try {
        const la = a.lease(name, { ttl: 2000 });
        const t1 = await la.acquire();
        const obs = observe(watched, name, { signal: stop.signal });
        const it = obs[Symbol.asyncIterator]();
        const first = await next(it, 'the initial reading');
        assert.equal(first.kind, 'initial');
        assert.equal(first.lease.holder, a.holder);
        assert.equal(first.lease.token, t1.token);
        assert.equal(first.lease.state, 'held');
        assert.ok(first.lease.expiresAtMs! > first.lease.storeNowMs, 'expiry is in the future by the store clock');

        // b waits; a releases; b takes it: the observer sees the new term with a larger token.
        const lb = b.lease(name, { ttl: 2000 });
        const bTerm = lb.acquire();
        await la.release();
        const t2 = await bTerm;
        let c = await next(it, 'the release or the new term');
        if (c.kind === 'freed') c = await next(it, 'the new term');
        assert.equal(c.kind, 'new-term');
        assert.equal(c.lease.holder, b.holder);
        assert.equal(c.lease.token, t2.token);
        assert.ok(t2.token > t1.token);

        // An operator revokes: the lease is freed.
        const rev = await ts.store.revoke(name, 'observer test');
        assert.equal(rev.revoked, true);
        c = await next(it, 'the revocation');
        assert.equal(c.kind, 'freed');
        assert.equal(c.lease.holder, null);
        assert.equal(obs.lease?.state, 'free');

        assert.equal(watched.counts['claim'] ?? 0, 0, 'an observer never claims');
        assert.equal(watched.counts['release'] ?? 0, 0);
        assert.equal(watched.counts['revoke'] ?? 0, 0);
        stop.abort();
        const end = await it.next();
        assert.equal(end.done, true, 'aborting the signal ends the iteration');
      } finally {
        stop.abort();
        await a.close();
        await b.close();
      }
    });

    void it("sees a killed holder's term expire and the follower's takeover", async () => {
      const name = uniq('expiring');
      const sb = new Sandbox('observe');
      const follower = new Leasehold({ store: await ts.open() });
      const watcher = new LeaseWatcher(await ts.open(), { name });
      const changes: LeaseChange[] = [];
      watcher.on('change', (c) => changes.push(c));
      const runner = sb.start(['run', '--name', name, '--ttl', '1s', '--store', ts.url, '--', 'sleep', '60']);
      try {
        await watcher.start();
        await until('the runner holds the lease', () => changes.some((c) => c.lease.state === 'held'));
        const t1 = changes.find((c) => c.lease.state === 'held')!.lease.token;
        const waiting = follower.lease(name, { ttl: 1000 }).acquire();
        runner.proc.kill('SIGKILL');
        const t2 = await waiting;
        await until('the takeover is observed', () => changes.some((c) => c.kind === 'new-term' && c.lease.token === t2.token));
        const term = changes.find((c) => c.kind === 'new-term' && c.lease.token === t2.token)!;
        assert.equal(term.lease.holder, follower.holder);
        assert.ok(t2.token > t1);
      } finally {
        runner.proc.kill('SIGKILL');
        await runner.done;
        await watcher.close();
        await follower.close();
        sb.cleanup();
      }
    });

    void it('reads a renewing lease about once per TTL, and claims nothing', async (t) => {
      const name = uniq('quiet');
      const holder = new Leasehold({ store: await ts.open() });
      const counted = countingStore(spyStore(await ts.open()));
      const watcher = new LeaseWatcher(counted, { name });
      try {
        await holder.lease(name, { ttl: 500 }).acquire();
        await watcher.start();
        await sleep(2000);
        t.diagnostic(`reads in 4 TTLs of a renewing holder: ${JSON.stringify(watcher.reads)}`);
        // Reads happen at the store-reported expiry: 2/3 to 1 TTL apart while the holder renews.
        // 4 TTLs: about 5 reads; 12 would mean a loop faster than the holder's own renewals.
        assert.ok(watcher.reads.total <= 12, `reads in 4 TTLs: ${JSON.stringify(watcher.reads)}`);
        assert.ok(watcher.reads.total >= 2, 'it does keep reading');
        assert.equal(counted.calls, 0, 'no claim');
      } finally {
        await watcher.close();
        await holder.close();
      }
    });

    void it('accepts a Leasehold as its source, and keeps going through a failed read', async () => {
      const name = uniq('source');
      const lh = new Leasehold({ store: await ts.open() });
      const store = await ts.open();
      let fail = 1;
      const flaky = new Proxy(store, {
        get(target, prop) {
          const v: unknown = Reflect.get(target, prop, target);
          if (prop === 'list') {
            return (...args: Parameters<LeaseStore['list']>) => (fail-- > 0 ? Promise.reject(new Error('injected read failure')) : target.list(...args));
          }
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        },
      });
      const errors: unknown[] = [];
      const obs = observe({ store: flaky }, name);
      obs.on('store-error', (e) => errors.push(e));
      try {
        const it = obs[Symbol.asyncIterator]();
        const t = await lh.lease(name, { ttl: 2000 }).acquire();
        const c = await next(it, 'the lease after a failed first read');
        assert.equal(c.lease.token, t.token);
        assert.equal(errors.length, 1);
        assert.match(String(errors[0]), /injected read failure/);
        const viaLeasehold = observe(lh, name);
        const c2 = await next(viaLeasehold[Symbol.asyncIterator](), 'a reading through the Leasehold');
        assert.equal(c2.lease.holder, lh.holder);
        await viaLeasehold.close();
      } finally {
        await obs.close();
        await lh.close();
      }
    });
  });
}
