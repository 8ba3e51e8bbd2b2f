/**
 * The PostgreSQL store's LISTEN reconnect backoff (src/backends/postgres/reconnect.ts). While the
 * LISTEN connection is down no follower hears a release; a server restart or promotion of a few
 * seconds pushed the old backoff (doubling to 30 s) into sleeps of 8-16 s begun while the server
 * was away, and followers heard releases only at expiry long after it was back (CI, pg-multi-host:
 * the follower's look came 5.5 s after the promotion). The delay is capped at 2 s.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LISTEN_RECONNECT_CAP_MS, listenReconnectDelayMs } from '../../src/backends/postgres/reconnect.js';

void test('the reconnect delay never exceeds the cap, however many attempts failed', () => {
  for (let attempt = 1; attempt <= 50; attempt++) {
    for (const r of [0, 0.5, 0.999]) {
      const d = listenReconnectDelayMs(attempt, r);
      assert.ok(d <= LISTEN_RECONNECT_CAP_MS, `attempt ${attempt}: ${d} ms`);
      assert.ok(d >= 125, `attempt ${attempt}: ${d} ms is a busy loop`);
    }
  }
  assert.equal(LISTEN_RECONNECT_CAP_MS, 2000);
});

void test('a server away for 10 s: the listener is back within one cap of its return', () => {
  // The worst case (every jitter at its maximum, the attempt just before the return failing).
  const awayMs = 10_000;
  let t = 0;
  let attempt = 0;
  while (t <= awayMs) t += listenReconnectDelayMs(++attempt, 0.999999);
  assert.ok(t - awayMs <= LISTEN_RECONNECT_CAP_MS, `back ${t - awayMs} ms after the server returned`);
});

void test('early attempts stay quick: a dropped connection to a live server is back in under a second', () => {
  assert.ok(listenReconnectDelayMs(1, 0.999) <= 500);
  assert.ok(listenReconnectDelayMs(2, 0.999) <= 1000);
});
