import { performance } from 'node:perf_hooks';

/** A timer a {@link Clock} handed out. `unref()` lets the process exit while it is pending. */
export interface ClockTimer {
  unref(): unknown;
}

/**
 * Every reading of time and every timer the engine uses, in one place, so a test can pass a fake
 * clock and prove the engine's rules without sleeping (the `LeaseholdOptions.clock` option).
 */
export interface Clock {
  /**
   * Monotonic milliseconds for local deadlines. It does not jump with NTP, but a suspended VM's
   * monotonic clock does not count the suspension either: that is why every deadline here is
   * derived from the store's answer, and why suspension has detectors of its own.
   */
  monoNow(): number;
  /** Wall-clock milliseconds since the epoch; compared with monoNow() to notice a suspension. */
  wallNow(): number;
  setTimeout(fn: () => void, ms: number): ClockTimer;
  clearTimeout(timer: ClockTimer | undefined): void;
}

/** The process's own clocks and timers: the default. */
export const realClock: Clock = {
  monoNow: () => performance.now(),
  wallNow: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (timer) => {
    if (timer !== undefined) clearTimeout(timer as NodeJS.Timeout);
  },
};

export function jitter(maxMs: number): number {
  return Math.random() * Math.max(0, maxMs);
}

/** Resolves after `ms` on `clock`, or at once when `signal` aborts. Never rejects. */
export function sleepOn(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted === true) return resolve();
    const timer = clock.setTimeout(done, ms);
    function done(): void {
      clock.clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
