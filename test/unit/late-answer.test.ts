/**
 * A claim whose "acquired" answer comes back with less time left than the safety margin is not
 * used (the term could expire before the holder acts on it). What the contender does next matters:
 * the row is held until that expiry, and a store that hands a released term to a registered waiter
 * (PostgreSQL's and MySQL's handover) answers every later claim of that waiter with the same
 * handed term. Claiming again at once then spins: seen on PostgreSQL after a promotion delayed the
 * follower's look, 434 claims in 0.4 s until the handed term expired. The contender first hands
 * the term back under its nonce (a release fenced by it ends that term only) and claims again at
 * once; it waits out the row's time left when the store did not end the term (a store whose
 * answer it was not, below; or unreachable), and with unlessReleasedSince.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CallOptions, ClaimRequest, ClaimResult } from '../../src/backends/store.js';
import { world, TIMING, MARGIN, TTL } from './harness.js';

void test('an acquired answer too late to use: no claim until the row it names has expired, then one that wins', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const start = w.clock.outsideNow();
    // A handed term with less than the margin left: every claim before its expiry gets it again.
    const handedUntil = start + MARGIN / 3;
    let handedAnswers = 0;
    let claimsAfter = 0;
    const claim = w.store.claim.bind(w.store);
    w.store.claim = async (requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> => {
      const now = w.clock.outsideNow();
      if (now < handedUntil && requests.every((r) => r.name === 'job' && r.expect === null)) {
        handedAnswers += 1;
        // Bounded, so that the spin this test catches ends instead of hanging the test.
        if (handedAnswers < 200) {
          return requests.map((r) => ({ name: r.name, outcome: 'acquired', token: 7n, holder: r.holder, expiresAtMs: handedUntil, storeNowMs: now, nonce: r.nextNonce }));
        }
      }
      if (now >= handedUntil) claimsAfter += requests.filter((r) => r.name === 'job').length;
      return claim(requests, options);
    };
    let token: bigint | undefined;
    void lh
      .lease('job', TIMING)
      .acquire()
      .then((t) => (token = t.token));
    await w.clock.until(() => token !== undefined, 10_000, 10);
    assert.equal(handedAnswers, 1, `claimed ${handedAnswers} times while the too-late term was still live; once, then wait for its expiry`);
    assert.equal(claimsAfter, 1, 'one claim after the expiry wins the lease');
    assert.ok(w.clock.outsideNow() >= handedUntil, 'won before the handed term expired');
    assert.notEqual(token, 7n, 'the term won is a new one, not the handed term that was too late to use');
  } finally {
    await w.close();
  }
});

/**
 * A claim that the store granted, answered after its local deadline: `block` moves every clock
 * (the store's too) while the answer is on its way, so the term stands in the store with
 * `leftMs` to run when the answer arrives.
 */
function lateFirstGrant(w: ReturnType<typeof world>, leftMs: number): { granted: () => ClaimResult | undefined } {
  let granted: ClaimResult | undefined;
  const claim = w.store.claim.bind(w.store);
  w.store.claim = async (requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> => {
    const results = await claim(requests, options);
    const r = results.find((x) => x.name === 'job' && x.outcome === 'acquired');
    if (granted === undefined && r !== undefined) {
      granted = r;
      w.clock.block(TTL - leftMs);
    }
    return results;
  };
  return { granted: () => granted };
}

void test('an acquired answer too late to use is handed back under its nonce, and the lease claimed again at once, not after its TTL', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    // 250 ms of the late term left in the store: less than the margin (300), so too late here.
    const late = lateFirstGrant(w, MARGIN - 50);
    let token: bigint | undefined;
    void lh
      .lease('job', TIMING)
      .acquire()
      .then((t) => (token = t.token));
    await w.clock.until(() => token !== undefined, 10_000, 10);
    const first = late.granted();
    assert.ok(first?.outcome === 'acquired', 'precondition: the first claim was granted');
    const sent = w.store.calls.find((c) => c.requests.some((r) => r.name === 'job'))!.requests[0]!.nextNonce;
    assert.deepEqual(
      w.store.releases.map((r) => [r.name, r.expect]),
      [['job', [sent]]],
      'the late term was released once, fenced by the nonce it was granted under',
    );
    assert.ok(w.clock.outsideNow() < first.expiresAtMs, `won ${Math.round(w.clock.outsideNow() - first.expiresAtMs)} ms after the late term's expiry; the release freed it at once`);
    assert.ok(token! > first.token, 'a new term, with a larger token');
  } finally {
    await w.close();
  }
});

void test('with unlessReleasedSince the late term is not released (a released term since then reads as done to every contender): its time left is waited out', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const late = lateFirstGrant(w, MARGIN - 50);
    let token: bigint | undefined;
    void lh
      .lease('job', TIMING)
      .acquire({ unlessReleasedSince: w.clock.outsideNow() - 1000 })
      .then((t) => (token = t.token));
    await w.clock.until(() => token !== undefined, 10_000, 10);
    const first = late.granted();
    assert.ok(first?.outcome === 'acquired', 'precondition: the first claim was granted');
    assert.deepEqual(w.store.releases, [], 'nothing released');
    assert.ok(w.clock.outsideNow() >= first.expiresAtMs, 'won after the late term ran out');
    assert.ok(token! > first.token, 'a new term, with a larger token');
  } finally {
    await w.close();
  }
});
