/**
 * startCron's reading of the store's clock: the store's time minus this host's wall time, as the
 * last ledger answer gave it. Slots are judged by the store's clock whatever this host's says; a
 * host far off it is still worth saying (its logs, and any job that reads the local time, are that
 * far off): once, and again whenever the offset moves by the bound.
 */
import type { Clock } from '../core/clock.js';
import type { LoggerLike } from '../core/logger.js';

/** A host clock further than this from the store's is logged (the lag of etcd's clock bound included). */
const SKEW_WARN_MS = 2000;

export class StoreOffset {
  private offsetMs = 0;
  /** The offset last warned about. */
  private warnedOffsetMs = 0;

  constructor(
    private readonly clock: Clock,
    private readonly logger: LoggerLike,
    private readonly name: string,
  ) {
    this.startedAtWall = clock.wallNow();
  }

  /** Takes in a store answer's time; returns it. */
  note(storeNowMs: number): number {
    const offsetMs = storeNowMs - this.clock.wallNow();
    this.offsetMs = offsetMs;
    if (Math.abs(offsetMs) > SKEW_WARN_MS && Math.abs(offsetMs - this.warnedOffsetMs) > SKEW_WARN_MS) {
      this.warnedOffsetMs = offsetMs;
      this.logger.warn(
        { lease: this.name, offsetMs: Math.round(offsetMs) },
        `leasehold: this host's clock is ${(Math.abs(offsetMs) / 1000).toFixed(1)}s ${offsetMs < 0 ? 'ahead of' : 'behind'} the store's; slots are judged by the store's clock`,
      );
    }
    return storeNowMs;
  }

  /**
   * This replica was up from when its cron started (this host's wall clock). A name with no rows
   * owes the slots since: a follower waiting in leader mode, or a slow first term, was there to
   * run them.
   */
  private readonly startedAtWall: number;

  /** When this replica started, by the store's clock through the offset `storeNowMs` gives; at most `storeNowMs`. */
  startedAt(storeNowMs: number): number {
    return Math.min(storeNowMs, this.startedAtWall + storeNowMs - this.clock.wallNow());
  }

  /** The store's time now, by this host's clock and the last offset seen. */
  now(): number {
    return this.clock.wallNow() + this.offsetMs;
  }
}
