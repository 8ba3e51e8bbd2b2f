/**
 * A claim whose "acquired" answer comes back with less time left than the safety margin is not
 * used (the term could expire before the holder acts on it). What the contender does next matters:
 * the row is held until that expiry, and a store that hands a released term to a registered waiter
 * (PostgreSQL's and MySQL's handover) answers every later claim of that waiter with the same
 * handed term. Claiming again at once then spins: seen on PostgreSQL after a promotion delayed the
 * follower's look, 434 claims in 0.4 s until the handed term expired. The contender waits out the
 * row's time left instead.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CallOptions, ClaimRequest, ClaimResult } from '../../src/backends/store.js';
import { world, TIMING, MARGIN } from './harness.js';

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
