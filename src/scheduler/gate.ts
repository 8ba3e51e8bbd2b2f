/**
 * A slot gate: the part of a scheduled singleton that decides, for a timer that fired on this
 * replica, whether this replica runs the slot. It is what `leasehold/node-cron` and
 * `leasehold/nestjs` put between a framework's own timer and the job; `startCron` owns its timer
 * and does not need it.
 *
 * Rules:
 *  - Every replica contends for the lease `name` (an Elector) from the moment the gate starts. A
 *    fire on a replica that does not hold a term is declined ('follower'), and remembered.
 *  - A fire on the leader claims its slot in the ledger with the term's fencing token, runs the
 *    job, and records the outcome. The ledger decides, not the timer: a slot already done (by
 *    this replica or an earlier leader) is declined ('done'); a slot the store says is not due
 *    yet (this host's clock ahead of the store's) is waited for, then claimed.
 *  - One job at a time: a fire while a job runs is recorded skipped ('overlap').
 *  - On winning a term: slots an earlier term left claimed are marked interrupted, then run
 *    again before the next slot (onInterrupted 'rerun', when the caller can run an arbitrary
 *    slot) or recorded skipped ('skip'). Slots this replica saw fire while it followed, and that
 *    the ledger has no row for, fired while no replica led: they are recorded skipped with that
 *    reason, and so is, with the schedule known, every slot from the ledger's newest row to the
 *    newest of those fires (one a follower's drifted timer never fired for). Nothing owed
 *    disappears without a row that says why.
 *  - With the schedule known, a slot between two fires of one term that did not fire here is
 *    recorded skipped (its timer drifted over it, or the event loop was blocked).
 */
import { parseDuration, type Duration } from '../core/config.js';
import { sleepOn, MAX_TIMER_MS } from '../core/clock.js';
import { LeaseLostError, errorMessage, isRetryableError } from '../core/errors.js';
import type { Elector } from '../core/elector.js';
import type { LeaseOptions, Term } from '../core/lease.js';
import type { Leasehold } from '../core/leasehold.js';
import { ledgerCall, slotIdempotencyKey, slotKey, type SlotLedgerPort, type SlotTerm } from './ledger.js';
import { slotsBetween, type Schedule } from './schedule.js';

export interface SlotGateOptions extends LeaseOptions {
  /** An interrupted slot: run it again before the next slot (default, where the integration can), or record it skipped. */
  onInterrupted?: 'rerun' | 'skip';
  /** How far back a new leader looks for interrupted and unled slots. Default 1h. */
  catchUpWindow?: Duration;
  /** Stops contending when it aborts. */
  signal?: AbortSignal;
  /**
   * The schedule the fires follow, when known: a slot between two of this leader's fires that
   * never fired here (a timer that drifted over a slot, a blocked event loop) is recorded skipped.
   */
  schedule?: Schedule;
}

/** What a job gets for the slot it runs. */
export interface SlotRun {
  name: string;
  /** The slot's key: its scheduled time in ISO 8601 UTC, the same on every replica. */
  slot: string;
  slotAtMs: number;
  token: bigint;
  /** Aborts with a LeaseLostError when the term ends: stop; the slot will be recorded interrupted. */
  signal: AbortSignal;
  term: Term;
  /** The same for every run of this slot (`leasehold:NAME:slot:KEY`), reruns included. */
  idempotencyKey: string;
  /** The token of the interrupted term this run repeats, or null. */
  rerunOf: bigint | null;
}

export type Declined = 'follower' | 'done' | 'fenced' | 'overlap' | 'stopped';

export type Admission =
  | { run: SlotRun; finish(status: 'succeeded' | 'failed', reason?: string | null): Promise<void> }
  | { run: undefined; declined: Declined };

/** How long a fire waits for this replica's first attempt at the lease (started with the gate). */
const FIRST_ATTEMPT_MS = 5000;

export class SlotGate {
  readonly name: string;
  readonly elector: Elector;
  private readonly leasehold: Leasehold;
  private readonly ledger: SlotLedgerPort;
  private readonly onInterrupted: 'rerun' | 'skip';
  private readonly windowMs: number;
  private readonly stopController = new AbortController();
  private term: Term | undefined;
  private takeover: Promise<void> = Promise.resolve();
  private readonly firstAttempt: Promise<void>;
  /** Slots that fired here while this replica followed (slot time -> true), for the next takeover. */
  private readonly seen = new Set<number>();
  /** Interrupted slots this term owes a rerun (onInterrupted 'rerun'). */
  private owed: number[] = [];
  private busy = false;
  /** The last job's outcome being recorded (its job has ended): settles when busy is let go. */
  private finishing: Promise<void> | undefined;
  private offsetMs = 0;
  private readonly schedule: Schedule | undefined;
  /** The newest slot a fire of the current term asked about. */
  private lastFired: { term: Term; slotAtMs: number } | undefined;

  constructor(leasehold: Leasehold, ledger: SlotLedgerPort, name: string, options: SlotGateOptions = {}) {
    this.leasehold = leasehold;
    this.ledger = ledger;
    this.name = name;
    this.onInterrupted = options.onInterrupted ?? 'rerun';
    this.windowMs = parseDuration(options.catchUpWindow ?? '1h', 'catchUpWindow');
    this.schedule = options.schedule;
    const signal = options.signal === undefined ? this.stopController.signal : AbortSignal.any([this.stopController.signal, options.signal]);
    let settle!: () => void;
    this.firstAttempt = new Promise<void>((resolve) => (settle = resolve));
    const { signal: _ignored, onInterrupted: _o, catchUpWindow: _c, schedule: _s, ...leaseOptions } = options;
    this.elector = leasehold.elect(
      name,
      {
        onElected: (term) => {
          this.term = term;
          this.takeover = this.takeOver(term).catch((e: unknown) => {
            leasehold.logger.error({ lease: name, err: errorMessage(e) }, 'leasehold: the takeover of a slot gate failed; its owed slots stay in the ledger for the next term');
          });
          settle();
        },
        onRevoked: (term) => {
          if (this.term === term) this.term = undefined;
        },
      },
      { ...leaseOptions, signal },
    );
    this.elector.lease.once('busy', settle);
    this.elector.lease.once('store-error', settle);
    const timer = setTimeout(settle, FIRST_ATTEMPT_MS);
    timer.unref();
    void this.firstAttempt.then(() => clearTimeout(timer));
  }

  /**
   * Settles once this replica's first attempt at the lease has (won, found it held, failed on
   * the store, or 5 s passed) and, when it won, the new term's takeover of what earlier terms
   * owe has run. A framework that starts its timers after this has its first fire admitted at
   * once, instead of waiting for the acquire and the takeover (long enough on a slow store for
   * the next fire to find that first job still running).
   */
  async ready(): Promise<void> {
    await this.firstAttempt;
    await this.takeover;
  }

  /** Whether this replica holds a term now. */
  get isLeader(): boolean {
    return this.term !== undefined && !this.term.signal.aborted;
  }

  /**
   * For a timer that fired for the slot at `slotAtMs`: claims it when this replica leads, or
   * says why not. The caller runs the job and calls `finish` exactly once.
   */
  async admit(slotAtMs: number): Promise<Admission> {
    await this.firstAttempt;
    const term = this.term;
    if (this.stopController.signal.aborted) return { run: undefined, declined: 'stopped' };
    if (term === undefined || term.signal.aborted) {
      this.remember(slotAtMs);
      return { run: undefined, declined: 'follower' };
    }
    await this.takeover;
    if (this.term !== term || term.signal.aborted) return { run: undefined, declined: 'fenced' };
    await this.recordGap(term, slotAtMs);
    // A job that has ended and is only recording its outcome is not running: wait for that one
    // round trip rather than record this slot skipped as an overlap (CI: a fire 2 ms after a job's
    // end, while its completion was on its way, lost its slot).
    if (this.busy && this.finishing !== undefined) {
      await this.finishing;
      if (this.term !== term || term.signal.aborted) return { run: undefined, declined: 'fenced' };
    }
    if (this.busy) {
      await this.call(term, () => this.ledger.skip({ ...this.who(term), reason: 'overlap: the job of an earlier slot was still running', slots: [{ key: slotKey(slotAtMs), slotAtMs }] }));
      return { run: undefined, declined: 'overlap' };
    }
    this.busy = true;
    let handedOut = false;
    try {
      const r = await this.claim(term, slotAtMs, this.onInterrupted);
      if (r.run === undefined) return r;
      handedOut = true;
      return { run: r.run, finish: (status, reason) => this.finish(r.run, status, reason ?? null) };
    } finally {
      if (!handedOut) this.busy = false;
    }
  }

  /**
   * Runs `job` for the slot at `slotAtMs` when this replica leads, after any slot this term owes
   * a rerun. A job that throws records 'failed' and rethrows.
   */
  async run(slotAtMs: number, job: (run: SlotRun) => unknown): Promise<{ ran: boolean; declined?: Declined }> {
    const a = await this.admit(slotAtMs);
    if (a.run === undefined) return { ran: false, declined: a.declined };
    // Owed reruns first, oldest first, under the same "one job at a time".
    let owedSlot: number | undefined;
    while ((owedSlot = this.owed.shift()) !== undefined && !a.run.term.signal.aborted) {
      try {
        const owed = await this.claim(a.run.term, owedSlot, 'rerun');
        if (owed.run !== undefined) await this.runJob(owed.run, job, false);
      } catch (e) {
        // Recorded (failed), or left for the next term (a ledger error): the fire's own slot still runs.
        this.leasehold.logger.warn({ lease: this.name, slot: slotKey(owedSlot), err: errorMessage(e) }, 'leasehold: the rerun of an interrupted slot failed');
      }
    }
    await this.runJob(a.run, job, true);
    return { ran: true };
  }

  /** Slots strictly between this term's previous fire and this one, which never fired here. */
  private async recordGap(term: Term, slotAtMs: number): Promise<void> {
    const last = this.lastFired;
    if (last === undefined || last.term !== term || slotAtMs > last.slotAtMs) this.lastFired = { term, slotAtMs };
    if (this.schedule === undefined || last?.term !== term || slotAtMs <= last.slotAtMs) return;
    const gap = slotsBetween(this.schedule, last.slotAtMs, slotAtMs - 1);
    if (gap.length === 0) return;
    const reason = "missed: this leader's timer did not fire for it (the timer drifted over it, or the event loop was blocked)";
    await this.call(term, () => this.ledger.skip({ ...this.who(term), reason, slots: gap.map((t) => ({ key: slotKey(t), slotAtMs: t })) }));
  }

  private async runJob(run: SlotRun, job: (run: SlotRun) => unknown, last: boolean): Promise<void> {
    try {
      await job(run);
    } catch (e) {
      await this.finish(run, 'failed', errorMessage(e), last);
      throw e;
    }
    await this.finish(run, 'succeeded', null, last);
  }

  async stop(): Promise<void> {
    this.stopController.abort();
    await this.elector.stop();
  }

  private who(term: Term): SlotTerm {
    return { name: this.name, holder: term.holder, token: term.token };
  }

  private storeNow(): number {
    return this.leasehold.clock.wallNow() + this.offsetMs;
  }

  private note(storeNowMs: number): void {
    this.offsetMs = storeNowMs - this.leasehold.clock.wallNow();
  }

  private remember(slotAtMs: number): void {
    this.seen.add(slotAtMs);
    for (const t of this.seen) if (t < this.storeNow() - this.windowMs) this.seen.delete(t);
  }

  private call<T>(term: Term, fn: () => Promise<T>): Promise<T | undefined> {
    return ledgerCall(this.leasehold, this.name, term, fn);
  }

  private async claim(term: Term, slotAtMs: number, onInterrupted: 'rerun' | 'skip'): Promise<{ run: SlotRun } | { run: undefined; declined: Declined }> {
    const key = slotKey(slotAtMs);
    for (;;) {
      const c = await this.call(term, () => this.ledger.claim({ ...this.who(term), key, slotAtMs, onInterrupted, rerunFailed: false }));
      if (c === undefined || c.outcome === 'fenced') return { run: undefined, declined: 'fenced' };
      this.note(c.storeNowMs);
      if (c.outcome === 'done') return { run: undefined, declined: 'done' };
      if (c.outcome === 'early') {
        // This host's clock is ahead of the store's: the slot is due by the store's clock soon.
        await sleepOn(this.leasehold.clock, Math.min(MAX_TIMER_MS, Math.max(1, slotAtMs - c.storeNowMs)), term.signal);
        continue;
      }
      return {
        run: { name: this.name, slot: key, slotAtMs, token: term.token, signal: term.signal, term, idempotencyKey: slotIdempotencyKey(this.name, key), rerunOf: c.rerunOf },
      };
    }
  }

  /** Records the outcome; a term that ended meanwhile records 'interrupted' (owed to the next leader). */
  private async finish(run: SlotRun, status: 'succeeded' | 'failed', reason: string | null, release = true): Promise<void> {
    let recorded = (): void => undefined;
    if (release) this.finishing = new Promise<void>((r) => (recorded = r));
    try {
      const lost = run.signal.aborted;
      const why: unknown = run.signal.reason;
      const done = await this.retry(() =>
        this.ledger.complete({
          ...this.who(run.term),
          key: run.slot,
          status: lost ? 'interrupted' : status,
          exitCode: null,
          reason: lost ? `the term ended while the job ran (${why instanceof LeaseLostError ? why.reason : 'stopped'})` : reason,
        }),
      );
      if (done !== undefined) this.note(done.storeNowMs);
    } catch (e) {
      // Left 'claimed': the next term marks it interrupted and handles it per onInterrupted.
      this.leasehold.logger.warn({ lease: this.name, slot: run.slot, err: errorMessage(e) }, 'leasehold: could not record a slot outcome; the next leader will treat it as interrupted');
    } finally {
      if (release) {
        this.busy = false;
        this.finishing = undefined;
        recorded();
      }
    }
  }

  private async retry<T>(fn: () => Promise<T>): Promise<T | undefined> {
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        return await fn();
      } catch (e) {
        if (!isRetryableError(e) || attempt === 4) throw e;
        await sleepOn(this.leasehold.clock, 200 * 2 ** attempt);
      }
    }
    return undefined;
  }

  /** A new term: interrupted slots become owed (or skipped); slots seen while no one led are recorded. */
  private async takeOver(term: Term): Promise<void> {
    const stale = await this.call(term, () => this.ledger.interruptStale(this.who(term)));
    if (stale === undefined || stale.fenced) return;
    this.note(stale.storeNowMs);
    const since = stale.storeNowMs - this.windowMs;
    const rows = await this.call(term, () => this.ledger.records(this.name, { sinceMs: since, limit: 1_000_000 }));
    if (rows === undefined) return;
    const interrupted = rows.filter((r) => r.status === 'interrupted' && r.token < term.token && r.slotAtMs !== null).map((r) => r.slotAtMs!);
    if (this.onInterrupted === 'rerun') this.owed = interrupted.sort((a, b) => a - b);
    else for (const t of interrupted) await this.call(term, () => this.ledger.claim({ ...this.who(term), key: slotKey(t), slotAtMs: t, onInterrupted: 'skip', rerunFailed: false }));
    const known = new Set(rows.map((r) => r.key));
    const seen = [...this.seen].filter((t) => t > since);
    this.seen.clear();
    // A follower's timer can drift over a slot too (a starved process names its late fire by the
    // next slot), so the fires seen here are not every slot that fell due unled. Every slot of the
    // schedule from the newest row up to the newest fire seen here passed with no replica running
    // it. Nothing past that newest fire: its own fire may still be on its way here. With no row
    // yet there is no "since the last leader": only the fires seen are recorded.
    const newestRow = rows.reduce((m, r) => (r.slotAtMs !== null && r.slotAtMs > m ? r.slotAtMs : m), -Infinity);
    // A loop, not Math.max(...seen): a day's catch-up window of 1 s slots is 86,400 arguments.
    const newestSeen = seen.reduce((m, t) => (t > m ? t : m), -Infinity);
    if (this.schedule !== undefined && Number.isFinite(newestRow) && newestSeen > newestRow) seen.push(...slotsBetween(this.schedule, newestRow, newestSeen));
    const unled = [...new Set(seen)].filter((t) => !known.has(slotKey(t))).sort((a, b) => a - b);
    if (unled.length > 0) {
      await this.call(term, () =>
        this.ledger.skip({ ...this.who(term), reason: 'missed: it fired while no replica led (the leader was gone and its lease not yet expired)', slots: unled.map((t) => ({ key: slotKey(t), slotAtMs: t })) }),
      );
    }
  }
}
