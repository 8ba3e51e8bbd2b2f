/**
 * Per-slot cron with liveness 'session' (issue 33 item 5). Nobody claims between slots, so a
 * replica that dies mid-job would be noticed only by the next slot's claims, or at its term's
 * TTL. Instead a replica whose claim found the slot's term held keeps its session open and waits
 * on the lease's session lock, which the store grants the moment the holder's session ends:
 *  - its process died mid-job: the slot is owed, and this replica's claim (with the lock, so the
 *    store ends the dead term and ties the new one to this session) reruns it or records it per
 *    onInterrupted, within milliseconds of the death;
 *  - it released the term over its session (the job done): one ledger read says the slot is
 *    finished, and the lock goes at once (the session closes), so that the next slot's claims
 *    tie their term to whichever session takes the lock then.
 * The replica's claims in per-slot mode all go through here (AcquireOptions.session), so that
 * the session that waited is the one that claims.
 */
import { sleepOn, type Clock } from '../core/clock.js';
import type { LeasePort, LeaseSession } from '../core/port.js';

/** What a busy answer leaves this replica to do. */
type AfterBusy =
  /** Wait on the lock (keep the session): the term is tied to its holder's session. */
  | 'wait'
  /** The lock was granted after the claim went out: the holder's session ended since; claim again now. */
  | 'again'
  /** Nothing to wait on: the term is tied to no session this replica can see end; its expiry decides. */
  | 'expiry';

export class SessionWatch {
  private session: LeaseSession | undefined;
  /** The session held the lock when the last claim went out. */
  private heldAtClaim = false;
  private granted: Promise<void> | undefined;

  constructor(
    private readonly store: LeasePort,
    private readonly name: string,
    private readonly ttlMs: number,
  ) {}

  /** The session for this replica's next claim: the one kept (waiting on the lock, or holding it), else a new one. */
  async forClaim(signal: AbortSignal): Promise<LeaseSession> {
    if (this.session === undefined || this.session.ended) {
      this.granted = undefined;
      this.session = await this.store.openSession!(this.name, this.ttlMs, { signal });
    }
    this.heldAtClaim = this.session.holdsLock;
    return this.session;
  }

  /** The claim won: the term took the session (it is released over it, and closed with it). */
  won(): void {
    this.session = undefined;
    this.granted = undefined;
  }

  /** The claim was answered busy (or got no answer). */
  busy(): AfterBusy {
    const s = this.session;
    if (s === undefined || s.ended) return 'expiry';
    if (s.holdsLock) {
      if (!this.heldAtClaim) return 'again';
      // Held when the claim went out, and still busy: the live term is tied to no session (or to
      // one of another server instance). Keeping the lock would only make the next slot's
      // winner's term untied too, unless this replica happens to claim first.
      void this.letGo();
      return 'expiry';
    }
    // Twice the TTL: past any term's expiry, where the recheck of ./cron.ts looks anyway; each
    // busy answer starts it again (SQLite: re-reads which process holds the term).
    this.granted = s.waitForLock(2 * this.ttlMs);
    return 'wait';
  }

  /** Lets the lock go (closes the session): the slot it waited on is finished. */
  async letGo(): Promise<void> {
    const s = this.session;
    this.session = undefined;
    this.granted = undefined;
    await s?.close();
  }

  /**
   * Sleeps `ms` on `clock`, or less: resolves true as soon as the lock is this replica's (now or
   * while sleeping), false when the time ran out or `signal` aborted.
   */
  async nap(clock: Clock, ms: number, signal: AbortSignal): Promise<boolean> {
    if (this.holding()) return true;
    const granted = this.granted;
    if (granted === undefined) {
      await sleepOn(clock, ms, signal);
      return false;
    }
    const stop = new AbortController();
    const both = AbortSignal.any([signal, stop.signal]);
    let won = false;
    await Promise.race([
      sleepOn(clock, ms, both),
      granted.then(() => {
        won = true;
      }),
    ]);
    stop.abort();
    return won && this.holding();
  }

  private holding(): boolean {
    return this.session?.holdsLock === true;
  }

  async close(): Promise<void> {
    await this.letGo();
  }
}
