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

/**
 * The longest delay a timer holds. Node fires a longer one after 1 ms (with a
 * TimeoutOverflowWarning), so a caller that re-arms until a far deadline busy-loops: a monthly
 * cron slot is more than 24.8 days away for the first week of every month.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * Resolves after `ms` on `clock`, or at once when `signal` aborts. Never rejects. A wait longer
 * than a timer holds is slept in chunks of at most MAX_TIMER_MS, each measured on the monotonic
 * clock, so it wakes about once in 24.8 days instead of every millisecond.
 */
export function sleepOn(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted === true) return resolve();
    const until = clock.monoNow() + ms;
    let timer: ClockTimer | undefined;
    const arm = (): void => {
      timer = clock.setTimeout(wake, Math.min(MAX_TIMER_MS, Math.max(0, until - clock.monoNow())));
    };
    function wake(): void {
      if (until - clock.monoNow() > 0 && ms > MAX_TIMER_MS) return arm();
      done();
    }
    function done(): void {
      clock.clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
    arm();
  });
}
