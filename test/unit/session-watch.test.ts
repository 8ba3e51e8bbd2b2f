/**
 * What a contender does with its session after a 'busy' answer (liveness 'session'), with a
 * session whose lock the test grants by hand: per-slot cron's watch (scheduler/session-watch.ts)
 * and a waiting follower's wake-up (core/liveness.ts). The store side is tested against real
 * stores in test/stores/*-liveness.test.ts and test/scheduler/per-slot-session.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FakeClock } from './fake-clock.js';
import { SessionWatch } from '../../src/scheduler/session-watch.js';
import { ContenderSession } from '../../src/core/liveness.js';
import type { LeasePort, LeaseSession } from '../../src/core/port.js';

/** A session whose lock is granted by `grant()`; `waitForLock` resolves only on a grant, as the stores' do. */
class HandSession implements LeaseSession {
  readonly id = '1';
  ended = false;
  holdsLock: boolean;
  closed = 0;
  private waiters: (() => void)[] = [];
  constructor(locked: boolean) {
    this.holdsLock = locked;
  }
  grant(): void {
    this.holdsLock = true;
    for (const w of this.waiters.splice(0)) w();
  }
  waitForLock(): Promise<void> {
    if (this.holdsLock || this.ended) return new Promise<void>(() => {});
    return new Promise<void>((r) => this.waiters.push(r));
  }
  onEnd(): void {}
  release(): Promise<boolean> {
    return Promise.resolve(true);
  }
  close(): Promise<void> {
    this.ended = true;
    this.closed++;
    return Promise.resolve();
  }
}

function storeOpening(...sessions: HandSession[]): LeasePort {
  return { kind: 'hand', openSession: () => Promise.resolve(sessions.shift()!) } as unknown as LeasePort;
}

const never = { promise: new Promise<void>(() => {}), cancel: () => {} };
const settled = async (p: Promise<unknown>): Promise<boolean> => Promise.race([p.then(() => true), new Promise<boolean>((r) => setImmediate(() => r(false)))]);

void describe('per-slot session watch', () => {
  void it('a busy claim without the lock waits on it; the nap ends when the holder\'s session ends', async () => {
    const s = new HandSession(false);
    const w = new SessionWatch(storeOpening(s), 'tick', 30_000);
    const clock = new FakeClock();
    await w.forClaim(new AbortController().signal);
    assert.equal(w.busy(), 'wait');
    const nap = w.nap(clock, 2000, new AbortController().signal);
    assert.equal(await settled(nap), false, 'asleep while the holder lives');
    s.grant();
    assert.equal(await nap, true);
    assert.equal(s.closed, 0, 'the session that waited is the one that claims next');
    assert.equal(await w.forClaim(new AbortController().signal), s);
  });

  void it('a session that already holds the lock (the holder died before it opened) does not wait for it', async () => {
    const s = new HandSession(false);
    const w = new SessionWatch(storeOpening(s), 'tick', 30_000);
    await w.forClaim(new AbortController().signal);
    w.busy();
    s.holdsLock = true; // taken by the open after the claim went out, not by a wait
    assert.equal(await w.nap(new FakeClock(), 2000, new AbortController().signal), true);
  });

  void it('granted after the claim went out: claim again now; held when it went out: let it go and leave it to the expiry', async () => {
    const s = new HandSession(false);
    const w = new SessionWatch(storeOpening(s, new HandSession(true)), 'tick', 30_000);
    await w.forClaim(new AbortController().signal);
    s.grant();
    assert.equal(w.busy(), 'again');
    await w.forClaim(new AbortController().signal);
    assert.equal(w.busy(), 'expiry', 'busy with the lock held: the live term is tied to no session');
    assert.equal(s.closed, 1, 'the lock goes at once');
  });

  void it('a nap with nothing watched is a plain sleep', async () => {
    const w = new SessionWatch(storeOpening(), 'tick', 30_000);
    const clock = new FakeClock();
    const nap = w.nap(clock, 1000, new AbortController().signal);
    await clock.advance(1000);
    assert.equal(await nap, false);
  });
});

void describe('a waiting follower\'s session', () => {
  void it('the lock granted after its busy claim went out: it claims again at once, not at the freed channel or the TTL', async () => {
    const s = new HandSession(false);
    const c = new ContenderSession(storeOpening(s), 'lease', 30_000);
    await c.id();
    s.grant();
    assert.equal(await settled(c.wake(never, 30_000).promise), true);
    await c.id();
    assert.equal(await settled(c.wake(never, 30_000).promise), false, 'held when it went out: nothing to wait for but freed');
  });

  void it('a busy that says the session lock is free: the session takes it and the claim goes again at once, at most 3 times in a row', async () => {
    const s = new HandSession(false);
    const c = new ContenderSession(storeOpening(s), 'lease', 30_000);
    const clock = new FakeClock();
    const signal = new AbortController().signal;
    const lockFree = { name: 'lease', outcome: 'busy', holder: null, token: 1n, expiresAtMs: 0, storeNowMs: 0, sessionLockFree: true } as const;
    await c.id();
    const again = c.claimAgain(lockFree, clock, signal);
    assert.equal(await settled(again), false, 'waits for the lock first');
    s.grant();
    assert.equal(await again, true);
    assert.equal(s.holdsLock, true);
    // Taken by another session meanwhile: the lock wait is given the grace (least of 2 s and
    // TTL/4), then the claim goes anyway and the store's answer decides.
    const other = new HandSession(false);
    const c2 = new ContenderSession(storeOpening(other), 'lease', 30_000);
    await c2.id();
    const late = c2.claimAgain(lockFree, clock, signal);
    await clock.advance(1999);
    assert.equal(await settled(late), false);
    await clock.advance(1);
    assert.equal(await late, true);
    for (let n = 2; n <= 3; n++) {
      const next = c2.claimAgain(lockFree, clock, signal);
      await clock.advance(2000);
      assert.equal(await next, true, `the ${n}th in a row`);
    }
    assert.equal(await c2.claimAgain(lockFree, clock, signal), false, 'a fourth in a row: the ordinary busy path');
    // Any other answer starts the count again.
    assert.equal(await c2.claimAgain({ ...lockFree, sessionLockFree: undefined }, clock, signal), false);
    const again2 = c2.claimAgain(lockFree, clock, signal);
    await clock.advance(2000);
    assert.equal(await again2, true);
  });

  void it('a session the caller gave stays open after the contention', async () => {
    const s = new HandSession(false);
    const c = new ContenderSession(storeOpening(), 'lease', 30_000, s);
    assert.equal(await c.id(), '1');
    await c.close();
    assert.equal(s.closed, 0);
  });
});
