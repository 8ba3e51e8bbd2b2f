// The term's rules, on a fake clock and an in-memory store: no sleeps, no real store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NotLeaderError } from '../../src/core/errors.js';
import { resumeLease, snapshotLease } from '../../src/testing/index.js';
import { lossOf, world, MARGIN, RENEW, TIMING, TTL } from './harness.js';

void test('a holder renews every renew interval, keeping its token, and presents the nonce it set last', async () => {
  const w = world();
  try {
    const lease = w.leasehold().lease('job', TIMING);
    const term = await lease.acquire();
    assert.equal(term.token, 1n);
    let renewed = 0;
    lease.on('renewed', () => renewed++);
    await w.clock.advance(RENEW * 5);
    assert.equal(renewed, 5);
    assert.equal(lease.token, 1n);
    const renewals = w.store.calls.slice(1).map((c) => c.requests[0]!);
    assert.equal(renewals.length, 5);
    for (let i = 1; i < renewals.length; i++) assert.deepEqual(renewals[i]!.expect, [renewals[i - 1]!.nextNonce]);
    assert.equal(w.store.row('job')!.nonce, renewals.at(-1)!.nextNonce);
  } finally {
    await w.close();
  }
});

void test('the local deadline is the send time plus the granted time by the store clock, minus the margin', async () => {
  const w = world();
  try {
    const lease = w.leasehold().lease('job', TIMING);
    await lease.acquire();
    assert.equal(lease.msUntilDeadline, TTL - MARGIN);
    w.store.hold();
    await w.clock.advance(RENEW); // the renewal goes out now...
    const sentAt = w.clock.monoNow();
    await w.clock.advance(200); // ...and its answer takes 200ms to come back
    w.store.deliver();
    await w.clock.advance(0);
    // Measured from the send, not from the answer: the store may have granted it at the send.
    assert.equal(w.clock.monoNow() + lease.msUntilDeadline!, sentAt + TTL - MARGIN);
  } finally {
    await w.close();
  }
});

void test('a failed renewal is jeopardy (no token), and a renewal that lands recovers the term', async () => {
  const w = world();
  try {
    const lease = w.leasehold().lease('job', TIMING);
    const term = await lease.acquire();
    const events: string[] = [];
    lease.on('jeopardy', () => events.push('jeopardy')).on('recovered', () => events.push('recovered'));
    w.store.fail();
    await w.clock.advance(RENEW);
    assert.deepEqual(events, ['jeopardy']);
    assert.equal(lease.state, 'jeopardy');
    assert.equal(lease.isLeader, false);
    assert.throws(() => lease.token, NotLeaderError);
    w.store.heal();
    await w.clock.until(() => events.length === 2, RENEW);
    assert.deepEqual(events, ['jeopardy', 'recovered']);
    assert.equal(lease.token, 1n);
    assert.equal(term.signal.aborted, false);
  } finally {
    await w.close();
  }
});

void test('renewals that keep failing end the term at the local deadline, before the store would hand it over', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const suspected: string[] = [];
    lh.on('suspected', (d) => suspected.push(d));
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    const acquiredAt = w.clock.monoNow();
    w.store.fail();
    await w.clock.advance(TTL - MARGIN - 1);
    assert.equal(term.signal.aborted, false, 'still within the deadline');
    await w.clock.advance(1);
    assert.equal(lossOf(term).reason, 'store-unreachable');
    assert.equal(w.clock.monoNow() - acquiredAt, TTL - MARGIN);
    // The store still holds the term for the margin: nobody else can have it yet.
    const row = w.store.row('job')!;
    assert.ok(row.expiresAt! - w.clock.outsideNow() >= MARGIN, `store expiry ${row.expiresAt} is within the margin of now ${w.clock.outsideNow()} (acquired at ${acquiredAt}, token ${row.token})`);
    assert.deepEqual(suspected, [], 'a term in jeopardy that reaches its deadline is not a suspension');
  } finally {
    await w.close();
  }
});

void test('an unanswered renewal is jeopardy after half a renew interval; its nonce is presented by the retry, which renews', async () => {
  const w = world();
  try {
    const lease = w.leasehold().lease('job', TIMING);
    await lease.acquire();
    w.store.hold();
    await w.clock.advance(RENEW);
    const lost = w.store.calls.at(-1)!.requests[0]!; // applied by the store, answer never seen
    await w.clock.advance(RENEW / 2 - 1);
    assert.equal(lease.state, 'leading');
    await w.clock.advance(1);
    assert.equal(lease.state, 'jeopardy');
    w.store.heal();
    await w.clock.until(() => lease.state === 'leading', TTL);
    const retry = w.store.calls.at(-1)!.requests[0]!;
    assert.ok(retry.expect!.includes(lost.nextNonce), 'unknown is not yes, nor no: the store may hold the lost nonce');
    assert.equal(lease.token, 1n);
  } finally {
    await w.close();
  }
});

void test('a renewal answer that arrives after its term ended is ignored, even when a new term has begun', async () => {
  const w = world();
  try {
    const lease = w.leasehold().lease('job', TIMING);
    const first = await lease.acquire();
    w.store.hold();
    await w.clock.advance(RENEW); // renewal of term 1 in flight
    assert.equal(w.store.heldAnswers, 1);
    await lease.release();
    assert.equal(lossOf(first).reason, 'released');
    w.store.heal();
    const second = await lease.acquire();
    assert.equal(second.token, 2n);
    const events: string[] = [];
    for (const e of ['renewed', 'lost', 'recovered', 'jeopardy'] as const) lease.on(e, () => events.push(e));
    w.store.deliver(); // "renewed, token 1": for a term that is over
    await w.clock.advance(0);
    assert.deepEqual(events, []);
    assert.equal(second.signal.aborted, false);
    assert.equal(lease.token, 2n);
  } finally {
    await w.close();
  }
});

void test('a snapshot restored twice: the store answers "cloned" and neither copy keeps the term; both take new identities', async () => {
  const w = world();
  try {
    const a = w.leasehold();
    const b = w.leasehold();
    const identities: string[] = [];
    a.on('identity', (h) => identities.push(h));
    b.on('identity', (h) => identities.push(h));
    const la = a.lease('job', TIMING);
    const ta = await la.acquire();
    const lb = b.lease('job', TIMING);
    const tb = resumeLease(lb, snapshotLease(la)!);
    assert.equal(tb.token, ta.token);
    await w.clock.until(() => ta.signal.aborted && tb.signal.aborted, TTL);
    for (const t of [ta, tb]) {
      assert.equal(lossOf(t).reason, 'superseded');
      assert.match(lossOf(t).message, /restored snapshot or a fork/);
    }
    assert.equal(identities.length, 2);
    assert.equal((await w.store.history({ name: 'job' })).filter((h) => h.event === 'conflict').length, 1);
    // The next acquisition gets a larger token, so both copies' writes are fenced.
    assert.equal((await la.acquire()).token, 2n);
  } finally {
    await w.close();
  }
});

void test('a renewal answered "superseded" ends the term', async () => {
  const w = world();
  try {
    const lease = w.leasehold().lease('job', TIMING);
    const term = await lease.acquire();
    // Another process took the lease after an operator's revocation this process never heard of.
    w.store.muted = true;
    await w.store.revoke('job', 'test');
    const [other] = await w.store.claim([{ name: 'job', holder: 'someone-else', ttlMs: TTL, expect: null, nextNonce: 'n' }]);
    assert.equal(other!.outcome, 'acquired');
    await w.clock.until(() => term.signal.aborted, RENEW);
    assert.equal(lossOf(term).reason, 'superseded');
  } finally {
    await w.close();
  }
});

void test('progress timeout: no progress() within it ends the term as stalled and releases', async () => {
  const w = world();
  try {
    const lease = w.leasehold().lease('job', { ...TIMING, progressTimeout: 2000 });
    const term = await lease.acquire();
    await w.clock.advance(1500);
    lease.progress();
    await w.clock.advance(1999);
    assert.equal(term.signal.aborted, false);
    await w.clock.advance(1);
    assert.equal(lossOf(term).reason, 'stalled');
    assert.equal(w.store.row('job')!.holder, null, 'released, so another replica need not wait for expiry');
  } finally {
    await w.close();
  }
});

void test('a term granted with a third of its TTL (an old process confirming a handover offer) renews in time: no suspicion, same identity', async () => {
  const w = world();
  try {
    // The store answers the first acquisition with an expiry a third of the TTL away, as MySQL
    // schema 10 offered a handed term to a waiter that confirmed it with a read (version 9's client).
    const claim = w.store.claim.bind(w.store);
    let shortened = false;
    w.store.claim = async (requests, options) => {
      const results = await claim(requests, options);
      return results.map((r) => {
        if (shortened || r.outcome !== 'acquired') return r;
        shortened = true;
        return { ...r, expiresAtMs: r.storeNowMs + TTL / 3 };
      });
    };
    const lh = w.leasehold();
    const holder = lh.holder;
    const identities: string[] = [];
    lh.on('identity', (_h: string, why: string) => identities.push(why));
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    assert.ok(shortened);
    await w.clock.advance(TTL * 2);
    assert.equal(term.signal.aborted, false, 'the term is still held');
    assert.deepEqual(identities, [], 'no suspicion of a pause');
    assert.equal(lh.holder, holder);
    assert.equal(lease.token, term.token);
  } finally {
    await w.close();
  }
});
