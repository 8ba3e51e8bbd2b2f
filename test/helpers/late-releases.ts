/**
 * A store whose releases time out on the client at once and reach the store `delay.ms` later: a
 * loaded store, where the releasing process cannot tell whether (or when) its release landed.
 * Withdrawals of a waiter registration are releases too, and are delayed the same way. `delay.ms`
 * 0 releases at once (a test's clean-up). `later` schedules the late call: real time by default,
 * a fake clock's setTimeout in the unit layer.
 */
import { StoreUnavailableError } from '../../src/core/errors.js';
import type { LeasePort } from '../../src/core/port.js';

export function lateReleases<S extends LeasePort>(store: S, delay: { ms: number }, later: (f: () => void, ms: number) => unknown = setTimeout): S {
  return new Proxy(store, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      const f = (...args: unknown[]): unknown => (v as (...a: unknown[]) => unknown).apply(target, args);
      if ((prop !== 'release' && prop !== 'releaseMany') || delay.ms === 0) return f;
      return (...args: unknown[]) => {
        later(() => void Promise.resolve(f(...args)).catch(() => undefined), delay.ms);
        return Promise.reject(new StoreUnavailableError('the release timed out (it lands later)'));
      };
    },
  });
}
