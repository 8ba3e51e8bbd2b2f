/**
 * A waiter registration kept by one Lease between two contentions (AcquireOptions.stayRegistered).
 *
 * A contender that gives up only to contend again at once (per-slot cron: the wait for an
 * earlier slot's term ends at the next slot, whose try follows) keeps its registration instead
 * of withdrawing it, and the next contention takes it over with its nonces: a term a release
 * handed it in between is then that contention's. Withdrawing instead races the release: on a
 * loaded store the withdrawal lands after the release handed it a term, a term that nobody runs
 * and that every other contender reads as taken after it gave up.
 *
 * A kept registration outlives a process that dies with it (up to two TTLs, on the store). The
 * term a release hands it is an offer until this process's next claim accepts it, and lapses at
 * the end of its acceptance window, a third of the TTL after the release (at least 500 ms, at
 * most the TTL; PostgreSQL migration 17, MySQL migration 10): a replica killed between slots
 * costs the lease that window, not a TTL.
 */
import type { Registration } from './contention.js';

export class KeptRegistration {
  private kept: Registration | undefined;

  /** `withdraw` sends the release that withdraws a registration (and a term handed to it); it never throws. */
  constructor(private readonly withdraw: (r: Registration) => Promise<unknown>) {}

  /**
   * A contention ended with registration `r` (undefined: none): kept for the next one when
   * `keep`, else withdrawn now. Best effort: a withdrawal that fails costs what a crash would
   * (a handed term's acceptance window, a third of a TTL; one TTL on schemas before it).
   */
  async settle(r: Registration | undefined, keep: boolean): Promise<void> {
    if (r === undefined) return;
    if (keep) this.kept = r;
    else await this.withdraw(r);
  }

  /**
   * The kept registration, for a contention by `holder`. One of another identity (regenerated
   * since) is withdrawn instead, without waiting: the contention begins at once, as without one.
   */
  take(holder: string): Registration | undefined {
    const r = this.kept;
    this.kept = undefined;
    if (r === undefined || r.holder === holder) return r;
    void this.withdraw(r);
    return undefined;
  }

  /** No contention will follow (release, close): withdraw what is kept. */
  async withdrawNow(): Promise<void> {
    const r = this.kept;
    this.kept = undefined;
    if (r !== undefined) await this.withdraw(r);
  }
}
