/**
 * A scheduled singleton: every replica calls {@link startCron} with the same schedule, and each
 * slot runs once across them. Each slot is claimed in the ledger with a fencing token before the
 * job starts and completed with its outcome after, so each slot runs once through failovers.
 *
 * Two modes decide who may claim a slot:
 *  - 'per-slot' (default): nobody holds the lease between slots. When a slot comes due, every
 *    replica tries the lease once without waiting; the one that wins holds a term (a new, larger
 *    token) for that slot alone: it reconciles what the ledger owes, claims the slot under that
 *    term, runs the job, completes it and releases. A replica that dies between slots holds
 *    nothing, so the next slot is claimed on time by any other; one that dies mid-job blocks
 *    that slot's term until it expires, and the next winner handles it per onInterrupted.
 *    The losers' one failed attempt is the whole cost of contention.
 *  - 'leader': the replicas elect a leader (an Elector) that holds the lease between slots and
 *    claims each slot with its one term's token. Cheaper per slot (no acquire and release), but
 *    a leader's death costs the slots that come due until its lease expires (caught up per
 *    catchUp).
 * Both rely on the same fence: a ledger claim checks, in the store, that the lease row is held by
 * this holder with this token and not expired, so a term that has ended claims nothing, and the
 * claim rule (ledger.ts) refuses a slot a later term holds.
 *
 * Rules (docs/cron.md, "Run a nightly job once across replicas", says the same):
 *  - Time: "is this slot due" is judged by the store's clock. The leader sleeps on its own clock
 *    until its estimate of the store's time (the offset seen on the last ledger answer) reaches
 *    the slot; the claim refuses a slot the store says is not due yet ('early'), and the leader
 *    sleeps the difference and tries again.
 *  - Catch-up, on winning a term (per-slot: on each slot's term, over the slots since the last
 *    one this replica saw handled): slots in (store now - window, store now] that the ledger has
 *    no row for were missed while no replica led. 'latest' runs the newest and records the
 *    others skipped; 'all' runs them in order; 'none' records them all skipped. A name with no
 *    scheduled row at all has missed nothing: its first slot is the next one. Slots older than
 *    the window are not recorded.
 *  - Interrupted: slots an earlier term left 'claimed' are marked 'interrupted' when a term is
 *    won; those within the window are run again ('rerun', at-least-once) or recorded skipped.
 *  - No overlap: the leader runs one job at a time. A slot that comes due while a job is still
 *    running is recorded 'skipped' with reason 'overlap'; the next run is the first slot after
 *    the job ended.
 *  - A store error in a ledger call is retried while the term lasts (a claim or completion by
 *    the same token is idempotent). A completion that never lands leaves the slot 'claimed':
 *    the next term marks it interrupted, and by default reruns it.
 */
import { parseDuration } from '../core/config.js';
import { MAX_TIMER_MS, sleepOn } from '../core/clock.js';
import { ConfigError, LeaseLostError, NotAcquiredError, errorMessage, isRetryableError } from '../core/errors.js';
import type { Lease, Term } from '../core/lease.js';
import type { Leasehold } from '../core/leasehold.js';
import { slotsBetween } from './schedule.js';
import { CronHandle, type CronOptions, type SlotEvent, type SlotJob } from './cron-handle.js';
import { cronPruner, cronRetention } from './retention.js';
import { scheduleNoter } from './schedule-record.js';
import { SessionWatch } from './session-watch.js';
import { StoreOffset } from './store-offset.js';
import { earlyClaim, sendsClaimEarly } from './early-claim.js';
import { slotStatus, trySlotTerm } from './slot-wait.js';
import { EARLY_HOLD_MS, ERROR_RETRY_MS, HOLD_FOR_NEXT_MS, RECHECK_AFTER_MS, startupOnTime } from './per-slot-timing.js';
import { FINAL_SLOT_STATUSES, ledgerCall, slotIdempotencyKey, slotKey, type SlotClaimResult, type SlotLedgerPort, type SlotRecord, type SlotTerm } from './ledger.js';

export { CronHandle, type CatchUp, type CronEvents, type CronMode, type CronOptions, type CronRetention, type SlotContext, type SlotEvent, type SlotJob } from './cron-handle.js';

/**
 * Runs `job` once per slot of `options.schedule` across every replica that calls this with the
 * same `name` and store. `ledger` must live in the same store as the leases (its claims check the
 * lease row): `PostgresSlotLedger`, `SqliteSlotLedger`, `RedisSlotLedger` or `EtcdSlotLedger`.
 * @throws {ConfigError} bad options.
 */
export function startCron(leasehold: Leasehold, ledger: SlotLedgerPort, name: string, options: CronOptions, job: SlotJob): CronHandle {
  const catchUp = options.catchUp ?? 'latest';
  if (!['latest', 'all', 'none'].includes(catchUp)) throw new ConfigError(`catchUp ${JSON.stringify(catchUp)} is not one of latest, all, none`);
  const onInterrupted = options.onInterrupted ?? 'rerun';
  if (onInterrupted !== 'rerun' && onInterrupted !== 'skip') throw new ConfigError(`onInterrupted ${JSON.stringify(onInterrupted)} is not rerun or skip`);
  const windowMs = parseDuration(options.catchUpWindow ?? '1h', 'catchUpWindow');
  const mode = options.mode ?? 'per-slot';
  if (mode !== 'per-slot' && mode !== 'leader') throw new ConfigError(`mode ${JSON.stringify(mode)} is not per-slot or leader`);
  const stop = new AbortController();
  const signal = options.signal === undefined ? stop.signal : AbortSignal.any([stop.signal, options.signal]);
  const { schedule } = options;
  // A schedule with no next slot would have this replica lead for ever and run nothing.
  if (schedule.next(leasehold.clock.wallNow()) === null) throw new ConfigError(`schedule ${schedule.description} has no next slot: it never fires`);
  const clock = leasehold.clock;
  const prune = cronPruner(ledger, name, cronRetention(options.retention, windowMs, ledger), { catchUpWindowMs: windowMs, clock, logger: leasehold.logger, signal });
  const emit = (e: SlotEvent): void => void handle.emit('slot', e);
  /** Not retryable (schema, SQL): running without a working ledger would run slots unrecorded. */
  const fail = (e: unknown): void => {
    // Not awaited: stop() waits for every tracked loop, this one included, so awaiting
    // it here left stop() (the user's call too) pending for ever. Its synchronous part
    // has aborted everything before the 'error' (which throws with no listener).
    void handle.stop().catch(() => undefined);
    handle.emit('error', e);
  };
  const { schedule: _s, catchUp: _c, catchUpWindow: _w, onInterrupted: _o, mode: _m, signal: _g, retention: _r, ...leaseOptions } = options;
  let handle: CronHandle;
  if (mode === 'leader') {
    const elector = leasehold.elect(
      name,
      {
        onElected: (term) => {
          handle.track(
            lead(term).catch((e: unknown) => {
              if (!term.signal.aborted) fail(e);
            }),
          );
        },
      },
      { ...leaseOptions, signal },
    );
    // onElected runs after an await inside the elector, never before this line.
    handle = new CronHandle({ name, schedule, ledger }, mode, elector.lease, elector, stop);
  } else {
    const lease = leasehold.lease(name, leaseOptions);
    handle = new CronHandle({ name, schedule, ledger }, mode, lease, undefined, stop);
  }

  const offset = new StoreOffset(clock, leasehold.logger, name);
  const noteStoreNow = (storeNowMs: number): number => offset.note(storeNowMs);
  const storeNow = (): number => offset.now();

  const call = <T>(term: Term, fn: () => Promise<T>): Promise<T | undefined> => ledgerCall(leasehold, name, term, fn);
  /** The schedule's record (cron ls, the dashboard): written when it changes, not per slot. */
  const note = scheduleNoter(ledger, { name, schedule, mode, catchUp, catchUpWindowMs: windowMs }, leasehold.logger);

  async function lead(term: Term): Promise<void> {
    const lease = handle.lease;
    const who: SlotTerm = { name, holder: term.holder, token: term.token };
    const stale = await call(term, () => ledger.interruptStale(who));
    if (stale === undefined || stale.fenced) return;
    const now = noteStoreNow(stale.storeNowMs);
    const windowStart = now - windowMs;
    const recent = await call(term, () => ledger.records(name, { sinceMs: windowStart, limit: 1_000_000 }));
    if (recent === undefined) return;
    // Slots before the name's first row were never owed: a name the ledger has never seen
    // starts with its next slot after this replica started, and one first run 10 minutes ago
    // owes nothing from before that. (From its election instead, a follower elected when the
    // first leader died before writing a row left the slot due meanwhile with no row at all.)
    const older = await call(term, () => ledger.records(name, { sinceMs: 0, untilMs: windowStart, limit: 1 }));
    if (older === undefined) return;
    const lower = older.length > 0 ? windowStart : (recent.find((r) => r.slotAtMs !== null)?.slotAtMs ?? Math.max(windowStart, offset.startedAt(now)));
    const known = new Map(recent.map((r) => [r.key, r]));
    const due = slotsBetween(schedule, lower, now);
    const missed = due.filter((t) => !known.has(slotKey(t)));
    const interrupted = recent.filter((r) => r.status === 'interrupted' && r.token < term.token && r.slotAtMs !== null).map((r) => r.slotAtMs!);
    let run = missed;
    if (catchUp !== 'all' && missed.length > 0) {
      run = catchUp === 'latest' ? missed.slice(-1) : [];
      const skipped = catchUp === 'latest' ? missed.slice(0, -1) : missed;
      const reason = catchUp === 'latest' ? `missed while no replica led; --catch-up latest ran ${slotKey(missed.at(-1)!)}` : 'missed while no replica led; --catch-up none';
      if (!(await skip(term, skipped, reason))) return;
    }
    // Interrupted slots go through the claim, which reruns or skips them per --on-interrupted.
    const owed = [...new Set([...interrupted, ...run])].sort((a, b) => a - b);
    await note(term, owed, now);
    let cursor: number | undefined = await runAll(term, lease, owed, Math.max(lower, due.at(-1) ?? lower));
    if (cursor !== undefined) await note(term, [], storeNow());
    while (cursor !== undefined && !term.signal.aborted && !handle.draining.signal.aborted) {
      const next = schedule.next(cursor);
      // A schedule of the caller's that has ended: say so and stop, rather than lead idle for ever.
      if (next === null) throw new ConfigError(`schedule ${schedule.description} has no slot after ${slotKey(cursor)}; the cron stops`);
      const wait = next - storeNow();
      if (wait > 0) {
        // A monthly slot can be more than a timer holds away: sleep a chunk, then judge again by
        // the wall clock (a monotonic deadline weeks out drifts by every suspension in between).
        await sleepOn(clock, Math.min(wait, MAX_TIMER_MS), term.signal);
        continue;
      }
      // Woken late (a paused process, a slow store): more than one slot is due, and all but
      // the newest were missed by this leader. They follow --catch-up like a failover's.
      const late = slotsBetween(schedule, cursor, storeNow());
      let toRun: number[] = [next];
      if (late.length > 1) {
        toRun = catchUp === 'all' ? late : catchUp === 'latest' ? late.slice(-1) : [];
        const reason = `missed: the leader was late (paused or slow); --catch-up ${catchUp}`;
        if (!(await skip(term, late.filter((t) => !toRun.includes(t)), reason))) return;
      }
      cursor = await runAll(term, lease, toRun, Math.max(next, late.at(-1) ?? next));
    }
  }

  /**
   * 'per-slot': sleeps to each slot, then tries the lease once; the winner handles the slot in
   * a term of its own and releases. A loser does nothing more for that slot: the winner claims
   * it, or (a dead holder whose term has not expired yet) the next slot's winner finds it
   * missing and handles it per catchUp.
   */
  async function perSlot(lease: Lease, watch: SessionWatch | undefined): Promise<void> {
    /** Sleeps, or less with liveness 'session': true when the watched term's holder let the lock go (./session-watch.ts). */
    const nap = async (ms: number): Promise<boolean> => (watch === undefined ? (await sleepOn(clock, ms, signal), false) : watch.nap(clock, ms, signal));
    /**
     * Every slot up to here has a ledger row, as this replica last read or wrote it; undefined
     * until its first term, which reads the whole window as a new leader does.
     */
    let checkedThrough: number | undefined;
    /** Every slot up to here is handled or another replica's to handle: the next to try is after it. */
    let cursor = storeNow();
    /**
     * A replica starting up catches up at once, as a new leader would: the slots missed while no
     * replica ran (a whole fleet restarted) are not made to wait for the next slot.
     */
    let pending: 'startup' | 'late' | number = 'startup';
    /**
     * What this replica tried while another replica's term held the lease, to look at again
     * when that term runs out, if that is before the next slot: a winner that dies mid-job
     * leaves its slot 'claimed' and its term running out, and with nobody holding the lease
     * between slots no one else would look before the next slot (a day away for a nightly job,
     * the slot out of the catch-up window by then). A winner that finished has recorded the
     * slot, and one ledger read says so.
     */
    let recheck: { what: 'startup' | 'late' | number; atMs: number } | undefined;
    /** The slot about to be tried is recorded interrupted: owed, whatever term was released since. */
    let owed = false;
    while (!signal.aborted && !handle.draining.signal.aborted) {
      if (pending !== 'startup') {
        const next = schedule.next(cursor);
        if (next === null) throw new ConfigError(`schedule ${schedule.description} has no slot after ${slotKey(cursor)}; the cron stops`);
        if (recheck !== undefined && recheck.atMs < next) {
          const wait = recheck.atMs - storeNow();
          if (wait > 0 && !(await nap(Math.min(wait, MAX_TIMER_MS)))) continue;
          const again = recheck;
          recheck = undefined;
          const found = typeof again.what === 'number' ? await slotStatus(ledger, name, again.what) : 'unknown';
          if (found === 'finished') {
            await watch?.letGo();
            continue;
          }
          // Recorded interrupted by the term that held it (a drained or stopped winner that
          // released): owed, though a term since the slot was released (see trySlotTerm's owed).
          owed = found === 'interrupted';
          pending = again.what;
        } else {
          const wait = next - storeNow();
          if (wait > 0) {
            // In chunks, judged again by the wall clock each time (see lead()). The watched
            // term's holder gone before the next slot: look at what it left now.
            if ((await nap(Math.min(wait, MAX_TIMER_MS))) && recheck !== undefined) recheck.atMs = storeNow();
            continue;
          }
          // The next slot's try comes first, and looks at whatever an ended term left.
          recheck = undefined;
          // Woken late (paused, a slow store): more than one slot is due, and all but the newest
          // were slept through here. Whatever no other replica claimed follows catchUp.
          const late = slotsBetween(schedule, cursor, storeNow());
          pending = late.length > 1 ? 'late' : next;
          cursor = late.at(-1) ?? next;
        }
      }
      let term: Term | undefined;
      try {
        // One try; for an on-time slot held by an earlier slot's term, a wait for it (./slot-wait.ts).
        const session = await watch?.forClaim(signal);
        // A drain during the reads and naps above: no claim goes out after it.
        if (handle.draining.signal.aborted) break;
        const slot = typeof pending === 'number' ? pending : undefined;
        // A drain ends the wait, but not a claim in flight: a term won then records the slot
        // interrupted (runSlot), where one handed back unused would read, to every other replica,
        // as this slot's winner having released, and nobody would run or record the slot.
        term = await trySlotTerm(lease, slot, { signal, stopWaiting: handle.draining.signal, session, owed, waitMs: () => (slot === undefined ? 0 : (schedule.next(slot) ?? slot) - storeNow()) });
        watch?.won();
      } catch (e) {
        // Out of the loop, not the function: a kept registration is withdrawn below.
        if (signal.aborted || handle.draining.signal.aborted) break;
        // Busy: another replica's term (this slot's winner, an earlier slot's job still running,
        // or a dead replica's term running out). Unavailable: this replica sits the slot out.
        if (!(e instanceof NotAcquiredError || isRetryableError(e))) throw e;
        // A term taken since this slot came due, and released by its holder: that winner was
        // alive to the end of its term, and handled the slot (as a busy answer's would).
        if (e instanceof NotAcquiredError && e.releasedSince) recheck = undefined;
        else if (e instanceof NotAcquiredError && e.expiresInMs !== null) recheck = { what: pending, atMs: storeNow() + e.expiresInMs + RECHECK_AFTER_MS };
        // No answer at all (the store unavailable, a claim that timed out): nothing was decided,
        // the slot is still anyone's, and this replica may be the only one left to run it. It
        // tries again shortly, until the next slot, rather than leave the slot to be found
        // missing then.
        else if (!(e instanceof NotAcquiredError) || (e.holder === null && e.expiresInMs === null)) recheck = { what: pending, atMs: storeNow() + ERROR_RETRY_MS };
        // Liveness 'session': the lock granted since the claim went out means the holder's session
        // ended meanwhile: look again now (./session-watch.ts).
        if (e instanceof NotAcquiredError && watch?.busy() === 'again') recheck = { what: pending, atMs: storeNow() };
      }
      const what = pending;
      pending = 0;
      owed = false;
      if (term === undefined) continue;
      try {
        /** The on-time slot this term was won for, when its first answer said it was not due yet. */
        let earlyFor: number | undefined;
        for (let slot: typeof what = what; ; ) {
          const r = await slotTerm(term, lease, slot, checkedThrough);
          // Not due by the store's clock: this slot was timed by this host's clock before any
          // store answer (this replica's first tries were busy). That answer set the offset, and
          // this is still the replica's first term: it catches up as at startup, by the store's
          // clock (a host 30 s ahead would otherwise take this slot, its lead away, as the cursor
          // and sleep through every slot in between).
          if (r === 'early') {
            if (typeof slot === 'number') earlyFor = slot;
            slot = 'startup';
            continue;
          }
          if (r === undefined) break;
          checkedThrough = r;
          // At startup the cursor came from this host's clock, before any store answer: the
          // term's answer, by the store's clock, replaces it.
          cursor = slot === 'startup' ? r : Math.max(cursor, r);
          // A slot due before this term's release would land (a startup's reads, or a job that
          // ended just before the next slot) would find the lease still held on every other
          // replica, and be missed: this term runs it instead, as a leader would.
          const next = schedule.next(cursor);
          // Up to the slot it was won for, a term told 'early' holds longer (EARLY_HOLD_MS). So
          // does a term that began at or after the next slot by the lease store's clock: released
          // unused, it reads to a store that refuses a contender after a release
          // (unlessReleasedSince) as that slot handled, and every replica's claim for it is
          // refused. On etcd that clock is the granting host's and this replica's estimate lags
          // it by up to a second (per-slot-timing.ts), so the slot can still look that far off.
          // A start further past the slot than that is a host clock ahead, which etcd's refusal
          // does not trust (src/backends/etcd/seen.ts): that term lets go as before.
          const beganAfter = next !== null && term.acquiredAtMs >= next && term.acquiredAtMs - next < EARLY_HOLD_MS;
          const holdFor = beganAfter || (earlyFor !== undefined && next !== null && next <= earlyFor) ? EARLY_HOLD_MS : HOLD_FOR_NEXT_MS;
          if (next === null || next - storeNow() > holdFor || term.signal.aborted || handle.draining.signal.aborted) break;
          if (next > storeNow()) await sleepOn(clock, next - storeNow(), term.signal);
          // Drained while holding over: the next slot is left to the others, as if never held.
          if (term.signal.aborted || handle.draining.signal.aborted) break;
          slot = next;
        }
      } finally {
        // Held only while the slot's work ran: the next slot is anyone's.
        await lease.release().catch(() => false);
      }
    }
    // Drained (or stopped): a waiter registration kept for a next try that will not come
    // (./slot-wait.ts) is withdrawn now, not left to stop(), which may be much later.
    await lease.release().catch(() => false);
  }

  /**
   * One term of 'per-slot': what the ledger owes (slots an ended term left claimed or
   * interrupted, and slots with no row, since `since` or within the window), then `what`: an
   * on-time slot, which runs whatever catchUp says of the older ones; or a startup or a late
   * wake, where every due slot with no row, the newest included, follows catchUp (as a new or
   * late leader's do). Resolves with the time every slot up to which is handled, 'early' when
   * the slot is not due by the store's clock (this host's is ahead), or undefined when the term
   * is over.
   */
  async function slotTerm(term: Term, lease: Lease, what: 'startup' | 'late' | number, since: number | undefined): Promise<number | 'early' | undefined> {
    /** The on-time slot's claim, when it went out with the reads (./early-claim.ts). */
    let ahead: Promise<SlotClaimResult | undefined> | undefined;
    const claimAhead = sendsClaimEarly(leasehold.store, catchUp, onInterrupted) ? (t: number) => (ahead = earlyClaim(claimSlot(term, t))) : undefined;
    let cursor: number | 'early' | undefined;
    try {
      cursor = await owedThen(term, lease, what, since, claimAhead);
    } catch (e) {
      // Settled before the term moves on (it is released next); the first error is the one told.
      await ahead?.catch(() => undefined);
      throw e;
    }
    // A claim whose answer the term never used (it ended first, or the reads said nothing was
    // left to do) still says a ledger that rejects claims: that goes where any ledger error goes
    // (the cron stops), rather than the next slot's term finding out the same way.
    await ahead;
    return cursor;
  }

  /** slotTerm's work; `claimAhead`, when given, sends the on-time slot's claim (slotTerm settles it). */
  async function owedThen(term: Term, lease: Lease, what: 'startup' | 'late' | number, since: number | undefined, claimAhead?: (t: number) => Promise<SlotClaimResult | undefined>): Promise<number | 'early' | undefined> {
    const who: SlotTerm = { name, holder: term.holder, token: term.token };
    let lower: number;
    /** The on-time slot's claim, when it went out with the reads. */
    let ahead: Promise<SlotClaimResult | undefined> | undefined;
    let upTo = typeof what === 'number' ? what : storeNow();
    /** The slot this term runs whatever catchUp says: the on-time one it was won for, or see below. */
    let onTime = typeof what === 'number' ? what : undefined;
    let rows: SlotRecord[];
    if (since === undefined) {
      // This replica's first term: the whole window, as a new leader reads it.
      const stale = await call(term, () => ledger.interruptStale(who));
      if (stale === undefined || stale.fenced) return undefined;
      const now = noteStoreNow(stale.storeNowMs);
      if (typeof what !== 'number') upTo = now;
      // Timed by this host's clock before any store answer: not due yet by the store's.
      else if (what > now) return 'early';
      if (typeof what === 'number') ahead = claimAhead?.(what);
      const windowStart = now - windowMs;
      const [recent, older] = await Promise.all([
        call(term, () => ledger.records(name, { sinceMs: windowStart, limit: 1_000_000 })),
        call(term, () => ledger.records(name, { sinceMs: 0, untilMs: windowStart, limit: 1 })),
      ]);
      if (recent === undefined || older === undefined) return undefined;
      rows = recent;
      const first = older.length > 0 ? undefined : recent.find((r) => r.slotAtMs !== null)?.slotAtMs;
      if (what === 'startup') onTime = startupOnTime(schedule, term.acquiredAtMs, now, recent, older.length === 0 && first === undefined);
      // Slots before the name's first row were never owed (as in lead()): a name the ledger has
      // never seen starts with the on-time slot, or at startup with the next one after this
      // replica started.
      lower = older.length > 0 ? windowStart : (first ?? Math.max(windowStart, Math.min(onTime === undefined ? now : onTime - 1, offset.startedAt(now))));
    } else {
      lower = Math.max(since, storeNow() - windowMs);
      // This replica knows every slot before this one has a row (it ran or skipped the last
      // one itself): nothing to read. The common case for a replica that wins twice in a row.
      if (slotsBetween(schedule, lower, upTo).filter((t) => t !== what).length === 0) rows = [];
      else {
        if (typeof what === 'number') ahead = claimAhead?.(what);
        const read = await call(term, () => ledger.records(name, { sinceMs: lower, untilMs: upTo, limit: 1_000_000 }));
        if (read === undefined) return undefined;
        rows = read;
        // A 'claimed' row below this live term's token is an ended term's (one term at a time):
        // marked interrupted first, so that history says so, then owed like any interrupted slot.
        if (rows.some((r) => r.status === 'claimed' && r.token < term.token)) {
          const stale = await call(term, () => ledger.interruptStale(who));
          if (stale === undefined || stale.fenced) return undefined;
          noteStoreNow(stale.storeNowMs);
          rows = rows.map((r) => (r.status === 'claimed' && r.token < term.token ? { ...r, status: 'interrupted' } : r));
        }
      }
    }
    const known = new Map(rows.map((r) => [r.key, r]));
    const due = slotsBetween(schedule, lower, upTo);
    // A startup term whose first answer came a period or more after its grant (a slow store):
    // the newest slot due by then runs too, as a leader's would; catchUp decides those between.
    const newest = what === 'startup' && onTime !== undefined && (due.at(-1) ?? onTime) > onTime ? due.at(-1) : undefined;
    // An on-time slot is this term's to claim whatever its row says (the claim decides);
    // catchUp decides only the slots before it.
    const missed = due.filter((t) => t !== onTime && t !== newest && !known.has(slotKey(t)));
    const interrupted = rows.filter((r) => r.status === 'interrupted' && r.token < term.token && r.slotAtMs !== null && r.slotAtMs <= upTo).map((r) => r.slotAtMs!);
    // The read says an earlier term finished this slot: this replica's try was answered after
    // that term had released (on SQLite, ten processes' write locks queue for longer than a
    // short job's whole term). That term settled what was owed before the slot first, so with
    // nothing missing or interrupted here either, there is nothing to do. (A first term's claim
    // went out with its reads and says 'done' too; one that claimed after all is run.)
    const own = typeof what === 'number' ? known.get(slotKey(what)) : undefined;
    if (typeof what === 'number' && own !== undefined && own.token < term.token && FINAL_SLOT_STATUSES.has(own.status) && missed.length === 0 && interrupted.length === 0 && !rows.some((r) => r.status === 'claimed' && r.token < term.token) && (await ahead)?.outcome !== 'claimed') {
      emit({ name, slot: slotKey(what), slotAtMs: what, token: term.token, event: 'done-already', reason: own.reason ?? own.status });
      return Math.max(lower, what);
    }
    let run = missed;
    if (catchUp !== 'all' && missed.length > 0) {
      run = catchUp === 'latest' && onTime === undefined ? missed.slice(-1) : [];
      const skipped = missed.filter((t) => !run.includes(t));
      const ran = newest ?? onTime ?? missed.at(-1)!;
      const why =
        what === 'late'
          ? 'missed: this replica was late (paused or slow) and no other claimed it'
          : what === 'startup'
            ? 'missed while no replica led'
            : 'missed: no replica could claim it (a term ran past it: a job that overran, or a dead replica\'s lease running out)';
      const reason = `${why}; --catch-up ${catchUp}${catchUp === 'latest' ? ` ran ${slotKey(ran)}` : ''}`;
      if (!(await skip(term, skipped, reason))) return undefined;
    }
    const owed = [...new Set([...interrupted, ...run, ...[onTime, newest].filter((t) => t !== undefined)])].sort((a, b) => a - b);
    const catchingUp = owed.filter((t) => t !== onTime && t !== newest);
    // The schedule's record says a catch-up before it runs; with none, it is written (a replica's
    // first term) beside the job, not before it.
    const noted = note(term, catchingUp, storeNow());
    if (catchingUp.length > 0) await noted;
    const cursor = await runAll(term, lease, owed, Math.max(lower, due.at(-1) ?? lower), onTime, ahead);
    await noted;
    if (cursor !== undefined && catchingUp.length > 0) await note(term, [], storeNow());
    return cursor;
  }

  /**
   * Runs `slots` in order, then records the slots that came due while the last job ran as
   * overlap. Resolves with the new cursor (everything up to it is handled), or undefined when
   * the term is over.
   */
  async function runAll(term: Term, lease: Lease, slots: number[], cursor: number, own?: number, ownClaim?: Promise<SlotClaimResult | undefined>): Promise<number | undefined> {
    const last = Math.max(cursor, ...slots);
    let ended = last;
    for (const t of slots) {
      const e = await runSlot(term, lease, t, t === own, t === own ? ownClaim : undefined);
      if (e === undefined) {
        // Drained before reaching the slot this term was won for: it still gets its row.
        if (own !== undefined && t !== own && slots.includes(own) && handle.draining.signal.aborted && !term.signal.aborted) await runSlot(term, lease, own, true, ownClaim);
        return undefined;
      }
      ended = Math.max(ended, e);
    }
    if (!(await skip(term, slotsBetween(schedule, last, ended), `overlap: the job of an earlier slot was still running`))) return undefined;
    return ended;
  }

  /** One claim of the slot; its store time is noted as it arrives (a claim sent ahead may be used later). */
  async function claimSlot(term: Term, slotAtMs: number): Promise<SlotClaimResult | undefined> {
    const c = await call(term, () => ledger.claim({ name, holder: term.holder, token: term.token, key: slotKey(slotAtMs), slotAtMs, onInterrupted, rerunFailed: false }));
    if (c !== undefined) noteStoreNow(c.storeNowMs);
    return c;
  }

  /** Records `slots` skipped; false when the term is over (fenced or aborted). */
  async function skip(term: Term, slots: number[], reason: string): Promise<boolean> {
    if (slots.length === 0) return true;
    const r = await call(term, () => ledger.skip({ name, holder: term.holder, token: term.token, reason, slots: slots.map((t) => ({ key: slotKey(t), slotAtMs: t })) }));
    if (r === undefined || r.fenced) return false;
    noteStoreNow(r.storeNowMs);
    for (const t of slots) emit({ name, slot: slotKey(t), slotAtMs: t, token: term.token, event: 'skipped', reason });
    return true;
  }

  /**
   * Claims, runs and completes one slot. Resolves with the store's time at completion (the slot's
   * own time when there was nothing to run), or undefined when the term is over.
   */
  async function runSlot(term: Term, lease: Lease, slotAtMs: number, own = false, claimed?: Promise<SlotClaimResult | undefined>): Promise<number | undefined> {
    const key = slotKey(slotAtMs);
    const base = { name, slot: key, slotAtMs, token: term.token };
    for (let ahead = claimed; ; ahead = undefined) {
      // Draining: claim nothing more (a claimed slot would only be recorded interrupted), except
      // the on-time slot a per-slot term was won for. Every other replica read that term as the
      // slot's winner and left the slot to it: unrecorded, nobody would run it; 'interrupted',
      // the next term reruns it (per onInterrupted).
      if (handle.draining.signal.aborted && !own) return undefined;
      // The claim sent with the term's reads (slotTerm), else one now.
      const claim = await (ahead ?? claimSlot(term, slotAtMs));
      if (claim === undefined || claim.outcome === 'fenced') return undefined;
      if (claim.outcome === 'early') {
        await sleepOn(clock, Math.min(MAX_TIMER_MS, Math.max(1, slotAtMs - claim.storeNowMs)), term.signal);
        continue;
      }
      if (claim.outcome === 'done') {
        const r = claim.record;
        emit({ ...base, event: r.status === 'skipped' && r.token === term.token ? 'skipped' : 'done-already', reason: r.reason ?? r.status });
        // No job ran: nothing came due "during" it.
        return slotAtMs;
      }
      const draining = handle.draining.signal;
      if (draining.aborted) {
        // Claimed, then told to stop before the job started: the job never ran, so the slot is
        // owed, and 'interrupted' makes the next leader run it (a 'failed' row it would not).
        await completeSlot(term, key, base, 'interrupted', null, `not started: ${stopReason(draining)} between the claim and the job's start`);
        return undefined;
      }
      emit({ ...base, event: 'started', delayMs: claim.storeNowMs - slotAtMs, ...(claim.rerunOf === null ? {} : { reason: `rerun of term ${claim.rerunOf}` }) });
      let status: 'succeeded' | 'failed' | 'interrupted';
      let exitCode: number | null = null;
      let reason: string | null = null;
      try {
        const r = await job({ name, slot: key, slotAtMs, token: term.token, term, lease, signal: term.signal, idempotencyKey: slotIdempotencyKey(name, key), rerunOf: claim.rerunOf });
        exitCode = r?.exitCode ?? 0;
        reason = r?.reason ?? null;
        status = exitCode === 0 ? 'succeeded' : 'failed';
      } catch (e) {
        status = 'failed';
        reason = errorMessage(e);
      }
      if (term.signal.aborted) {
        const why: unknown = term.signal.reason;
        status = 'interrupted';
        reason = `the term ended while the job ran (${why instanceof LeaseLostError ? why.reason : 'stopped'})`;
      } else if (draining.aborted && status === 'failed') {
        // Stopped (a signal forwarded to the job) before it could finish: owed, like a lost term's.
        status = 'interrupted';
        reason = `${stopReason(draining)} while the job ran${exitCode === null ? '' : ` (exit ${exitCode})`}`;
      }
      const ended = await completeSlot(term, key, base, status, exitCode, reason);
      // After a job only: a term that found its slot done already ran nothing (ten replicas'
      // first such terms were ten prunes at once).
      prune();
      return term.signal.aborted || draining.aborted ? undefined : ended;
    }
  }

  /**
   * Records the outcome. Completed even after the term ended: the row still carries this token
   * unless a later term re-claimed it, and then the store refuses this completion. Resolves with
   * the store's time, or undefined when it never landed.
   */
  async function completeSlot(
    term: Term,
    key: string,
    base: Pick<SlotEvent, 'name' | 'slot' | 'slotAtMs' | 'token'>,
    status: 'succeeded' | 'failed' | 'interrupted',
    exitCode: number | null,
    reason: string | null,
  ): Promise<number | undefined> {
    let done: { completed: boolean; storeNowMs: number } | undefined;
    for (let attempt = 0; done === undefined && attempt < 5; attempt++) {
      try {
        done = await ledger.complete({ name, holder: term.holder, token: term.token, key, status, exitCode, reason });
      } catch (e) {
        if (!isRetryableError(e)) throw e;
        await sleepOn(clock, 200 * 2 ** attempt, term.signal.aborted ? undefined : term.signal);
      }
    }
    if (done === undefined) return term.signal.aborted ? undefined : storeNow();
    noteStoreNow(done.storeNowMs);
    emit({ ...base, event: done.completed ? status : 'completion-refused', exitCode, ...(reason === null ? {} : { reason }) });
    return done.storeNowMs;
  }

  // Started last: the loop reads the state above (the store-clock offset) from its first line.
  if (mode === 'per-slot') {
    handle.track(
      (async () => {
        const watch = options.liveness === 'session' ? new SessionWatch(leasehold.store, name, handle.lease.timing.ttlMs) : undefined;
        await perSlot(handle.lease, watch).finally(() => watch?.close());
      })().catch((e: unknown) => {
        if (!signal.aborted) fail(e);
      }),
    );
  }
  return handle;
}

function stopReason(signal: AbortSignal): string {
  return typeof signal.reason === 'string' ? signal.reason : 'stopped';
}
