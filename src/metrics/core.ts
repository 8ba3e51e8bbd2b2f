/**
 * What leasehold measures, independent of any metrics library: lease events in, calls on a
 * {@link MetricsSink} out. The prom-client entry (`leasehold/metrics`) and the OpenTelemetry
 * adapter (`leasehold/metrics/otel`) are two sinks over this one tracker, so both report the
 * same things under the same names.
 */
import { FencedError } from '../core/errors.js';
import type { Lease } from '../core/lease.js';
import type { Leasehold, SuspicionDetector } from '../core/leasehold.js';

/** Where the tracker's counts go. Gauges (is-leader, token) are read at collection time instead. */
export interface MetricsSink {
  termWon(lease: string): void;
  termLost(lease: string, reason: string): void;
  /** Seconds from sending a renewal to its answer (the 'renewed' event's round trip). */
  renewal(lease: string, seconds: number): void;
  jeopardy(lease: string): void;
  suspicion(detector: SuspicionDetector): void;
  fenced(resource: string): void;
}

export interface TrackOptions {
  /** Leases to instrument now. */
  leases?: readonly Lease[];
  /**
   * Also instrument every lease `leasehold.lease()` creates from now on, including those made by
   * `runExclusive()` and `elect()`. Default true. (Done by wrapping that one method on this
   * instance; `close()` puts it back.)
   */
  instrumentNew?: boolean;
}

/** A lease's gauges, as read at collection time. */
export interface LeaseGaugeValues {
  lease: string;
  /** 1 while this process leads and its last renewal landed in time (`lease.isLeader`). */
  leader: 0 | 1;
  /** The current term's token; null when this process holds no term. */
  token: bigint | null;
}

export class MetricsTracker {
  private readonly tracked = new Map<Lease, () => void>();
  private readonly onSuspected: (detector: SuspicionDetector) => void;
  private restoreLease: (() => void) | undefined;

  constructor(
    readonly leasehold: Leasehold,
    private readonly sink: MetricsSink,
    options: TrackOptions = {},
  ) {
    this.onSuspected = (detector) => sink.suspicion(detector);
    leasehold.on('suspected', this.onSuspected);
    for (const l of options.leases ?? []) this.instrument(l);
    if (options.instrumentNew !== false) {
      const own = Object.prototype.hasOwnProperty.call(leasehold, 'lease');
      const original = leasehold.lease;
      const wrapped = (name: string, opts?: Parameters<Leasehold['lease']>[1]): Lease => {
        const lease = original.call(leasehold, name, opts);
        this.instrument(lease);
        return lease;
      };
      leasehold.lease = wrapped;
      this.restoreLease = () => {
        if (leasehold.lease !== wrapped) return; // someone wrapped it after us: leave theirs alone
        if (own) leasehold.lease = original;
        else delete (leasehold as { lease?: unknown }).lease;
      };
    }
  }

  /** Starts counting one lease's events. Idempotent. */
  instrument(lease: Lease): void {
    if (this.tracked.has(lease)) return;
    const sink = this.sink;
    const name = lease.name;
    const acquired = (): void => sink.termWon(name);
    const lost = (_t: unknown, error: { reason: string }): void => sink.termLost(name, error.reason);
    const jeopardy = (): void => sink.jeopardy(name);
    const renewed = (_t: unknown, _expiresInMs: number, roundTripMs: number): void => sink.renewal(name, roundTripMs / 1000);
    lease.on('acquired', acquired);
    lease.on('lost', lost);
    lease.on('jeopardy', jeopardy);
    lease.on('renewed', renewed);
    this.tracked.set(lease, () => {
      lease.off('acquired', acquired);
      lease.off('lost', lost);
      lease.off('jeopardy', jeopardy);
      lease.off('renewed', renewed);
    });
  }

  /** The gauges of every instrumented lease that is not closed (closed ones are dropped). */
  gauges(): LeaseGaugeValues[] {
    const out: LeaseGaugeValues[] = [];
    for (const [lease, off] of this.tracked) {
      if (lease.state === 'closed') {
        off();
        this.tracked.delete(lease);
        continue;
      }
      out.push({ lease: lease.name, leader: lease.isLeader ? 1 : 0, token: lease.currentTerm?.token ?? null });
    }
    return out;
  }

  /**
   * Counts a write the resource refused (FencedError), by resource, and returns true; false for
   * any other error. For a `catch` block that handles the error itself.
   */
  fenced(err: unknown): boolean {
    if (!(err instanceof FencedError)) return false;
    this.sink.fenced(err.resource);
    return true;
  }

  /**
   * Runs a fenced write (a promise, or a function returning one or a value) and counts it if
   * the fence refused it; the result or the error passes through unchanged.
   *
   *   await metrics.countFenced(() => fencedTransaction(pool, term, { resource: 'report' }, write));
   */
  async countFenced<T>(write: Promise<T> | (() => Promise<T> | T)): Promise<T> {
    try {
      return await (typeof write === 'function' ? write() : write);
    } catch (err) {
      this.fenced(err);
      throw err;
    }
  }

  /** Stops counting: removes every listener, and puts `leasehold.lease` back. */
  close(): void {
    for (const off of this.tracked.values()) off();
    this.tracked.clear();
    this.leasehold.off('suspected', this.onSuspected);
    this.restoreLease?.();
    this.restoreLease = undefined;
  }
}
