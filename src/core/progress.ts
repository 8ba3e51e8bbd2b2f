/**
 * LeaseOptions.progressTimeout: the work must call `lease.progress()` at least this often while
 * it holds a term; without a call within it, `onStall` runs (the Lease stands down and releases).
 */
import type { Clock, ClockTimer } from './clock.js';
import { parseDuration, type Duration } from './config.js';
import { ConfigError } from './errors.js';

export class ProgressWatch {
  readonly timeoutMs: number | undefined;
  private last = 0;
  private timer: ClockTimer | undefined;

  /** @throws {ConfigError} a timeout that is not a positive duration. */
  constructor(
    private readonly clock: Clock,
    timeout: Duration | undefined,
  ) {
    this.timeoutMs = timeout === undefined ? undefined : parseDuration(timeout, 'progress timeout');
    if (this.timeoutMs !== undefined && this.timeoutMs <= 0) throw new ConfigError('progress timeout must be greater than 0');
  }

  touch(): void {
    this.last = this.clock.monoNow();
  }

  /** Starts watching a term: `current()` false stops the watch; `onStall(idleMs)` when no progress came in time. */
  arm(current: () => boolean, onStall: (idleMs: number) => void): void {
    if (this.timeoutMs === undefined) return;
    const timeout = this.timeoutMs;
    const check = (): void => {
      this.timer = undefined;
      if (!current()) return;
      const idle = this.clock.monoNow() - this.last;
      if (idle >= timeout) {
        onStall(Math.round(idle));
        return;
      }
      this.timer = this.clock.setTimeout(check, timeout - idle);
      this.timer.unref();
    };
    this.last = this.clock.monoNow();
    this.timer = this.clock.setTimeout(check, timeout);
    this.timer.unref();
  }

  stop(): void {
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }
}
