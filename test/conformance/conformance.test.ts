/**
 * One conformance suite, run against every store (filter with LEASEHOLD_TEST_STORES). It talks
 * to the real servers; each store gets its own namespace (schema, file or key prefix).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { newNonce } from '../../src/core/identity.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError, LeaseLostError, NotAcquiredError, StoreUnavailableError } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import type { ClaimResult, LeaseStore } from '../../src/backends/store.js';
import { countingStore, downUrl, makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';

const contenderJs = fileURLToPath(new URL('../fixtures/contender.js', import.meta.url));
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

async function contend(store: LeaseStore, name: string, holder: string, ttlMs: number, nonce = newNonce()): Promise<ClaimResult & { nonce: string }> {
  const [r] = await store.claim([{ name, holder, ttlMs, expect: null, nextNonce: nonce }]);
  return { ...r!, nonce };
}

async function renew(store: LeaseStore, name: string, holder: string, ttlMs: number, expect: string[], next = newNonce()): Promise<ClaimResult & { nonce: string }> {
  const [r] = await store.claim([{ name, holder, ttlMs, expect, nextNonce: next }]);
  return { ...r!, nonce: next };
}

function tokenOf(r: ClaimResult): bigint {
  assert.ok(r.outcome === 'acquired' || r.outcome === 'renewed', `expected a granted claim, got ${r.outcome}`);
  return r.token;
}

const FAKETIME_LIB = ['/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1', '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1'].find((p) => existsSync(p));

function lyingClockSkip(kind: StoreKind): string | undefined {
  if (FAKETIME_LIB === undefined) return 'libfaketime is not installed (Debian package faketime)';
  if (kind === 'sqlite') return "SQLite's store clock is each process's own wall clock (it is embedded): a process with a faked clock judges expiry by it";
  return undefined;
}

type ContenderEvent = { event: string; token?: string };

/** Starts test/fixtures/contender.js with a faked wall clock (monotonic left real). */
async function runContender(
  url: string,
  name: string,
  args: string[],
  offset: string,
  until: (e: ContenderEvent) => boolean,
): Promise<{ child: ReturnType<typeof spawn>; events: ContenderEvent[] }> {
  const child = spawn(process.execPath, [contenderJs, url, name, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, LD_PRELOAD: FAKETIME_LIB, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: '1' },
  });
  const events: ContenderEvent[] = [];
  let buf = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`contender under faketime ${offset} never got there: ${JSON.stringify(events)}`)), 20_000);
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const e = JSON.parse(buf.slice(0, i)) as ContenderEvent;
        buf = buf.slice(i + 1);
        events.push(e);
        if (until(e)) {
          clearTimeout(timer);
          resolve();
        }
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`contender exited ${code} early`));
    });
  });
  return { child, events };
}

/** etcd grants whole seconds with a 2s floor; the others honour milliseconds. */
function shortTtl(kind: StoreKind): number {
  return kind === 'etcd' ? 2000 : 800;
}

for (const kind of selectedStores()) {
  void describe(`conformance: ${kind}`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      await t?.cleanup();
    });

    void it('of many concurrent contenders for a free lease, exactly one acquires', async () => {
      const name = uniq('race');
      const stores = [t.store, ...(await Promise.all([1, 2, 3].map(() => t.open())))];
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => contend(stores[i % stores.length]!, name, `holder-${i}`, 5000)),
      );
      const won = results.filter((r) => r.outcome === 'acquired');
      assert.equal(won.length, 1, `winners: ${won.map((w) => w.holder).join(', ')}`);
      for (const r of results) if (r.outcome !== 'acquired') assert.equal(r.outcome, 'busy');
    });

    void it('real processes contending: terms never overlap and tokens strictly increase', async () => {
      const name = uniq('procs');
      const procs = 4;
      const terms = 3;
      const events: { event: string; token?: string; pid: number; at: number }[] = [];
      await Promise.all(
        Array.from({ length: procs }, () =>
          new Promise<void>((resolve, reject) => {
            const child = spawn(process.execPath, [contenderJs, t.url, name, String(terms), '120', '5000'], { stdio: ['ignore', 'pipe', 'inherit'] });
            let buf = '';
            child.stdout.on('data', (d: Buffer) => {
              buf += d.toString();
              let i;
              while ((i = buf.indexOf('\n')) >= 0) {
                events.push(JSON.parse(buf.slice(0, i)) as (typeof events)[number]);
                buf = buf.slice(i + 1);
              }
            });
            child.on('error', reject);
            child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`contender exited ${code}`))));
          }),
        ),
      );
      assert.equal(events.filter((e) => e.event === 'lost').length, 0, 'no term was lost');
      const acquired = events.filter((e) => e.event === 'acquired');
      assert.equal(acquired.length, procs * terms);
      const tokens = acquired.map((e) => BigInt(e.token!));
      assert.equal(new Set(tokens.map(String)).size, tokens.length, 'every term has its own token');
      // In token order, each term begins only after the previous one stopped believing it led.
      const byToken = [...acquired].sort((a, b) => (BigInt(a.token!) < BigInt(b.token!) ? -1 : 1));
      for (let i = 1; i < byToken.length; i++) {
        const prev = events.find((e) => e.event === 'releasing' && e.token === byToken[i - 1]!.token)!;
        assert.ok(byToken[i]!.at >= prev.at, `term ${byToken[i]!.token} began before term ${prev.token} ended`);
        assert.ok(byToken[i]!.at >= byToken[i - 1]!.at, 'tokens follow acquisition order');
      }
      const hist = (await t.store.history({ name })).filter((h) => h.event === 'acquired' || h.event === 'takeover');
      assert.equal(hist.length, procs * terms);
      for (let i = 1; i < hist.length; i++) assert.ok(hist[i]!.token > hist[i - 1]!.token, 'history tokens strictly increase');
    });

    void it('renewals keep the token; takeover after expiry, release and revocation each issue a larger one', async () => {
      const name = uniq('tokens');
      const ttl = shortTtl(kind);
      const a = await contend(t.store, name, 'A', ttl);
      const t1 = tokenOf(a);
      const a2 = await renew(t.store, name, 'A', ttl, [a.nonce]);
      assert.equal(a2.outcome, 'renewed');
      assert.equal(tokenOf(a2), t1, 'a renewal keeps the token');

      const busy = await contend(t.store, name, 'B', ttl);
      assert.equal(busy.outcome, 'busy');
      assert.equal(busy.holder, 'A');
      const wait = busy.expiresAtMs! - busy.storeNowMs;
      assert.ok(wait > 0 && wait <= ttl + 50, `remaining ${wait}ms is within the ttl`);
      // etcd reports the time left in whole seconds, rounded down.
      await sleep(wait + (kind === 'etcd' ? 1200 : 250));
      const b = await contend(t.store, name, 'B', 10_000);
      const t2 = tokenOf(b);
      assert.ok(t2 > t1, `takeover after expiry: ${t2} > ${t1}`);
      const stale = await renew(t.store, name, 'A', ttl, [a2.nonce]);
      assert.equal(stale.outcome, 'lost', 'the expired holder cannot renew');
      if (stale.outcome === 'lost') assert.equal(stale.reason, 'superseded');

      assert.equal(await t.store.release({ name, holder: 'B', expect: [b.nonce] }), true);
      const c = await contend(t.store, name, 'C', 10_000);
      const t3 = tokenOf(c);
      assert.ok(t3 > t2, `after a clean release: ${t3} > ${t2}`);

      const rv = await t.store.revoke(name, 'conformance test');
      assert.equal(rv.revoked, true);
      assert.equal(rv.previousHolder, 'C');
      const lostC = await renew(t.store, name, 'C', 10_000, [c.nonce]);
      assert.equal(lostC.outcome, 'lost');
      if (lostC.outcome === 'lost') assert.equal(lostC.reason, 'revoked');
      const d = await contend(t.store, name, 'D', 10_000);
      const t4 = tokenOf(d);
      assert.ok(t4 > t3, `after revocation: ${t4} > ${t3}`);

      const hist = await t.store.history({ name });
      assert.deepEqual(
        hist.map((h) => h.event),
        ['acquired', 'takeover', 'released', 'acquired', 'revoked', 'acquired'],
      );
      assert.equal(hist[4]!.detail, 'conformance test');
      for (let i = 1; i < hist.length; i++) assert.ok(hist[i]!.atMs >= hist[i - 1]!.atMs - 5, 'history is in store-time order');
      const [info] = await t.store.list({ name });
      assert.equal(info?.holder, 'D');
      assert.equal(info?.token, t4);
      assert.equal(info?.state, 'held');
    });

    void it('only the holder can renew or release', async () => {
      const name = uniq('holder');
      const a = await contend(t.store, name, 'A', 10_000);
      const imposter = await renew(t.store, name, 'B', 10_000, [a.nonce]);
      assert.equal(imposter.outcome, 'lost');
      if (imposter.outcome === 'lost') assert.equal(imposter.reason, 'superseded');
      assert.equal(await t.store.release({ name, holder: 'B', expect: [a.nonce] }), false, 'another holder cannot release');
      assert.equal(await t.store.release({ name, holder: 'A', expect: ['not-the-nonce'] }), false, 'a stale nonce cannot release');
      const [info] = await t.store.list({ name });
      assert.equal(info?.holder, 'A', 'the lease is still held by A');
      assert.equal(await t.store.release({ name, holder: 'A', expect: [a.nonce] }), true);
    });

    void it('two clones of one term (same holder, same nonce) cannot both renew', async () => {
      const name = uniq('clones');
      const a = await contend(t.store, name, 'snapshot-holder', 10_000);
      const [one, two] = await Promise.all([
        renew(t.store, name, 'snapshot-holder', 10_000, [a.nonce]),
        renew(await t.open(), name, 'snapshot-holder', 10_000, [a.nonce]),
      ]);
      const outcomes = [one.outcome, two.outcome].sort();
      assert.deepEqual(outcomes, ['lost', 'renewed']);
      const loser = one.outcome === 'lost' ? one : two;
      const winner = one.outcome === 'renewed' ? one : two;
      if (loser.outcome === 'lost') assert.equal(loser.reason, 'cloned');
      // The conflict ended the term for both: the winner's next renewal is refused too...
      const next = await renew(t.store, name, 'snapshot-holder', 10_000, [winner.nonce]);
      assert.equal(next.outcome, 'lost');
      if (next.outcome === 'lost') assert.equal(next.reason, 'cloned');
      assert.equal((await renew(t.store, name, 'snapshot-holder', 10_000, [a.nonce, loser.nonce])).outcome, 'lost');
      // ...and whoever contends next (under a fresh identity) gets a larger token.
      const fresh = await contend(t.store, name, 'fresh-holder', 10_000);
      assert.ok(tokenOf(fresh) > tokenOf(a), 'a new term after the conflict has a larger token');
      const events = (await t.store.history({ name })).map((h) => h.event);
      assert.deepEqual(events, ['acquired', 'conflict', 'acquired']);
    });

    void it('a renewal whose answer was lost can be retried with both nonces', async () => {
      const name = uniq('retry');
      const a = await contend(t.store, name, 'A', 10_000);
      const landed = await renew(t.store, name, 'A', 10_000, [a.nonce]);
      assert.equal(landed.outcome, 'renewed');
      // The process never saw that answer: it presents the confirmed and the unanswered nonce.
      const retry = await renew(t.store, name, 'A', 10_000, [a.nonce, landed.nonce]);
      assert.equal(retry.outcome, 'renewed');
      assert.equal(tokenOf(retry), tokenOf(a));
    });

    void it('a batch claim answers every lease, in request order, in one call', async () => {
      const names = Array.from({ length: 50 }, (_, i) => uniq(`batch${i}`));
      const first = await t.store.claim(names.map((name) => ({ name, holder: 'H', ttlMs: 10_000, expect: null, nextNonce: newNonce() })));
      assert.deepEqual(
        first.map((r) => r.name),
        names,
      );
      assert.ok(first.every((r) => r.outcome === 'acquired'));
      await assert.rejects(
        t.store.claim([
          { name: names[0]!, holder: 'H', ttlMs: 1000, expect: null, nextNonce: newNonce() },
          { name: names[0]!, holder: 'H', ttlMs: 1000, expect: null, nextNonce: newNonce() },
        ]),
        ConfigError,
      );
    });

    void it('the engine: a revoked holder stands down, its signal aborts with a typed reason, and the follower takes over', async () => {
      const name = uniq('engine');
      const ttl = kind === 'etcd' ? 3000 : 1500;
      const a = new Leasehold({ store: t.store });
      const b = new Leasehold({ store: await t.open() });
      try {
        const la = a.lease(name, { ttl });
        const lb = b.lease(name, { ttl });
        const term = await la.acquire({ wait: false });
        assert.equal(la.token, term.token);
        await assert.rejects(lb.acquire({ wait: false }), NotAcquiredError);
        await t.store.revoke(name, 'operator test');
        // The holder learns at its next renewal (within one renew interval).
        await new Promise<void>((resolve) => term.signal.addEventListener('abort', () => resolve(), { once: true }));
        assert.ok(term.signal.reason instanceof LeaseLostError);
        assert.equal((term.signal.reason as LeaseLostError).reason, 'revoked');
        assert.equal(la.isLeader, false);
        assert.throws(() => la.token, /does not hold/);
        const next = await lb.acquire({ wait: '20s' });
        assert.ok(next.token > term.token);
        await lb.release();
      } finally {
        await a.close();
        await b.close();
      }
    });

    void it('the engine: a clean release wakes a waiting follower long before the expiry would', async () => {
      const name = uniq('handover');
      const a = new Leasehold({ store: t.store });
      const b = new Leasehold({ store: await t.open() });
      try {
        const la = a.lease(name, { ttl: 30_000 });
        const lb = b.lease(name, { ttl: 30_000 });
        const first = await la.acquire();
        const following = lb.acquire({ wait: '20s' });
        await sleep(300); // the follower is asleep until the 30s expiry or a notification
        const releasedAt = performance.now();
        await la.release();
        const second = await following;
        const handoverMs = performance.now() - releasedAt;
        assert.ok(second.token > first.token);
        // Without the notification the follower would sleep ~30s; 20s is a generous bound.
        assert.ok(handoverMs < 20_000, `handover took ${handoverMs}ms`);
        process.stdout.write(`# ${kind}: clean handover ${handoverMs.toFixed(1)}ms\n`);
        await lb.release();
      } finally {
        await a.close();
        await b.close();
      }
    });

    void it('the engine: idle followers stay within about one request per TTL each', async () => {
      const name = uniq('budget');
      const ttl = kind === 'etcd' ? 2000 : 1000;
      const leader = new Leasehold({ store: t.store });
      const followers = await Promise.all(Array.from({ length: 5 }, async () => countingStore(await t.open())));
      const clients = followers.map((store) => new Leasehold({ store }));
      try {
        await leader.lease(name, { ttl }).acquire();
        const ac = new AbortController();
        const waits = clients.map((c) => c.lease(name, { ttl }).acquire({ signal: ac.signal }).catch(() => undefined));
        const windowMs = ttl * 4;
        await sleep(windowMs);
        ac.abort();
        await Promise.all(waits);
        const perFollower = followers.map((f) => f.calls);
        process.stdout.write(`# ${kind}: follower claims over ${windowMs}ms at ttl ${ttl}ms: ${perFollower.join(',')}\n`);
        // About one per TTL (woken at each reported expiry) plus the first attempt; never a loop.
        for (const n of perFollower) assert.ok(n <= 2 * (windowMs / ttl) + 1, `a follower made ${n} claims in ${windowMs}ms`);
      } finally {
        await Promise.all(clients.map((c) => c.close()));
        await leader.close();
      }
    });

    const lying = lyingClockSkip(kind);
    void it("expiry follows the store's clock even when a client's wall clock lies (libfaketime)", lying === undefined ? {} : { skip: lying }, async () => {
      const name = uniq('faketime');
      const ttl = shortTtl(kind);
      // A contender whose clock is a day in the past acquires and holds: by its own clock the
      // term would last a day longer; by the store's it ends after the ttl.
      const holder = await runContender(t.url, name, ['1', '60000', String(ttl)], '-1d', (e) => e.event === 'acquired');
      try {
        const busy = await contend(t.store, name, 'real-clock', ttl);
        assert.equal(busy.outcome, 'busy');
        const remaining = busy.expiresAtMs! - busy.storeNowMs;
        assert.ok(remaining > 0 && remaining <= ttl + 50, `the store reports ${remaining}ms left, within the ttl, whatever the holder's clock says`);
        holder.child.kill('SIGSTOP'); // stop it renewing: the term must end by the store's clock
        // By the holder's clock the term has a day to run; by the store's it ends within about
        // one ttl of its last renewal (etcd adds whole-second rounding and its expiry sweep).
        const stoppedAt = performance.now();
        const bound = ttl * 3 + 2000;
        let taken = await contend(t.store, name, 'real-clock', 10_000);
        while (taken.outcome !== 'acquired' && performance.now() - stoppedAt < bound) {
          await sleep(100);
          taken = await contend(t.store, name, 'real-clock', 10_000);
        }
        assert.equal(taken.outcome, 'acquired', `the lease expired by the store clock within ${bound}ms, not by the holder's clock`);
      } finally {
        holder.child.kill('SIGKILL');
      }
      // A follower whose clock is an hour ahead must not think the live term above has expired.
      const follower = await runContender(t.url, name, ['1', '0', String(ttl)], '+1h', (e) => e.event === 'ready');
      try {
        await sleep(ttl + 500);
        assert.equal(follower.events.filter((e) => e.event === 'acquired').length, 0, 'a fast clock does not steal a live lease');
        const [info] = await t.store.list({ name });
        assert.equal(info?.holder, 'real-clock');
      } finally {
        follower.child.kill('SIGKILL');
      }
    });

    const down = downUrl(kind);
    void it(
      'a store that is down gives a typed, retryable error, and nobody believes it leads',
      down === undefined ? { skip: 'SQLite is embedded: there is no server to be down' } : {},
      async () => {
        const started = performance.now();
        let store: LeaseStore | undefined;
        try {
          store = await openStore(down!);
        } catch (err) {
          assert.ok(err instanceof StoreUnavailableError, `opening a down store: ${String(err)}`);
          assert.equal(err.retryable, true);
          return;
        }
        try {
          await assert.rejects(contend(store, 'x', 'h', 1000), (err: unknown) => err instanceof StoreUnavailableError && err.retryable);
          const lh = new Leasehold({ store });
          const lease = lh.lease('x', { ttl: 1000 });
          await assert.rejects(lease.acquire({ wait: false }), StoreUnavailableError);
          await assert.rejects(lease.acquire({ wait: '1500ms' }), NotAcquiredError);
          assert.equal(lease.isLeader, false);
          assert.throws(() => lease.token, /does not hold/);
          await lh.close();
          assert.ok(performance.now() - started < 15_000, 'calls fail rather than hang');
        } finally {
          await store.close();
        }
      },
    );
  });
}
