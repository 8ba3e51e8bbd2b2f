// The term's signal agrees with lease.token and isLeader at every read, on a fake clock: a freeze
// (or a passed deadline) that no timer has noticed yet is noticed by whichever of them is read first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LeaseLostError, NotLeaderError } from '../../src/core/errors.js';
import { lossOf, world, RENEW, TIMING, TTL } from './harness.js';

void test('a freeze no timer has noticed yet: term.signal already reads aborted, on every term, as lease.token would refuse', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const lease = lh.lease('job', TIMING);
    const other = lh.lease('other', TIMING);
    const term = await lease.acquire();
    const otherTerm = await other.acquire();
    let heard = 0;
    term.signal.addEventListener('abort', () => heard++, { once: true });
    w.clock.block(2 * TTL); // SIGSTOP/SIGCONT: every clock moved, no timer has run since
    assert.equal(term.signal.aborted, true, 'the first read of the signal after the freeze says the term is over');
    assert.equal(heard, 1, 'and its abort listeners ran before that read returned');
    assert.equal(lossOf(term).reason, 'suspended');
    assert.equal(lossOf(otherTerm).reason, 'suspended', 'the freeze ended every term of the process, not just the one read');
    assert.equal(lease.isLeader, false);
    assert.throws(() => lease.token, NotLeaderError);
  } finally {
    await w.close();
  }
});

void test('past the deadline with no timer run: reason and throwIfAborted() agree too, whichever is read first', async () => {
  const w = world();
  try {
    const lh = w.leasehold({ suspension: false });
    const a = await lh.lease('a', TIMING).acquire();
    const b = await lh.lease('b', TIMING).acquire();
    w.clock.block(2 * TTL);
    assert.ok(a.signal.reason instanceof LeaseLostError, 'signal.reason is the loss, read before signal.aborted');
    assert.throws(() => b.signal.throwIfAborted(), LeaseLostError);
  } finally {
    await w.close();
  }
});

void test('isLeader that finds the deadline passed ends the term right there: its signal has aborted and its listeners ran', async () => {
  const w = world();
  try {
    const lh = w.leasehold({ suspension: false });
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    let heard = false;
    term.signal.addEventListener('abort', () => (heard = true), { once: true });
    w.clock.block(2 * TTL);
    assert.equal(lease.isLeader, false);
    assert.equal(heard, true, 'the abort listeners ran inside the isLeader read');
    assert.equal(lease.currentTerm, undefined);
  } finally {
    await w.close();
  }
});

void test('a work loop started as startLoop(term.token, term.signal) sends no write after a freeze, even when its timer runs first', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    const writes: Array<{ at: number; token: bigint }> = [];
    // The user's work loop: checks the signal, then writes with the token it was started with.
    const startLoop = (token: bigint, signal: AbortSignal): void => {
      const step = (): void => {
        if (signal.aborted) return;
        writes.push({ at: w.clock.monoNow(), token });
        w.clock.setTimeout(step, 10);
      };
      step();
    };
    startLoop(term.token, term.signal);
    await w.clock.advance(RENEW + 5); // a renewal landed; the loop's next step is due before any engine timer
    assert.ok(writes.length > 1);
    w.clock.block(2 * TTL);
    const resumedAt = w.clock.monoNow();
    await w.clock.advance(0); // the overdue timers fire in due order: the loop's is first
    assert.deepEqual(
      writes.filter((x) => x.at >= resumedAt),
      [],
      'no write went out after the freeze: the loop read the signal aborted',
    );
    assert.equal(lossOf(term).reason, 'suspended');
  } finally {
    await w.close();
  }
});

void test('a wall-clock jump no timer has noticed yet: the signal reads aborted, and lease.token refuses too', async () => {
  const w = world();
  try {
    const lh = w.leasehold({ suspension: { wallJumpMs: 2000, checkIntervalMs: 500 } });
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    const second = lh.lease('second', TIMING);
    const secondTerm = await second.acquire();
    w.clock.suspend(5000); // a woken guest: its monotonic clock did not count the suspension
    assert.equal(term.signal.aborted, true);
    assert.equal(lossOf(term).reason, 'suspended');
    assert.throws(() => second.token, NotLeaderError);
    assert.equal(secondTerm.signal.aborted, true);
  } finally {
    await w.close();
  }
});

void test('a lease that is still valid reads its signal unaborted, any number of times, and nothing is sent for it', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    const calls = w.store.calls.length;
    for (let i = 0; i < 100; i++) assert.equal(term.signal.aborted, false);
    assert.equal(lease.isLeader, true);
    assert.equal(w.store.calls.length, calls, 'reading the signal is local: no round trip');
  } finally {
    await w.close();
  }
});

void test('term.assertValid() is lease.token for one term: the token while leading, NotLeaderError in jeopardy, the loss once over', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    assert.equal(term.assertValid(), term.token);
    w.store.fail();
    await w.clock.advance(RENEW);
    assert.equal(lease.state, 'jeopardy');
    assert.throws(() => term.assertValid(), NotLeaderError, 'no write while a renewal is unanswered, as lease.token');
    assert.equal(term.signal.aborted, false, 'jeopardy is not a loss');
    w.clock.block(2 * TTL); // and then a freeze: the deadline passes with no timer run
    assert.throws(
      () => term.assertValid(),
      (err: unknown) => err instanceof LeaseLostError && err === term.signal.reason,
      'the same LeaseLostError the signal aborted with',
    );
  } finally {
    await w.close();
  }
});

void test('a term from before a new one: assertValid() throws its own loss, never the new token', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const lease = lh.lease('job', TIMING);
    const first = await lease.acquire();
    await lease.release();
    const second = await lease.acquire();
    assert.throws(() => first.assertValid(), LeaseLostError);
    assert.equal(second.assertValid(), second.token);
    assert.ok(second.token > first.token);
  } finally {
    await w.close();
  }
});

void test('the term signal is still a real AbortSignal: listeners, AbortSignal.any and instanceof work as before', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const lease = lh.lease('job', TIMING);
    const term = await lease.acquire();
    assert.ok(term.signal instanceof AbortSignal);
    const derived = AbortSignal.any([term.signal]);
    assert.equal(derived.aborted, false);
    w.clock.block(2 * TTL);
    // A derived signal follows the term's own, which only a read (or an engine timer) updates.
    assert.equal(term.signal.aborted, true);
    assert.equal(derived.aborted, true);
    assert.ok(derived.reason instanceof LeaseLostError);
  } finally {
    await w.close();
  }
});
