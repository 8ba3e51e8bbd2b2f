// etcd sessions (src/backends/etcd/session.ts): a tick renews every term of a holder's session
// with one Txn and one keepalive, and stays as safe as the per-term nonce swap it replaced:
// clones, revocations by other processes, abandoned terms, pauses and a raised token floor.
// Real etcd (LEASEHOLD_TEST_ETCD_URL, default 127.0.0.1:2379; `node scripts/services/etcd.mjs start`).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createEtcdStore, type EtcdStore, type Etcd3Like } from '../../src/backends/etcd/index.js';
import type { SessionBook } from '../../src/backends/etcd/session-book.js';
import type { EtcdKeys } from '../../src/backends/etcd/keys.js';
import type { ClaimRequest, ClaimResult } from '../../src/backends/store.js';
import { realClock, type Clock } from '../../src/core/clock.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { deleteEtcdKeys, etcdAdmin, freshEtcdPrefix, TEST_ETCD_URL } from '../helpers/etcd-store.js';

type Counts = Record<'grant' | 'txn' | 'ttl' | 'range' | 'keepalive', number>;

function counting(real: Etcd3Like): { client: Etcd3Like; counts: Counts; order: string[]; reset(): void } {
  const counts: Counts = { grant: 0, txn: 0, ttl: 0, range: 0, keepalive: 0 };
  const order: string[] = [];
  const client: Etcd3Like = {
    kv: {
      txn: (r, o) => (counts.txn++, order.push('txn'), real.kv.txn(r, o)),
      range: (r, o) => (counts.range++, real.kv.range(r, o)),
      deleteRange: (r, o) => real.kv.deleteRange(r, o),
    },
    leaseClient: {
      leaseGrant: (r, o) => (counts.grant++, real.leaseClient.leaseGrant(r, o)),
      leaseTimeToLive: (r, o) => (counts.ttl++, real.leaseClient.leaseTimeToLive(r, o)),
      leaseKeepAlive: (o) => (counts.keepalive++, order.push('keepalive'), real.leaseClient.leaseKeepAlive!(o)),
    },
    watch: () => real.watch(),
    close: () => real.close(),
  };
  return { client, counts, order, reset: () => (Object.assign(counts, { grant: 0, txn: 0, ttl: 0, range: 0, keepalive: 0 }), order.splice(0)) };
}

const contend = (name: string, holder: string, nonce: string, ttlMs = 10_000): ClaimRequest => ({ name, holder, ttlMs, expect: null, nextNonce: nonce });
const renew = (name: string, holder: string, expect: string[], nextNonce: string, ttlMs = 10_000): ClaimRequest => ({ name, holder, ttlMs, expect, nextNonce });
const outcome = (r: ClaimResult): string => (r.outcome === 'lost' ? `lost:${r.reason}` : r.outcome);

async function one(store: EtcdStore, req: ClaimRequest): Promise<ClaimResult> {
  const [r] = await store.claim([req]);
  assert.ok(r);
  return r;
}

interface Fixture {
  prefix: string;
  store: EtcdStore;
  open(client?: Etcd3Like): Promise<EtcdStore>;
  [Symbol.asyncDispose](): Promise<void>;
}

async function fixture(): Promise<Fixture> {
  const prefix = freshEtcdPrefix();
  const opened: EtcdStore[] = [];
  const open = async (client?: Etcd3Like): Promise<EtcdStore> => {
    const s = await createEtcdStore(client === undefined ? { url: TEST_ETCD_URL, prefix } : { client, prefix });
    opened.push(s);
    return s;
  };
  const store = await open();
  await store.migrate();
  return {
    prefix,
    store,
    open,
    async [Symbol.asyncDispose]() {
      for (const s of opened) await s.close();
      await deleteEtcdKeys(prefix);
    },
  };
}

/** Acquires `names` for `holder` and renews them once (which moves them onto the session). */
async function onSession(store: EtcdStore, names: string[], holder: string, ttlMs = 10_000): Promise<Map<string, string>> {
  const acquired = await store.claim(names.map((n) => contend(n, holder, `${n}-a`, ttlMs)));
  assert.ok(acquired.every((r) => r.outcome === 'acquired'));
  const moved = await store.claim(names.map((n) => renew(n, holder, [`${n}-a`], `${n}-b`, ttlMs)));
  assert.deepEqual(moved.map(outcome), names.map(() => 'renewed'));
  return new Map(names.map((n) => [n, `${n}-b`]));
}

/**
 * A client whose txn runs `after` once, after the `n`th Txn it sends from now (1-based) has
 * landed; if `after` throws, that Txn's answer is lost (it landed all the same).
 */
function afterTxn(real: Etcd3Like): { client: Etcd3Like; arm(n: number, after: () => Promise<void>): void } {
  let left = 0;
  let hook: (() => Promise<void>) | undefined;
  const client: Etcd3Like = {
    kv: {
      txn: async (r, o) => {
        const out = await real.kv.txn(r, o);
        if (hook !== undefined && --left === 0) {
          const h = hook;
          hook = undefined;
          await h();
        }
        return out;
      },
      range: (r, o) => real.kv.range(r, o),
      deleteRange: (r, o) => real.kv.deleteRange(r, o),
    },
    leaseClient: real.leaseClient,
    watch: () => real.watch(),
    close: () => undefined,
  };
  return { client, arm: (n, after) => ((left = n), (hook = after)) };
}

const internals = (s: EtcdStore): { sessions: SessionBook; keys: EtcdKeys } => s as unknown as { sessions: SessionBook; keys: EtcdKeys };

void describe('etcd sessions: store work per tick', () => {
  void it('renewing the terms of a session is one Txn and one keepalive, for 1 term or 300', async () => {
    await using f = await fixture();
    const admin = await etcdAdmin();
    try {
      const c = counting(admin);
      const store = await f.open(c.client);
      for (const n of [1, 300]) {
        const names = Array.from({ length: n }, (_, i) => `w${n}-${i}`);
        let nonces = await onSession(store, names, 'h1');
        for (let round = 0; round < 3; round++) {
          c.reset();
          const out = await store.claim(names.map((name) => renew(name, 'h1', [nonces.get(name)!], `${name}-r${round}`)));
          assert.deepEqual(out.map(outcome), names.map(() => 'renewed'), `${n} terms, round ${round}`);
          assert.deepEqual(c.counts, { grant: 0, txn: 1, ttl: 0, range: 0, keepalive: 1 }, `${n} terms, round ${round}`);
          // A keepalive only ever follows the swap (a clone's tick must fail before extending).
          assert.deepEqual(c.order, ['txn', 'keepalive']);
          nonces = new Map(names.map((name) => [name, `${name}-r${round}`]));
          const left = out[0]!.expiresAtMs! - out[0]!.storeNowMs;
          assert.ok(left > 9_000 && left <= 10_000, `a tick extends to the full TTL (${left}ms left)`);
        }
      }
      // The engine's concurrent batches of one scheduler tick share one tick of the session.
      const names = Array.from({ length: 300 }, (_, i) => `w300-${i}`);
      c.reset();
      const halves = [names.slice(0, 150), names.slice(150)];
      const out = await Promise.all(halves.map((h) => store.claim(h.map((name) => renew(name, 'h1', [`${name}-r2`], `${name}-x`)))));
      assert.ok(out.flat().every((r) => r.outcome === 'renewed'));
      assert.deepEqual([c.counts.txn, c.counts.keepalive], [1, 1], 'two concurrent batches, one tick');
    } finally {
      admin.close();
    }
  });
});

void describe('etcd sessions: safety', () => {
  void it('a clone with a copy of the session (a restored snapshot): one tick wins, the other ends every term of the session; the winner is refused next', async () => {
    await using f = await fixture();
    const nonces = await onSession(f.store, ['a', 'b'], 'snap');
    const tokens = new Map((await f.store.list()).map((i) => [i.name, i.token]));
    const clone = await f.open();
    internals(f.store).sessions.copyInto(internals(clone).sessions, internals(clone).keys);
    const req = (suffix: string): ClaimRequest[] => ['a', 'b'].map((n) => renew(n, 'snap', [nonces.get(n)!], `${n}-${suffix}`));
    const [one_, two] = await Promise.all([f.store.claim(req('one')), clone.claim(req('two'))]);
    const both = [one_.map(outcome).join(), two.map(outcome).join()].sort();
    assert.deepEqual(both, ['lost:cloned,lost:cloned', 'renewed,renewed'], 'the first swap wins; the other clone ends the session');
    const [winner, winnerOut] = one_[0]!.outcome === 'renewed' ? [f.store, 'one'] : [clone, 'two'];
    const next = await winner.claim(['a', 'b'].map((n) => renew(n, 'snap', [`${n}-${winnerOut}`], `${n}-next`)));
    assert.deepEqual(next.map(outcome), ['lost:cloned', 'lost:cloned'], 'the conflict ended the terms for the winner too');
    assert.deepEqual(
      next.map((r) => r.token),
      ['a', 'b'].map((n) => tokens.get(n)),
    );
    for (const n of ['a', 'b']) {
      assert.deepEqual((await f.store.history({ name: n })).map((h) => h.event), ['acquired', 'conflict']);
      const fresh = await one(f.store, contend(n, 'fresh', `${n}-fresh`));
      assert.equal(fresh.outcome, 'acquired');
      assert.ok(fresh.token! > tokens.get(n)!, 'a new term after the conflict has a larger token');
    }
  });

  void it('a term revoked by another process is lost as "revoked" at the next tick; the session\'s other terms renew', async () => {
    await using f = await fixture();
    const nonces = await onSession(f.store, ['a', 'b', 'c'], 'h1');
    const operator = await f.open();
    assert.equal((await operator.revoke('b', 'test')).revoked, true);
    const out = await f.store.claim(['a', 'b', 'c'].map((n) => renew(n, 'h1', [nonces.get(n)!], `${n}-2`)));
    assert.deepEqual(out.map(outcome), ['renewed', 'lost:revoked', 'renewed']);
    const again = await f.store.claim(['a', 'c'].map((n) => renew(n, 'h1', [`${n}-2`], `${n}-3`)));
    assert.deepEqual(again.map(outcome), ['renewed', 'renewed']);
  });

  void it('a released term acquired again and moved back onto the session is not ended by the old term\'s marker', async () => {
    await using f = await fixture();
    const nonces = await onSession(f.store, ['keep', 'job'], 'h1');
    // Another store instance of the same holder releases: it marks the delete for our session.
    const other = await f.open();
    assert.equal(await other.release({ name: 'job', holder: 'h1', expect: [nonces.get('job')!] }), true);
    await onSession(f.store, ['job'], 'h1'); // acquired again, and moved onto the same session
    let keep = nonces.get('keep')!;
    let job = 'job-b';
    for (let i = 0; i < 3; i++) {
      const out = await f.store.claim([renew('keep', 'h1', [keep], `keep-${i}`), renew('job', 'h1', [job], `job-${i}`)]);
      assert.deepEqual(out.map(outcome), ['renewed', 'renewed'], `tick ${i}`);
      [keep, job] = [`keep-${i}`, `job-${i}`];
    }
  });

  void it('a renewal of a session term by another store instance with the holder\'s id is a clone conflict, and the session hears of it', async () => {
    await using f = await fixture();
    const nonces = await onSession(f.store, ['job'], 'h1');
    const other = await f.open();
    assert.equal(outcome(await one(other, renew('job', 'h1', [nonces.get('job')!], 'other-1'))), 'lost:cloned');
    assert.equal(outcome(await one(f.store, renew('job', 'h1', [nonces.get('job')!], 'mine-1'))), 'lost:cloned');
    assert.deepEqual((await f.store.history({ name: 'job' })).map((h) => h.event), ['acquired', 'conflict']);
  });

  void it('a term the holder stops renewing ends about a TTL later although the session lives on', async () => {
    await using f = await fixture();
    const TTL = 2000;
    const nonces = await onSession(f.store, ['kept', 'dropped'], 'h1', TTL);
    let kept = nonces.get('kept')!;
    const t0 = Date.now();
    let endedAfter: number | undefined;
    for (let i = 0; Date.now() - t0 < 3 * TTL; i++) {
      await sleep(TTL / 3);
      const r = await one(f.store, renew('kept', 'h1', [kept], `kept-${i}`, TTL));
      assert.equal(r.outcome, 'renewed');
      kept = `kept-${i}`;
      const [info] = await f.store.list({ name: 'dropped' });
      if (endedAfter === undefined && info?.state !== 'held') endedAfter = Date.now() - t0;
    }
    assert.ok(endedAfter !== undefined, 'the abandoned term was still held after 3 TTLs');
    // Deleted by the first tick after its own TTL: within TTL + one renew interval (+ etcd's 1s granularity).
    assert.ok(endedAfter <= TTL + TTL / 3 + 1200, `ended ${endedAfter}ms after its last renewal`);
    assert.equal(outcome(await one(f.store, renew('dropped', 'h1', [nonces.get('dropped')!], 'late', TTL))), 'lost:expired');
    const [info] = await f.store.list({ name: 'kept' });
    assert.equal(info?.state, 'held');
  });

  void it('a term unrenewed for a TTL, renewed by a batch that joins another batch\'s tick, is renewed and not swept by that tick', async () => {
    await using f = await fixture();
    const TTL = 10_000;
    // The monotonic clock is the sweep's: stepped past the TTL, every term is a sweep candidate
    // while the session's etcd lease, on etcd's own clock, is nowhere near its end.
    let monoStep = 0;
    const stepped: Clock = { ...realClock, monoNow: () => realClock.monoNow() + monoStep };
    const store = await createEtcdStore({ url: TEST_ETCD_URL, prefix: f.prefix, clock: stepped });
    try {
      const nonces = await onSession(store, ['first', 'joined'], 'h1', TTL);
      monoStep = TTL + 1;
      // Two batches sent together share one tick, as the scheduler sends them: 'joined' is in
      // the batch that joins the tick the first one opened; the tick's sweep must count it.
      const [a, b] = await Promise.all([
        store.claim([renew('first', 'h1', [nonces.get('first')!], 'first-x', TTL)]),
        store.claim([renew('joined', 'h1', [nonces.get('joined')!], 'joined-x', TTL)]),
      ]);
      assert.deepEqual([...a, ...b].map(outcome), ['renewed', 'renewed']);
      for (const name of ['first', 'joined']) {
        const [info] = await store.list({ name });
        assert.equal(info?.state, 'held', `${name}, answered renewed, is still held`);
      }
      assert.equal(outcome(await one(store, renew('joined', 'h1', ['joined-x'], 'joined-y', TTL))), 'renewed');
    } finally {
      await store.close();
    }
  });

  void it('a holder paused past its TTL finds its session gone (lost: expired), and a new session serves its next term', async () => {
    await using f = await fixture();
    const TTL = 2000;
    const nonces = await onSession(f.store, ['job'], 'h1', TTL);
    // One tick more: the engine then presents a nonce the term key's renew record never held.
    assert.equal(outcome(await one(f.store, renew('job', 'h1', [nonces.get('job')!], 'job-t', TTL))), 'renewed');
    await sleep(TTL + 1500); // etcd expires a lease within about a second of its TTL
    assert.equal(outcome(await one(f.store, renew('job', 'h1', ['job-t'], 'late', TTL))), 'lost:expired', 'expired, not a clone');
    const again = await onSession(f.store, ['job'], 'h1', TTL);
    assert.equal(outcome(await one(f.store, renew('job', 'h1', [again.get('job')!], 'job-c', TTL))), 'renewed');
  });

  void it('a keepalive answered "lease gone" by a member behind the cluster, while the lease lives: nothing renewed, nothing ended; the next tick renews', async () => {
    // A thawed ex-leader answers a keepalive from its own stale lessor (topologies/etcd-cluster,
    // SIGSTOP of the leader). Here the keepalives reach etcd and renew the lease, but while
    // `stale` is set their answers read TTL 0, as that member's did.
    await using f = await fixture();
    const admin = await etcdAdmin();
    try {
      let stale = false;
      const client: Etcd3Like = {
        kv: {
          txn: (r, o) => admin.kv.txn(r, o),
          range: (r, o) => admin.kv.range(r, o),
          deleteRange: (r, o) => admin.kv.deleteRange(r, o),
        },
        leaseClient: {
          leaseGrant: (r, o) => admin.leaseClient.leaseGrant(r, o),
          leaseTimeToLive: (r, o) => admin.leaseClient.leaseTimeToLive(r, o),
          leaseKeepAlive: async (o) => {
            const real = await admin.leaseClient.leaseKeepAlive!(o);
            return {
              write: (r: { ID: string }) => real.write(r),
              on: ((event: 'data' | 'error', handler: (x: never) => void) =>
                event === 'data' ? real.on('data', (res) => (handler as (r: { ID: string; TTL: string }) => void)(stale ? { ...res, TTL: '0' } : res)) : real.on('error', handler as (e: Error) => void)) as never,
              end: () => real.end(),
              ...(real.cancel === undefined ? {} : { cancel: () => real.cancel!() }),
            };
          },
        },
        watch: () => admin.watch(),
        close: () => undefined,
      };
      const store = await f.open(client);
      const nonces = await onSession(store, ['job'], 'h1');
      stale = true;
      const r = await store.claim([renew('job', 'h1', [nonces.get('job')!], 'job-s')]).then(
        (x) => outcome(x[0]!),
        (e: unknown) => (e instanceof StoreUnavailableError ? 'unavailable' : `threw ${String(e)}`),
      );
      assert.equal(r, 'unavailable', 'unknown is not yes: the renewal is not reported, and the term is not ended either');
      stale = false;
      assert.equal(outcome(await one(store, renew('job', 'h1', [nonces.get('job')!, 'job-s'], 'job-t'))), 'renewed', 'the next tick renews the same term');
    } finally {
      admin.close();
    }
  });

  void it('a token floor raised by another process ends every session term; no renewal after it says renewed', async () => {
    await using f = await fixture();
    const first = await onSession(f.store, ['a', 'b'], 'h1');
    const ticked = await f.store.claim(['a', 'b'].map((n) => renew(n, 'h1', [first.get(n)!], `${n}-t`)));
    assert.deepEqual(ticked.map(outcome), ['renewed', 'renewed']);
    const nonces = new Map(['a', 'b'].map((n) => [n, `${n}-t`]));
    const other = await f.open();
    const m = await other.migrate({ minToken: 1_000_000n });
    assert.equal(m.tokenFloor?.endedTerms, 2);
    const outcomes: string[] = [];
    for (let i = 0; i < 2 && outcomes.length === 0; i++) {
      try {
        const out = await f.store.claim(['a', 'b'].map((n) => renew(n, 'h1', [nonces.get(n)!], `${n}-${i}`)));
        outcomes.push(...out.map(outcome));
      } catch (err) {
        // The first call after the floor moved may be refused as retryable (it adopts the floor).
        assert.match(String(err), /new token floor/);
      }
    }
    assert.deepEqual(outcomes, ['lost:expired', 'lost:expired']);
  });

  void it('a revoked term stays lost though ticks that do not renew it read its marker first (and delete it)', async () => {
    await using f = await fixture();
    const nonces = await onSession(f.store, ['x', 'y'], 'h1');
    assert.equal((await (await f.open()).revoke('y', 'test')).revoked, true);
    let x = nonces.get('x')!;
    for (let i = 0; i < 3; i++) {
      assert.equal(outcome(await one(f.store, renew('x', 'h1', [x], `x-${i}`))), 'renewed');
      x = `x-${i}`;
    }
    assert.equal(outcome(await one(f.store, renew('y', 'h1', [nonces.get('y')!], 'y-late'))), 'lost:revoked');
  });

  void it('a clone conflict ended by another store instance while the term moved onto the session is still heard there', async () => {
    await using f = await fixture();
    const admin = await etcdAdmin();
    try {
      const h = afterTxn(admin);
      await onSession(f.store, ['z'], 'h1');
      await f.store.claim([contend('x', 'h1', 'xa')]);
      const other = await f.open(h.client);
      // The other instance's first Txn opens its session; after its rounds' first Txn (the reads
      // that find x held by our holder id), our renewal moves x onto our session.
      h.arm(2, async () => {
        assert.equal(outcome(await one(f.store, renew('x', 'h1', ['xa'], 'xb'))), 'renewed');
      });
      assert.equal(outcome(await one(other, renew('x', 'h1', ['not-held'], 'c1'))), 'lost:cloned');
      const next = await f.store.claim([renew('x', 'h1', ['xb'], 'xc'), renew('z', 'h1', ['z-b'], 'z-c')]);
      assert.deepEqual(next.map(outcome), ['lost:cloned', 'renewed']);
    } finally {
      admin.close();
    }
  });

  void it('a term revoked while its move onto the session is in flight, with other ticks meanwhile, is lost at its next renewal', async () => {
    await using f = await fixture();
    const admin = await etcdAdmin();
    try {
      const h = afterTxn(admin);
      const store = await f.open(h.client);
      const z = await onSession(store, ['z'], 'h1');
      await store.claim([contend('x', 'h1', 'xa')]);
      let zn = z.get('z')!;
      // 1: the session's tick in x's call; 2: the rounds' move of x. Then, before that call
      // settles x into the session: a revoke, and two ticks of other batches (which read the
      // revoke's marker and, for a settled term, would delete it).
      h.arm(2, async () => {
        assert.equal((await (await f.open()).revoke('x', 'test')).revoked, true);
        for (let i = 0; i < 2; i++) {
          assert.equal(outcome(await one(store, renew('z', 'h1', [zn], `z-${i}`))), 'renewed');
          zn = `z-${i}`;
        }
      });
      assert.equal(outcome(await one(store, renew('x', 'h1', ['xa'], 'xb'))), 'renewed', 'the move landed before the revoke');
      assert.equal(outcome(await one(store, renew('x', 'h1', ['xb'], 'xc'))), 'lost:revoked');
      assert.equal(outcome(await one(await f.open(), contend('x', 'h2', 'x-h2'))), 'acquired');
      assert.equal(outcome(await one(store, renew('x', 'h1', ['xc'], 'xd'))), 'lost:superseded');
    } finally {
      admin.close();
    }
  });

  void it('a slow call that settles after a newer one does not bring back the nonce the engine moved past', async () => {
    await using f = await fixture();
    const admin = await etcdAdmin();
    try {
      const h = afterTxn(admin);
      const store = await f.open(h.client);
      await onSession(store, ['z'], 'h1');
      await store.claim([contend('x', 'h1', 'xa')]);
      // The engine gave up on the slow call (1: tick, 2: its rounds) and retried with both nonces.
      h.arm(2, async () => {
        assert.equal(outcome(await one(store, renew('x', 'h1', ['xa', 'xb'], 'xc'))), 'renewed', 'the landed move is recognised');
      });
      const slow = await store.claim([renew('x', 'h1', ['xa'], 'xb'), contend('q', 'h1', 'qa')]);
      assert.deepEqual(slow.map(outcome), ['renewed', 'acquired']);
      assert.equal(outcome(await one(store, renew('x', 'h1', ['xc'], 'xd'))), 'renewed', 'renewed with the retry\'s nonce, not called a clone');
    } finally {
      admin.close();
    }
  });

  void it('a move onto the session whose answer was lost: the retry with both nonces is renewed; unrenewed, the session sweeps it', async () => {
    for (const mode of ['retry', 'abandon'] as const) {
      await using f = await fixture();
      const admin = await etcdAdmin();
      try {
        const h = afterTxn(admin);
        const store = await f.open(h.client);
        const TTL = 2000;
        const z = await onSession(store, ['z'], 'h1', TTL);
        await store.claim([contend('x', 'h1', 'xa', TTL)]);
        // The tick's Txn, then the move's: its answer is lost after it landed.
        h.arm(2, () => Promise.reject(new Error('14 UNAVAILABLE: the answer was lost')));
        await assert.rejects(store.claim([renew('x', 'h1', ['xa'], 'xb', TTL), renew('z', 'h1', [z.get('z')!], 'z-1', TTL)]), /lost/);
        if (mode === 'retry') {
          const r = await store.claim([renew('x', 'h1', ['xa', 'xb'], 'xc', TTL), renew('z', 'h1', [z.get('z')!, 'z-1'], 'z-2', TTL)]);
          assert.deepEqual(r.map(outcome), ['renewed', 'renewed'], 'the landed move is recognised, not called a clone');
          assert.equal(outcome(await one(store, renew('x', 'h1', ['xc'], 'xd', TTL))), 'renewed', 'and the session renews it from then on');
          continue;
        }
        // Nobody renews x again; z keeps the session alive. x must not live on with it.
        let zn = [z.get('z')!, 'z-1'];
        const t0 = Date.now();
        let gone: number | undefined;
        for (let i = 0; Date.now() - t0 < 3 * TTL && gone === undefined; i++) {
          await sleep(TTL / 3);
          assert.equal(outcome(await one(store, renew('z', 'h1', zn, `z-r${i}`, TTL))), 'renewed');
          zn = [`z-r${i}`];
          if ((await store.list({ name: 'x' }))[0]?.state !== 'held') gone = Date.now() - t0;
        }
        assert.ok(gone !== undefined && gone <= TTL + TTL / 3 + 1200, `the abandoned move was swept after ${gone}ms`);
      } finally {
        admin.close();
      }
    }
  });
});
