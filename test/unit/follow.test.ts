// Followers, notifications, batching and the elector, on a fake clock and an in-memory store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SchemaError } from '../../src/core/errors.js';
import { MAX_BATCH } from '../../src/core/renewal-batcher.js';
import { lossOf, world, RENEW, TIMING, TTL } from './harness.js';

void test('a follower of a holder with a far-off expiry re-checks within one TTL of its own, never in a tight loop', async () => {
  const w = world();
  try {
    const holder = w.leasehold();
    await holder.lease('job', { ttl: '10m' }).acquire();
    const follower = w.leasehold();
    const lease = follower.lease('job', TIMING);
    const busy: Array<number | null> = [];
    lease.on('busy', (_h, ms) => busy.push(ms));
    const acquiring = lease.acquire();
    await w.clock.advance(4 * TTL);
    const attempts = w.store.calls.filter((c) => c.requests.some((r) => r.expect === null && r.holder === follower.holder)).map((c) => c.at);
    assert.ok(attempts.length >= 4, `one attempt per TTL at least (${attempts.length} in 4 TTLs)`);
    assert.ok(attempts.length <= 5, `and no more than about one per TTL (${attempts.length})`);
    for (let i = 1; i < attempts.length; i++) assert.ok(attempts[i]! - attempts[i - 1]! <= TTL + 251 + 1, 'at most one TTL (plus jitter) apart');
    assert.ok(busy.every((ms) => ms !== null && ms > TTL));
    await lease.release();
    await acquiring.catch(() => {});
  } finally {
    await w.close();
  }
});

void test('a follower wakes on a "freed" notification and acquires at once, with a larger token', async () => {
  const w = world();
  try {
    const a = w.leasehold().lease('job', TIMING);
    const first = await a.acquire();
    const b = w.leasehold().lease('job', TIMING);
    const acquiring = b.acquire();
    await w.clock.advance(100);
    assert.equal(b.state, 'contending');
    await a.release();
    await w.clock.advance(0); // no time passes: the notification alone wakes the follower
    const term = await acquiring;
    assert.equal(term.token, first.token + 1n);
  } finally {
    await w.close();
  }
});

void test('an operator revocation reaches the holder through the notification, without waiting for the next renewal', async () => {
  const w = world();
  try {
    const lease = w.leasehold().lease('job', TIMING);
    const term = await lease.acquire();
    await w.clock.advance(RENEW / 4);
    await w.store.revoke('job', 'maintenance');
    await w.clock.advance(0);
    assert.equal(lossOf(term).reason, 'revoked');
  } finally {
    await w.close();
  }
});

void test('renewals of leases acquired at different moments go out together, in one claim', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const leases = ['a', 'b', 'c'].map((n) => lh.lease(n, TIMING));
    for (const l of leases) {
      await l.acquire();
      await w.clock.advance(100);
    }
    const before = w.store.calls.length;
    await w.clock.advance(RENEW);
    const renewals = w.store.calls.slice(before);
    assert.equal(renewals.length, 1, 'one round trip');
    assert.deepEqual(renewals[0]!.requests.map((r) => r.name).sort(), ['a', 'b', 'c']);
  } finally {
    await w.close();
  }
});

void test('the elector backs off exponentially (jittered, capped at 30s) while it cannot contend, then leads once it can', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    w.store.fail(new SchemaError('memory store: no schema (unit test)'));
    const retries: number[] = [];
    const elected: bigint[] = [];
    const elector = lh.elect('job', { onElected: (t) => void elected.push(t.token) }, TIMING);
    elector.on('contend-error', (_err, ms) => retries.push(ms));
    await w.clock.advance(5 * 60_000);
    assert.ok(retries.length >= 8, `${retries.length} retries in 5 minutes`);
    retries.forEach((ms, i) => {
      const base = Math.min(30_000, 500 * 2 ** Math.min(i + 1, 6));
      assert.ok(ms >= base / 2 && ms <= base, `retry ${i + 1}: ${ms}ms within [${base / 2}, ${base}]`);
    });
    const gaps = w.store.calls.map((c) => c.at).map((at, i, all) => (i === 0 ? 0 : at - all[i - 1]!));
    assert.ok(gaps.every((g) => g <= 30_000), 'never more than 30s between attempts');
    assert.ok(elector.lastError instanceof SchemaError);
    w.store.heal();
    await w.clock.until(() => elected.length === 1, 31_000, 100);
    assert.equal(elector.lastError, undefined);
    await elector.stop();
  } finally {
    await w.close();
  }
});

void test('acquisitions go through the same loop as renewals: leases acquired together share one claim, and renewals due soon ride along', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const first = lh.lease('first', TIMING);
    await first.acquire();
    await w.clock.advance(RENEW - 100); // first's renewal is due within half an interval
    const before = w.store.calls.length;
    const terms = await Promise.all(['a', 'b', 'c'].map((n) => lh.lease(n, TIMING).acquire()));
    assert.deepEqual(
      terms.map((t) => t.token),
      [1n, 1n, 1n],
    );
    const calls = w.store.calls.slice(before);
    assert.equal(calls.length, 1, 'one round trip for three acquisitions and a renewal');
    assert.deepEqual(calls[0]!.requests.map((r) => `${r.name}:${r.expect === null ? 'acquire' : 'renew'}`).sort(), ['a:acquire', 'b:acquire', 'c:acquire', 'first:renew']);
  } finally {
    await w.close();
  }
});

void test('no round trip carries more than MAX_BATCH leases: 5001 acquisitions in one turn go out as 5000 + 1, and so do their renewals', async () => {
  const w = world();
  try {
    const lh = w.leasehold();
    const leases = Array.from({ length: MAX_BATCH + 1 }, (_, i) => lh.lease(`l${i}`, TIMING));
    await Promise.all(leases.map((l) => l.acquire()));
    assert.deepEqual(
      w.store.calls.map((c) => c.requests.length),
      [MAX_BATCH, 1],
    );
    const before = w.store.calls.length;
    await w.clock.advance(RENEW);
    assert.deepEqual(
      w.store.calls.slice(before).map((c) => c.requests.length),
      [MAX_BATCH, 1],
    );
    assert.ok(leases.every((l) => l.isLeader));
  } finally {
    await w.close();
  }
});
