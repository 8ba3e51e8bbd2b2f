/**
 * The etcd backend's one reading of the process's own clock. Everything else in this folder
 * reads time from the injected {@link Clock} (EtcdStoreOptions.clock, default the real one),
 * held by the member pool (members.ts) that every part of the store shares:
 *   - monotonic (`clock.monoNow()`) for local intervals: a session's sweeps and pruning, an
 *     orphaned term's age, a refused member's back-off, the restore check's reuse;
 *   - wall (`clock.wallNow()`) for what the store reports and writes as "the store's time"
 *     (`storeNowMs`, `expiresAtMs`, history and state `atMs`) and for call deadlines: etcd has no
 *     clock API, so this store's time is local time at an answer, and a deadline is a number in
 *     that same domain (fleet.ts and slots.ts compute theirs the same way and share the pool).
 *
 * scripts/layering.mjs fails on a direct `Date.now(` or `performance.now(` in this folder outside
 * this file (fleet.ts and slots.ts are on a shrinking ceiling until they are routed too).
 */
import { realClock, type Clock } from '../../core/clock.js';

export { realClock, type Clock };

/**
 * The deadline etcd3 hands to gRPC for a call whose deadline is `deadline` on `clock`'s wall
 * time. gRPC takes an absolute wall time and compares it with the process's own `Date.now()`
 * when the call starts, so a deadline on any other clock (a test's fake one, or one skewed on
 * purpose) would expire at once or never. What is carried over is the time left on the injected
 * clock; the offset to the process's wall clock is taken here, once per call, at the moment the
 * call is handed over, not once when the store opens: a wall-clock step in between (NTP,
 * libfaketime in test/engine) would otherwise give gRPC a deadline already past or an hour away.
 * With the real clock the two are the same reading and the deadline passes through unchanged.
 */
export function grpcDeadline(clock: Clock, deadline: number): number {
  if (clock === realClock) return deadline;
  return Date.now() + (deadline - clock.wallNow());
}
