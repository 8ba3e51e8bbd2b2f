import { EventEmitter } from 'node:events';
import type { Clock, ClockTimer } from './clock.js';
import { resolveTiming, validateLeaseName, parseDuration, type Timing } from './config.js';
import {
  AbortedError,
  ClosedError,
  ConfigError,
  LeaseLostError,
  LeaseholdError,
  NotLeaderError,
  StoreUnavailableError,
  errorMessage,
  type LeaseLostReason,
} from './errors.js';
import { ContentionMachine } from './contention.js';
import { KeptRegistration } from './kept-registration.js';
import { InFlight, afterLateGrant, claimWithinWait, ranOutOfWait, sleepOrFreed, wakeOnAbort, withSignal } from './waits.js';
import type { AcquireOptions, LeaseEvents, LeaseOptions, LeaseSnapshot, LeaseState } from './lease-types.js';
import { snapshotOfTerm, termFromSnapshot } from './snapshot.js';
import { newNonce } from './identity.js';
import type { HeldTerm, LeaseHost } from './leasehold-host.js';
import { TermMachine, issueFenceWrite, queueFenceWrite, type Term, type TermFenceWrite, type TermOutcome } from './term.js';
import { revokeMarker, writeMarker } from './marker.js';
import type { ClaimResult, LeasePort, LeaseSession, LostReason } from './port.js';
import { ContenderSession, checkLiveness, tieSession, type Liveness } from './liveness.js';
import { ProgressWatch } from './progress.js';

export type { Term, TermFenceWrite } from './term.js';
export type { AcquireOptions, LeaseEvents, LeaseOptions, LeaseSnapshot, LeaseState } from './lease-types.js';

const noop = (): void => {};

/** Set by Lease's static block: the testing entry's way to its private snapshot and resume. */
let testingHooks: { snapshot(lease: Lease): LeaseSnapshot | undefined; resume(lease: Lease, snap: LeaseSnapshot): Term } | undefined;

/**
 * A named lease as seen from one process. Create it with `leasehold.lease(name)`, then
 * `acquire()`, read `token` for each unit of work, and `release()` (or `await using`).
 */
export class Lease extends EventEmitter<LeaseEvents> {
  readonly name: string;
  readonly timing: Timing;
  private readonly host: LeaseHost;
  private readonly clock: Clock;
  private _state: LeaseState = 'idle';
  private term: TermMachine | undefined;
  private held: HeldTerm | undefined;
  private deadlineTimer: ClockTimer | undefined;
  private contention: Promise<Term> | undefined;
  private contentionAbort: AbortController | undefined;

  /** @internal use `leasehold.lease(name, options)` */
  constructor(host: LeaseHost, name: string, options: LeaseOptions = {}) {
    super();
    this.host = host;
    this.clock = host.clock;
    this.name = validateLeaseName(name);
    this.timing = resolveTiming(options);
    this.markerPath = options.marker;
    this.liveness = checkLiveness(options.liveness, host.store, this.name);
    this.handover = options.handover !== false;
    this.progressWatch = new ProgressWatch(this.clock, options.progressTimeout);
    // Revoke on the way in: whatever is on disk was not written by this process instance.
    if (this.markerPath !== undefined && revokeMarker(this.markerPath)) {
      host.logger.warn({ lease: this.name, marker: this.markerPath }, 'leasehold: deleted an inherited leadership marker before contending');
    }
  }

  private readonly markerPath: string | undefined;
  private readonly liveness: Liveness;
  /** Liveness 'session': the session the current term is tied to, closed when the term ends. */
  private session: LeaseSession | undefined;
  private readonly releasing = new InFlight<boolean>();
  private readonly handover: boolean;
  /** A contention's registration kept for the next one (AcquireOptions.stayRegistered). */
  private readonly kept = new KeptRegistration((r) => this.host.release({ name: this.name, ...r }).catch(() => false));
  /** This lease's contentions register as the waiter a release hands the term to (LeaseOptions.handover). */
  private get handsOver(): boolean {
    return this.handover && this.host.store.handover === true;
  }
  private readonly progressWatch: ProgressWatch;

  /**
   * Reports that the work is making progress. Only needed with `progressTimeout`: without a
   * call within it, the term is ended with reason "stalled" and the lease released.
   */
  progress(): void {
    this.progressWatch.touch();
  }

  private armProgress(t: TermMachine): void {
    // Hand over now rather than at expiry; if the work wakes up, its writes carry a stale token.
    this.progressWatch.arm(() => this.term === t, (idleMs) => void this.endAndRelease('stalled', `no progress reported for ${idleMs}ms (progress timeout ${this.progressWatch.timeoutMs}ms)`));
  }

  /** Stands down locally first, then tells the store. Resolves true when the store confirmed. */
  private endAndRelease(reason: LeaseLostReason, detail: string): Promise<boolean> {
    // A second call while a release is on its way (a shutdown hook and the work's own finally)
    // waits for it: resolving at once would let its caller close the store under the release.
    if (this.term === undefined) return this.releasing.current ?? Promise.resolve(false);
    return this.releasing.run(() => this.releaseTerm(reason, detail));
  }

  private async releaseTerm(reason: LeaseLostReason, detail: string): Promise<boolean> {
    const t = this.term!;
    const expect = [t.confirmed, ...t.unconfirmed];
    const session = this.session;
    this.session = undefined; // released over the session itself, below, not closed by lose()
    this.lose(reason, detail);
    let handedOver = false;
    try {
      const req = { name: this.name, holder: t.holder, expect };
      handedOver = session !== undefined ? await session.release(req) : await this.host.release(req);
    } catch (err) {
      this.emit('store-error', err, 'release');
      this.host.logger.warn({ lease: this.name, err: errorMessage(err) }, 'leasehold: release failed; the lease will expire instead');
    }
    this.emit('released', t, handedOver);
    return handedOver;
  }

  static {
    testingHooks = { snapshot: (lease) => lease.snapshot(), resume: (lease, snap) => lease.resume(snap) };
  }

  /** What this process remembers of its term (see LeaseSnapshot). Undefined when not leading. */
  private snapshot(): LeaseSnapshot | undefined {
    return this.term === undefined ? undefined : snapshotOfTerm(this.name, this.term);
  }

  /**
   * Resumes a term from a snapshot, believing it leads as a restored process would, with a
   * full local deadline. Its next renewal (within one renew interval) asks the store, and of
   * two processes resumed from one snapshot at most one renewal can succeed.
   */
  private resume(snap: LeaseSnapshot): Term {
    if (this.term !== undefined || this.contention !== undefined) throw new ConfigError(`lease "${this.name}" is already active: acquire it once, or take a second handle with leasehold.lease()`);
    if (snap.name !== this.name) throw new ConfigError(`snapshot is of lease "${snap.name}", not "${this.name}"`);
    const term = termFromSnapshot(this.timing, snap, this.clock.monoNow());
    this.beginTerm(term);
    return term;
  }

  get state(): LeaseState {
    return this._state;
  }

  /** True while this process holds the term and a renewal has landed in time. */
  get isLeader(): boolean {
    const t = this.term;
    if (t !== undefined) this.notice(t);
    return this._state === 'leading' && this.term !== undefined && this.clock.monoNow() < this.term.deadline;
  }

  /**
   * The current fencing token. Read it at the start of each unit of work and pass it to the
   * fenced write. Throws rather than hand out a token it is not sure of.
   * @throws {NotLeaderError} when not leading, or while a renewal is overdue (jeopardy).
   */
  get token(): bigint {
    const t = this.term;
    if (t !== undefined) this.notice(t);
    if (this._state === 'leading' && this.term !== undefined) return this.term.token;
    if (this._state === 'jeopardy') throw this.jeopardyError();
    throw new NotLeaderError(`this process does not hold lease "${this.name}"; acquire it first`);
  }

  private jeopardyError(): NotLeaderError {
    return new NotLeaderError(`lease "${this.name}" is in jeopardy (a renewal failed); not handing out the token until one lands`);
  }

  private noticing = false;

  /**
   * Run by every synchronous read of the term (lease.token, isLeader, the term's signal,
   * term.assertValid()) before it answers: a suspension or a passed deadline that no timer has
   * noticed yet ends the term right here, signal and listeners included, so that no two of them
   * ever disagree. After a freeze the first callback to run is often the user's, not ours.
   */
  private notice(t: TermMachine): void {
    if (this.term !== t || this.noticing) return;
    this.noticing = true;
    try {
      this.host.checkSuspension();
      if (this.term === t && this.clock.monoNow() >= t.deadline) this.passDeadline(t);
    } finally {
      this.noticing = false;
    }
  }

  /**
   * Milliseconds until this process stops believing it leads, unless a renewal lands first
   * (undefined when not holding a term). The store's expiry is at least the safety margin later.
   */
  get msUntilDeadline(): number | undefined {
    const t = this.term;
    return t === undefined ? undefined : Math.max(0, t.deadline - this.clock.monoNow());
  }

  /** The current term, if this process holds one (including while in jeopardy). */
  get currentTerm(): Term | undefined {
    return this.term;
  }

  /**
   * Contends until this process holds the lease, then returns the term.
   * @throws {NotAcquiredError} wait: false, or the wait ran out.
   * @throws {StoreUnavailableError} wait: false and the store could not be asked.
   * @throws {AbortedError} the caller's signal aborted.
   */
  async acquire(options: AcquireOptions = {}): Promise<Term> {
    if (this._state === 'closed') throw new ClosedError(`lease "${this.name}" is closed; take a new handle with leasehold.lease()`);
    if (this.term !== undefined) return this.term;
    if (this.contention !== undefined) return await withSignal(this.contention, options.signal);
    const controller = new AbortController();
    this.contentionAbort = controller;
    const p = this.contend(options, controller.signal);
    this.contention = p;
    try {
      return await p;
    } finally {
      this.contention = undefined;
      this.contentionAbort = undefined;
    }
  }

  /** The I/O of contention; what each answer means is the ContentionMachine's (./contention.ts). */
  private async contend(options: AcquireOptions, internal: AbortSignal): Promise<Term> {
    const signal = options.signal === undefined ? internal : AbortSignal.any([internal, options.signal]);
    const wait = options.wait ?? true;
    const waitUntil = wait === true ? Infinity : wait === false ? 0 : this.clock.monoNow() + parseDuration(wait, 'wait');
    const carried = this.kept.take(this.host.currentHolder());
    const m = new ContentionMachine({ name: this.name, ttlMs: this.timing.ttlMs, renewMs: this.timing.renewMs, waitUntil, handsOver: this.handsOver, unlessReleasedSince: options.unlessReleasedSince, carried });
    let gaveUp = false;
    this._state = 'contending';
    let freed: { promise: Promise<void>; cancel(): void } | undefined;
    const session = this.liveness === 'session' ? new ContenderSession(this.host.store, this.name, this.timing.ttlMs, options.session) : undefined;
    this.host.retainWhileContending(1);
    try {
      for (;;) {
        if (signal.aborted) throw new AbortedError(`acquire of lease "${this.name}" was aborted`, { cause: signal.reason });
        if (options.stopWaiting?.aborted === true) m.endWait();
        this.host.checkSuspension();
        const holder = this.host.currentHolder();
        const nextNonce = newNonce();
        const sentAt = this.clock.monoNow();
        const plan = m.plan(holder, nextNonce, sentAt);
        // Listening from before the claim goes out: a release or expiry the store applies after
        // our read, but whose notification arrives before we would start to sleep, still wakes us.
        freed?.cancel();
        freed = plan.listen ? this.host.waitForFreed(this.name, signal) : undefined;
        const epoch = this.host.freedEpoch();
        let result: ClaimResult | undefined;
        try {
          const sessionId = await session?.id({ signal });
          const claim = this.host.claim({ name: this.name, holder, ttlMs: this.timing.ttlMs, expect: null, nextNonce, ...(plan.waits ? { handoff: plan.handoff! } : {}), ...(sessionId === undefined ? {} : { session: sessionId }), ...(options.unlessReleasedSince === undefined ? {} : { unlessReleasedSince: options.unlessReleasedSince }) });
          // Staying registered, a claim in flight as the wait ends is waited for: given up on, a
          // term it was granted would be handed straight back, after the next contention began.
          result = plan.lastLook || options.stayRegistered === true ? await claim : await claimWithinWait(this.clock, claim, waitUntil, `the store did not answer the claim of lease "${this.name}" before the wait ran out; this is retryable`, (r) => {
                  // Given up on, yet it landed: hand the term straight back, as one aborted in flight is.
                  if (r.outcome === 'acquired') void this.host.release({ name: this.name, holder, expect: [r.nonce ?? nextNonce] }).catch(() => false);
                });
          m.answered(result);
        } catch (err) {
          this.emit('store-error', err, 'acquire');
          const verdict = m.failed(err, this.clock.monoNow(), ranOutOfWait(err));
          if (verdict.kind === 'throw') throw err;
          if (verdict.warn !== undefined) {
            this.host.logger.warn(
              { lease: this.name, err: errorMessage(err), unreachableForMs: verdict.warn.unreachableForMs },
              'leasehold: acquire attempt failed; the store is unreachable, retrying',
            );
          }
        }
        if (session !== undefined && (await session.claimAgain(result, this.clock, signal))) continue; // refused as the session lock was free: taken, claim now (./liveness.ts)
        if (options.stopWaiting?.aborted === true) m.endWait();
        const step = m.next(result, epoch !== undefined && this.host.freedEpoch() === epoch, this.clock.monoNow());
        if (step.kind === 'acquired') {
          if (signal.aborted || (this._state as LeaseState) === 'closed') {
            // Aborted (released, closed, stopped) while the claim was in flight: the store gave us
            // a term nobody wants any more. Hand it straight back rather than start it.
            await this.host.release({ name: this.name, holder, expect: [step.nonce] }).catch(() => false);
            throw new AbortedError(`acquire of lease "${this.name}" was aborted`, { cause: signal.reason });
          }
          // The deadline as for any acquisition: from this claim's send time (never the release's).
          const term = TermMachine.granted(this.timing, result as ClaimResult & { outcome: 'acquired' }, holder, step.nonce, sentAt, this.clock.monoNow());
          if (term !== undefined) {
            m.wins();
            this.session = tieSession(session?.take(), result!, this.host.logger, this.name, (detail) => this.term === term && this.lose('revoked', detail));
            this.beginTerm(term);
            return term;
          }
          // Too late to use: handed back (./waits.ts afterLateGrant); with unlessReleasedSince waited out
          // instead, as a term granted since then and released reads as done to every contender.
          const left = Math.max(0, result!.expiresAtMs! - result!.storeNowMs);
          const handBack = options.unlessReleasedSince === undefined ? () => this.host.release({ name: this.name, holder, expect: [step.nonce] }) : undefined;
          this.host.logger.warn({ lease: this.name, token: String(result!.token), handBack: handBack !== undefined, timeLeftMs: left }, 'leasehold: acquire answer arrived too late to use');
          await afterLateGrant(this.clock, Math.min(left, Math.max(0, waitUntil - this.clock.monoNow())), handBack, () => this.host.waitForFreed(this.name, signal));
          continue;
        }
        if (step.busy !== undefined) this.emit('busy', step.busy.holder, step.busy.remainingMs);
        gaveUp = step.kind === 'give-up';
        if (step.kind === 'give-up') throw step.error;
        const wake = freed ?? this.host.waitForFreed(this.name, signal);
        await sleepOrFreed(this.clock, step.ms, wakeOnAbort(session === undefined ? wake : session.wake(wake, step.ms), options.stopWaiting));
      }
    } finally {
      freed?.cancel();
      if (session !== undefined) await session.close();
      // Kept only for a contention that follows: not after an abort, a close or a stopped wait (a drain).
      await this.kept.settle(m.withdrawal(), options.stayRegistered === true && gaveUp && !signal.aborted && options.stopWaiting?.aborted !== true && (this._state as LeaseState) !== 'closed' && m.staysRegistered());
      this.host.retainWhileContending(-1);
      if (this._state === 'contending') this._state = 'idle';
    }
  }

  private beginTerm(term: TermMachine): void {
    if (this._state === 'closed') throw new ClosedError(`lease "${this.name}" is closed; take a new handle with leasehold.lease()`);
    this.term = term;
    leaseOfTerm.set(term, this);
    term.probe = () => this.notice(term);
    term.validate = () => {
      if (this.term === term && this._state === 'jeopardy') throw this.jeopardyError();
      return term.token;
    };
    this._state = 'leading';
    this.armDeadline(term);
    this.armProgress(term);
    this.held = this.heldTerm(term);
    this.host.enroll(this.held);
    if (this.markerPath !== undefined) {
      try {
        writeMarker(this.markerPath, { name: this.name, holder: term.holder, token: term.token.toString(), pid: process.pid, writtenAt: new Date(this.clock.wallNow()).toISOString() });
      } catch (err) {
        this.host.logger.warn({ lease: this.name, marker: this.markerPath, err: errorMessage(err) }, 'leasehold: could not write the leadership marker');
      }
    }
    this.host.logger.info({ lease: this.name, token: String(term.token), holder: term.holder }, 'leasehold: acquired');
    this.emit('acquired', term);
  }

  private armDeadline(term: TermMachine): void {
    this.clock.clearTimeout(this.deadlineTimer);
    this.deadlineTimer = this.clock.setTimeout(() => {
      if (this.term === term) this.passDeadline(term);
    }, Math.max(0, term.deadline - this.clock.monoNow()));
    this.deadlineTimer.unref();
  }

  /** Detector 3: the monotonic time since the last confirmed renewal passed the local deadline. */
  private passDeadline(term: TermMachine): void {
    const v = term.deadlineVerdict(this.clock.monoNow());
    if (v.suspect) {
      this.host.suspect('deadline-passed', `the local deadline passed ${Math.round(Math.max(0, v.lateMs))}ms ago with no renewal answered (paused or blocked)`);
      if (this.term !== term) return;
    }
    this.lose(v.reason, v.detail);
  }

  /**
   * The term as the client's renewal batcher and detectors see it. Every input reaches the machine of
   * the term it was made for: an answer that comes back after its term ended finds it ended.
   */
  private heldTerm(t: TermMachine): HeldTerm {
    const jeopardyError = (waitedMs: number): LeaseholdError =>
      new StoreUnavailableError(`the renewal has not been answered after ${Math.round(waitedMs)}ms; this is retryable`);
    return {
      name: this.name,
      renewMs: this.timing.renewMs,
      dueAt: () => t.dueAt(),
      request: (now, nextNonce) => {
        const req = t.request(now, nextNonce);
        if (req !== 'deadline') return req;
        if (this.term === t) this.passDeadline(t);
        return undefined;
      },
      answered: (req, result, sentAt) => this.apply(t, t.answered(req, result, sentAt, this.clock.monoNow())),
      failed: (err) => {
        if (t.ended) return void t.failed(err, this.clock.monoNow());
        const outcome = t.failed(err, this.clock.monoNow());
        this.emit('store-error', err, 'renew');
        this.apply(t, outcome, 'leasehold: renewal failed; in jeopardy');
      },
      overdue: (waitedMs) => this.apply(t, t.overdue(jeopardyError(waitedMs)), 'leasehold: renewal overdue; in jeopardy'),
      takeWaiters: () => t.waiters.splice(0),
      checkNow: () => {
        // The store says this lease may have been freed: renew at once rather than at the
        // scheduled time. The answer (revoked, superseded, renewed) is applied like any renewal's.
        if (this.term !== t) return;
        t.waiters.push(() => {});
        this.host.renewNow();
      },
      // Suspension: end the term, then hand it back to the store (nonce-guarded) so the next
      // holder need not wait for the expiry.
      suspend: (detail) => {
        if (this.term === t) void this.endAndRelease('suspended', detail);
      },
    };
  }

  /** Turns what the term's machine concluded into events, log lines and side effects. */
  private apply(t: TermMachine, outcome: TermOutcome, jeopardyMessage = 'leasehold: renewal failed; in jeopardy'): void {
    if (this.term !== t) return;
    switch (outcome.kind) {
      case 'none':
        return;
      case 'deadline':
        this.passDeadline(t);
        return;
      case 'jeopardy':
        this._state = 'jeopardy';
        this.host.logger.warn({ lease: this.name, token: String(t.token), err: errorMessage(outcome.error) }, jeopardyMessage);
        this.emit('jeopardy', t, outcome.error);
        return;
      case 'lost':
        if (outcome.conflict !== undefined) this.host.regenerateIdentity(outcome.conflict);
        this.lose(outcome.reason, outcome.detail);
        return;
      case 'renewed':
        this.armDeadline(t);
        this.host.noteStoreAdvance?.(outcome.storeAdvanceMs, outcome.localAdvanceMs, this.timing.ttlMs);
        if (this.term !== t) return; // a suspension detector ended the term
        if (outcome.recovered) {
          this._state = 'leading';
          this.host.logger.info({ lease: this.name, token: String(t.token) }, 'leasehold: renewal landed, out of jeopardy');
          this.emit('recovered', t);
        }
        this.emit('renewed', t, outcome.expiresInMs, outcome.roundTripMs);
    }
  }

  /**
   * Ends the current term locally: aborts its signal (with a LeaseLostError), stops renewing.
   */
  private lose(reason: LeaseLostReason, detail: string, cause?: unknown): void {
    const t = this.term;
    if (t === undefined) return;
    this.term = undefined;
    const waiters = t.end();
    this.clock.clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
    this.progressWatch.stop();
    void this.session?.close();
    this.session = undefined;
    if (this.markerPath !== undefined) {
      try {
        revokeMarker(this.markerPath);
      } catch (err) {
        this.host.logger.error({ lease: this.name, marker: this.markerPath, err: errorMessage(err) }, 'leasehold: could not delete the leadership marker');
      }
    }
    if (this._state === 'leading' || this._state === 'jeopardy') this._state = 'idle';
    if (this.held !== undefined) this.host.unenroll(this.held);
    this.held = undefined;
    const error = new LeaseLostError(this.name, t.token, reason, detail, { cause });
    const level = reason === 'released' ? 'info' : 'warn';
    this.host.logger[level]({ lease: this.name, token: String(t.token), reason }, `leasehold: term ended: ${detail}`);
    for (const w of waiters) w();
    t.controller.abort(error);
    this.emit('lost', t, error);
  }

  /**
   * One renewal round trip, now. Resolves with the token only if this process still holds the
   * same term after the store answered. Use it right before a side effect the fence cannot
   * cover (an email, a payment API), together with an idempotency key.
   * @throws {LeaseLostError} the term ended. @throws {NotLeaderError} no term.
   */
  async confirm(options: { signal?: AbortSignal } = {}): Promise<bigint> {
    const t = this.term;
    if (t === undefined) throw new NotLeaderError(`this process does not hold lease "${this.name}"`);
    await withSignal(
      new Promise<void>((resolve) => {
        t.waiters.push(resolve);
        this.host.renewNow();
      }),
      options.signal,
    );
    if (this.term !== t) throw t.signal.reason as Error;
    if (this._state !== 'leading') throw new NotLeaderError(`lease "${this.name}" is in jeopardy; its renewal did not land`);
    return t.token;
  }

  /**
   * Stands down locally first (the term's signal aborts), then tells the store so the next
   * holder need not wait for expiry. Release is an optimisation: if the store cannot be told,
   * the lease simply expires. Resolves true when the store confirmed the hand-over.
   */
  async release(): Promise<boolean> {
    const contention = this.contention;
    this.contentionAbort?.abort(new AbortedError(`lease "${this.name}" was released while contending`));
    // With one-write handover, a stopped contender withdraws as the waiter before this resolves
    // (contend's finally), so a release that follows it (a shutdown, a test) cannot hand it a
    // term. That waits for a claim in flight, one round trip.
    if (contention !== undefined && this.handsOver) await contention.then(noop, noop);
    // A registration kept for an acquire that will not come, with any term handed to it meanwhile.
    await this.kept.withdrawNow();
    return this.endAndRelease('released', 'released by this process');
  }

  /** Releases and stops this Lease object for good. */
  async close(): Promise<void> {
    this._state = 'closed';
    await this.release();
    this.host.forget(this);
  }

  // ---- same-database fenced writes (src/fence with `term`) --------------------------------------

  /** @internal fence: the store this lease lives in, so a fence can tell whether it shares the database. */
  get fenceStore(): LeasePort {
    return this.host.store;
  }

  /** The term if it is still this process's current one; else its loss (or NotLeaderError). */
  private fenceTerm(term: Term): TermMachine {
    if (this.term !== undefined && this.term === term) this.notice(this.term);
    if (term.signal.aborted) throw term.signal.reason as Error;
    if (this.term === undefined || this.term !== term) throw new NotLeaderError(`term ${term.token} of lease "${this.name}" is not this process's current term`);
    return this.term;
  }

  /**
   * @internal fence: begins one fenced write that checks and rotates the term's fence nonce in
   * the lease's own database. Fenced writes of one term go one at a time from here to `settle`
   * (the UPDATE and the COMMIT, not the user's work): then the lease row moves through this
   * process's nonces in the order they were issued, and a write never finds the row holding a
   * nonce of this process that it did not know about. Renewals do not take part: they swap a
   * different column.
   * @throws {LeaseLostError} the term ended (also while waiting for the previous write).
   */
  async fenceWrite(term: Term): Promise<TermFenceWrite> {
    let t = this.fenceTerm(term);
    const { previous, release } = queueFenceWrite(t);
    if (previous === undefined) return issueFenceWrite(t, release, newNonce());
    try {
      // The term's end ends the wait with its loss.
      await withSignal(previous, term.signal, (s) => s.reason);
      t = this.fenceTerm(term);
    } catch (err) {
      release();
      throw err;
    }
    return issueFenceWrite(t, release, newNonce());
  }

  /**
   * @internal fence: the synchronous form of {@link fenceWrite} for SQLite, where the UPDATE and
   * the COMMIT run to completion before any other JavaScript (so nothing can interleave).
   */
  fenceWriteSync(term: Term): TermFenceWrite {
    return issueFenceWrite(this.fenceTerm(term), () => {}, newNonce());
  }

  /** @internal fence: the nonces a fenced write may find, right now (for telling a clone from a race). */
  fenceExpected(term: Term): { expect: string[]; first: boolean } {
    const t = this.term === term ? this.term : undefined;
    return t === undefined ? { expect: [], first: false } : { expect: [...t.fence.known], first: t.fence.first };
  }

  /**
   * @internal fence: a fenced write found the term over in the store. Ends it here too, as a
   * renewal with that answer would; a clone gets reason 'cloned'.
   */
  fenceLost(term: Term, reason: LostReason, detail: string): void {
    if (this.term !== term) return;
    const local: Record<LostReason, LeaseLostReason> = { expired: 'expired', superseded: 'superseded', cloned: 'cloned', revoked: 'revoked', released: 'superseded' };
    if (reason !== 'revoked') this.host.regenerateIdentity(`fenced write: term ended: ${reason}`);
    this.lose(local[reason], detail);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

const leaseOfTerm = new WeakMap<Term, Lease>();

/**
 * For tests only (src/testing/): what this process remembers of its term, as a snapshot of
 * its memory would hold it. Undefined when not leading.
 */
export function snapshotLease(lease: Lease): LeaseSnapshot | undefined {
  return testingHooks!.snapshot(lease);
}

/**
 * For tests only (src/testing/): resumes a term from a snapshot, believing it leads as a
 * restored process would, with a full local deadline. Its next renewal (within one renew
 * interval) asks the store, and of two processes resumed from one snapshot at most one
 * renewal can succeed.
 */
export function resumeLease(lease: Lease, snap: LeaseSnapshot): Term {
  return testingHooks!.resume(lease, snap);
}

/** @internal fence: the Lease (of this process) a term belongs to. */
export function leaseOf(term: Term): Lease | undefined {
  return leaseOfTerm.get(term);
}
