/**
 * What a cron is, seen from outside: its options, what a job gets and reports, the events it
 * emits, and the handle `startCron` returns. The scheduling itself is cron.ts.
 */
import { EventEmitter } from 'node:events';
import type { Duration } from '../core/config.js';
import type { Elector } from '../core/elector.js';
import type { Lease, LeaseOptions, Term } from '../core/lease.js';
import type { Schedule } from './schedule.js';
import type { SlotLedgerPort } from './ledger.js';

export type CatchUp = 'latest' | 'all' | 'none';

export interface CronOptions extends LeaseOptions {
  schedule: Schedule;
  /** Default 'latest'. */
  catchUp?: CatchUp;
  /** How far back a new leader looks for missed or interrupted slots. Default 1h. */
  catchUpWindow?: Duration;
  /** Default 'rerun'. */
  onInterrupted?: 'rerun' | 'skip';
  /** Default 'per-slot': the lease is held only while a slot's job runs. See the file's comment. */
  mode?: CronMode;
  /**
   * The ledger's old rows of this schedule are pruned (pruneLedger, ./retention.ts) by whichever
   * replica has just run a slot, at most once per `every` on each replica. Default
   * `{ olderThan: '30d', keep: 100, every: '1h' }`; `false` keeps every row for ever.
   */
  retention?: CronRetention | false;
  signal?: AbortSignal;
}

export type CronMode = 'per-slot' | 'leader';

export interface CronRetention {
  /** Rows whose slot is older than this go (never one inside the catch-up window). Default 30d. */
  olderThan?: Duration;
  /** The newest rows kept whatever their age. Default 100. */
  keep?: number;
  /** How often this replica prunes, at most. Default 1h. */
  every?: Duration;
}

export interface SlotContext {
  name: string;
  /** The slot's key (its ISO 8601 UTC time) and time. */
  slot: string;
  slotAtMs: number;
  token: bigint;
  term: Term;
  lease: Lease;
  /** Aborts when the term ends: stop, the slot will be marked interrupted. */
  signal: AbortSignal;
  /** The same for every run of this slot (see slotIdempotencyKey). */
  idempotencyKey: string;
  /** The token of the interrupted term this run repeats, or null. */
  rerunOf: bigint | null;
}

/** Resolve (or return nothing) for success; `{ exitCode }` non-zero or a throw records 'failed'. */
export type SlotJob = (ctx: SlotContext) => Promise<{ exitCode: number; reason?: string } | void> | { exitCode: number; reason?: string } | void;

export interface SlotEvent {
  name: string;
  slot: string;
  slotAtMs: number | null;
  token: bigint;
  event: 'started' | 'succeeded' | 'failed' | 'interrupted' | 'skipped' | 'done-already' | 'completion-refused';
  reason?: string;
  exitCode?: number | null;
  /** For 'started': the store's time at the claim minus the slot's time. */
  delayMs?: number;
}

export interface CronEvents {
  slot: [event: SlotEvent];
  /** A ledger call failed in a way retrying will not fix; the cron stopped. */
  error: [error: unknown];
}

export class CronHandle extends EventEmitter<CronEvents> {
  /** The schedule's name: its lease and its rows in the ledger. */
  readonly name: string;
  readonly schedule: Schedule;
  /** The ledger the slots are recorded in (read by `registerCronMetrics` for the last success). */
  readonly ledger: SlotLedgerPort;
  readonly mode: CronMode;
  /** The schedule's lease: one term per slot ('per-slot'), or the leader's terms. */
  readonly lease: Lease;
  /** The leader election ('leader' mode only). */
  readonly elector: Elector | undefined;
  private readonly stopController: AbortController;
  /** @internal aborted by drain() and stop(): no job starts after it. */
  readonly draining = new AbortController();
  private readonly loops = new Set<Promise<void>>();

  /** @internal built by startCron */
  constructor(where: { name: string; schedule: Schedule; ledger: SlotLedgerPort }, mode: CronMode, lease: Lease, elector: Elector | undefined, stopController: AbortController) {
    super();
    this.name = where.name;
    this.schedule = where.schedule;
    this.ledger = where.ledger;
    this.mode = mode;
    this.lease = lease;
    this.elector = elector;
    this.stopController = stopController;
  }

  /**
   * No job starts from now on, and the lease is kept: for a process that will stop once its
   * running job has exited (a signal it forwards to the job). A slot claimed but not yet started
   * is recorded 'interrupted', and so is a running job that then ends without succeeding, so
   * the next leader reruns them (per onInterrupted). Call stop() after.
   */
  drain(reason = 'stopped'): void {
    this.draining.abort(reason);
  }

  /** @internal */
  track(loop: Promise<void>): void {
    this.loops.add(loop);
    void loop.finally(() => this.loops.delete(loop));
  }

  /** Stops contending; a running job's signal aborts, and the lease is released once it has settled. */
  async stop(): Promise<void> {
    this.drain();
    this.stopController.abort();
    if (this.elector !== undefined) await this.elector.stop();
    // Per-slot: ends a running slot's term (its job's signal aborts), as the elector's stop does.
    else await this.lease.close();
    await Promise.allSettled([...this.loops]);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
