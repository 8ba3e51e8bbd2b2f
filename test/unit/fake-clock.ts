import type { Clock, ClockTimer } from '../../src/core/clock.js';

interface FakeTimer extends ClockTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/**
 * A clock that only moves when told to. `advance(ms)` fires the timers that fall due, in order of
 * due time (then creation), letting promise chains settle after each one, so a test walks the
 * engine through minutes of renewals in a few milliseconds and always the same way.
 */
export class FakeClock implements Clock {
  private mono = 1_000;
  // Wall and world time are the monotonic clock plus an offset that only suspensions and steps
  // change. Summing fractional timer delays onto an epoch-sized number instead lost precision
  // (2700 came out as 2700.0002), which made exact comparisons flaky.
  private wallOffset = Date.UTC(2026, 0, 1) - 1_000;
  /** Time as the rest of the world sees it (a store's clock runs on it): suspensions count. */
  private outsideOffset = Date.UTC(2026, 0, 1) - 1_000;
  private seq = 0;
  private readonly timers = new Set<FakeTimer>();

  monoNow(): number {
    return this.mono;
  }

  wallNow(): number {
    return this.mono + this.wallOffset;
  }

  setTimeout(fn: () => void, ms: number): ClockTimer {
    const t: FakeTimer = { at: this.mono + Math.max(0, ms), seq: this.seq++, fn, unref: () => t };
    this.timers.add(t);
    return t;
  }

  clearTimeout(timer: ClockTimer | undefined): void {
    if (timer !== undefined) this.timers.delete(timer as FakeTimer);
  }

  /** Timers still pending. */
  get pending(): number {
    return this.timers.size;
  }

  /** Moves both clocks forward by `ms`, firing every timer due on the way. */
  async advance(ms: number): Promise<void> {
    const target = this.mono + ms;
    await settle();
    for (;;) {
      let next: FakeTimer | undefined;
      for (const t of this.timers) if (t.at <= target && (next === undefined || t.at < next.at || (t.at === next.at && t.seq < next.seq))) next = t;
      if (next === undefined) break;
      this.timers.delete(next);
      // Never backwards: after block(), timers already overdue fire at the blocked-to time.
      this.mono = Math.max(this.mono, next.at);
      next.fn();
      await settle();
    }
    this.mono = Math.max(this.mono, target);
    await settle();
  }

  /** Advances in steps until `cond()` holds; fails after `maxMs` of fake time. */
  async until(cond: () => boolean, maxMs = 60_000, stepMs = 10): Promise<void> {
    for (let waited = 0; !cond(); waited += stepMs) {
      if (waited >= maxMs) throw new Error(`condition not met within ${maxMs}ms of fake time`);
      await this.advance(stepMs);
    }
  }

  /**
   * What a suspended guest sees when it wakes: the wall clock moved `ms`, the monotonic clock
   * did not count it, and no timer ran in between.
   */
  suspend(ms: number): void {
    this.wallOffset += ms;
    this.outsideOffset += ms;
  }

  /** Like suspend(), but the guest's wall clock was not re-synced on waking (only the world moved). */
  suspendUnsynced(ms: number): void {
    this.outsideOffset += ms;
  }

  /** The world's time: what a store's clock reads. */
  outsideNow(): number {
    return this.mono + this.outsideOffset;
  }

  /**
   * The event loop was blocked (or the process stopped and its monotonic clock kept counting):
   * every clock moves `ms` and no timer runs. Timers already due fire on the next advance().
   */
  block(ms: number): void {
    this.mono += ms;
  }

  /** The wall clock alone steps (an NTP correction, or a re-sync after a restore). */
  stepWall(ms: number): void {
    this.wallOffset += ms;
  }
}

/** Lets every promise chain that is ready run to completion (macrotask turns, not time). */
export async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}
