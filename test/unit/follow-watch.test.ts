// Followers on a freed channel that also reports expiry (LeasePort.freedCoversExpiry, etcd's
// watch): they wait on the channel, not on the clock. Fake clock, in-memory store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Leasehold } from '../../src/core/leasehold.js';
import { followerRecheckMs } from '../../src/core/contention.js';
import type { FreedListener } from '../../src/backends/store.js';
import { FakeClock } from './fake-clock.js';
import { MemoryStore } from './memory-store.js';
import { TIMING, TTL } from './harness.js';

/** The in-memory store with a channel the test drives: drops, reconnects, expiry notifications. */
class CoveringStore extends MemoryStore {
  readonly freedCoversExpiry: true | undefined;
  private channel: { listener: FreedListener; onReconnect?: () => void; onDown?: () => void } | undefined;

  constructor(clock: () => number, covers: boolean) {
    super(clock);
    this.freedCoversExpiry = covers ? true : undefined;
  }

  override async watchFreed(listener: FreedListener, onReconnect?: () => void, onDown?: () => void): Promise<() => Promise<void>> {
    const stop = await super.watchFreed(listener);
    this.channel = { listener, onReconnect, onDown };
    return stop;
  }

  /** What etcd's watch reports when a term's etcd lease runs out: the key's delete. */
  expired(name: string): void {
    this.channel?.listener(name);
  }

  down(): void {
    this.muted = true;
    this.channel?.onDown?.();
  }

  up(): void {
    this.muted = false;
    this.channel?.onReconnect?.();
  }
}

function setup(covers: boolean): { clock: FakeClock; store: CoveringStore; follower: Leasehold; attempts(): number[] } {
  const clock = new FakeClock();
  const store = new CoveringStore(() => clock.outsideNow(), covers);
  const follower = new Leasehold({ store, clock });
  return {
    clock,
    store,
    follower,
    attempts: () => store.calls.filter((c) => c.requests.some((r) => r.holder === follower.holder && r.expect === null)).map((c) => c.at),
  };
}

/** A holder that took the lease and will never renew it (a process that died). */
async function deadHolder(store: MemoryStore, ttlMs: number): Promise<string> {
  const [r] = await store.claim([{ name: 'job', holder: 'dead', ttlMs, expect: null, nextNonce: 'n-dead' }]);
  assert.equal(r?.outcome, 'acquired');
  return 'n-dead';
}

void test('the safety re-check is ten TTLs, and never under a minute', () => {
  assert.equal(followerRecheckMs(3000), 60_000);
  assert.equal(followerRecheckMs(30_000), 300_000);
});

void test('on a channel that reports expiry, an idle follower makes no claims for many TTLs, and takes over at once when the term runs out', async () => {
  const { clock, store, follower, attempts } = setup(true);
  try {
    await deadHolder(store, 15 * TTL);
    const lease = follower.lease('job', TIMING);
    const acquiring = lease.acquire();
    await clock.advance(15 * TTL - 1);
    // The first attempt runs before the channel is up; the channel coming up makes it check once more.
    assert.equal(attempts().length, 2, `${attempts().length} attempts in 15 TTLs`);
    assert.equal(lease.state, 'contending');
    const before = attempts().length;
    await clock.advance(1);
    store.expired('job');
    await clock.advance(0); // no time passes: the notification alone wakes the follower
    const term = await acquiring;
    assert.equal(attempts().length, before + 1);
    assert.equal(term.holder, follower.holder);
  } finally {
    await follower.close();
  }
});

void test('a follower that claimed before the channel was up checks again as soon as it is, not at its next poll', async () => {
  const { clock, store, follower, attempts } = setup(true);
  try {
    await deadHolder(store, 1000 * TTL);
    const acquiring = follower.lease('job', TIMING).acquire();
    await clock.advance(0);
    assert.equal(attempts().length, 2);
    await clock.advance(10 * TTL);
    assert.equal(attempts().length, 2);
    void acquiring.catch(() => {});
  } finally {
    await follower.close();
  }
});

void test('on a channel that only hears releases, the same follower still checks about once per TTL', async () => {
  const { clock, store, follower, attempts } = setup(false);
  try {
    await deadHolder(store, 15 * TTL);
    const acquiring = follower.lease('job', TIMING).acquire();
    await clock.advance(10 * TTL);
    assert.ok(attempts().length >= 10, `${attempts().length} attempts in 10 TTLs`);
    await clock.advance(6 * TTL); // past the expiry, which its poll finds on its own
    assert.equal((await acquiring).holder, follower.holder);
  } finally {
    await follower.close();
  }
});

void test('the safety re-check still comes: a follower on the channel checks again within followerRecheckMs', async () => {
  const { clock, store, follower, attempts } = setup(true);
  try {
    await deadHolder(store, 1000 * TTL);
    const acquiring = follower.lease('job', TIMING).acquire();
    await clock.advance(TTL + 300); // the first (pre-channel) sleep is over
    const n = attempts().length;
    await clock.advance(followerRecheckMs(TTL) + TTL + 1);
    assert.equal(attempts().length, n + 1, 'one safety re-check, no more');
    void acquiring.catch(() => {});
  } finally {
    await follower.close();
  }
});

void test('a channel that goes down sends followers back to polling, and its reconnect makes them check at once', async () => {
  const { clock, store, follower, attempts } = setup(true);
  try {
    await deadHolder(store, 1000 * TTL);
    const acquiring = follower.lease('job', TIMING).acquire();
    await clock.advance(2 * TTL);
    const quiet = attempts().length;
    store.down();
    await clock.advance(0);
    assert.equal(attempts().length, quiet + 1, 'the drop wakes the follower');
    await clock.advance(5 * TTL);
    assert.ok(attempts().length >= quiet + 5, `polling at least once per TTL while down (${attempts().length - quiet})`);
    const down = attempts().length;
    store.up();
    await clock.advance(0);
    assert.equal(attempts().length, down + 1, 'the reconnect makes it check at once');
    await clock.advance(10 * TTL);
    assert.equal(attempts().length, down + 1, 'and then it waits on the channel again');
    void acquiring.catch(() => {});
  } finally {
    await follower.close();
  }
});

void test('a release notified while the busy answer is still on its way wakes the follower (it listens from before its claim)', async () => {
  const { clock, store, follower, attempts } = setup(true);
  try {
    const nonce = await deadHolder(store, 1000 * TTL);
    const lease = follower.lease('job', TIMING);
    const acquiring = lease.acquire();
    await clock.advance(2 * TTL); // the channel is up and the follower waits on it
    store.hold();
    await clock.advance(followerRecheckMs(TTL) + TTL); // its safety re-check goes out and is held
    const n = attempts().length;
    assert.equal(store.heldAnswers, 1);
    // The store answered "busy", then the holder released (and that was notified), then the answer arrives.
    assert.equal(await store.release({ name: 'job', holder: 'dead', expect: [nonce] }), true);
    store.heal();
    store.deliver();
    await clock.advance(TTL);
    assert.equal(lease.state, 'leading', 'woken by the notification it got while its claim was out, not by its next re-check');
    assert.equal(attempts().length, n + 1);
    assert.equal((await acquiring).holder, follower.holder);
  } finally {
    await follower.close();
  }
});
