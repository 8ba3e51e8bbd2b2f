/**
 * The slot ledger: one row per (lease name, slot key), so that each slot of a schedule runs once
 * across replicas, through failovers. A lease alone stops two jobs running at the same time; it
 * does not stop the same slot running twice (two hosts' crontabs 300 ms apart both win in turn).
 *
 * Glossary:
 *  - slot key: the ISO 8601 UTC time of a scheduled slot (`2026-03-30T01:00:00.000Z`), or the
 *    caller's key for `leasehold run --once-per KEY`.
 *  - claim: the row is written 'claimed' with the caller's fencing token, in one transaction
 *    that also checks the LEASE row: held by this holder, with this token, not expired by the
 *    store's clock. A term that has lost its lease cannot claim anything.
 *  - completion: 'claimed' becomes 'succeeded', 'failed' or 'interrupted', only while the row
 *    still carries the completing term's token: once a later term has re-claimed the slot, the
 *    stale term's completion is refused.
 *
 * What a claim does to an existing row is decided here, by {@link decideSlotClaim}; each store
 * (backends/{postgres,sqlite,etcd}/slots.ts) reads the rows under lock (etcd: compares their
 * revisions on write) and applies it; Redis's Lua script is the same rule written again. The
 * slot ledger conformance suite (src/conformance/slots.ts) holds every store to it.
 */
import { sleepOn } from '../core/clock.js';
import { errorMessage, isRetryableError } from '../core/errors.js';
import type { Term } from '../core/lease.js';
import type { Leasehold } from '../core/leasehold.js';
import type { ScheduleRecord } from './schedule-record.js';

export type SlotStatus = 'claimed' | 'succeeded' | 'failed' | 'interrupted' | 'skipped';
/** A slot row in one of these is settled: no term claims it again (the claim rule says 'done'). */
export const FINAL_SLOT_STATUSES: ReadonlySet<SlotStatus> = new Set(['succeeded', 'failed', 'skipped']);

export interface SlotRecord {
  name: string;
  key: string;
  /** The scheduled time (ms, UTC); null for a `--once-per` key. */
  slotAtMs: number | null;
  status: SlotStatus;
  /** The token of the term that last wrote the row. */
  token: bigint;
  holder: string | null;
  /** By the store's clock. */
  startedAtMs: number | null;
  endedAtMs: number | null;
  exitCode: number | null;
  reason: string | null;
}

/** The term a ledger call is made for: it must hold the lease `name` in the store. */
export interface SlotTerm {
  name: string;
  holder: string;
  token: bigint;
}

export interface SlotClaimRequest extends SlotTerm {
  key: string;
  slotAtMs: number | null;
  /** A slot an ended term had claimed: run it again, or record it skipped. */
  onInterrupted: 'rerun' | 'skip';
  /** A slot that failed in an earlier term runs again (`--once-per`); a schedule's does not. */
  rerunFailed: boolean;
  /**
   * Stops waiting (a claim stuck behind a lock): the claim rejects with AbortedError and has not
   * landed, unless it had committed already. A store whose calls cannot block (SQLite's are
   * synchronous, bounded by its busy timeout) only checks it before starting.
   */
  signal?: AbortSignal;
}

export type SlotClaimResult =
  /** Claimed for this term: run the job. `rerunOf` is the token of the term whose claim this replaces. */
  | { outcome: 'claimed'; storeNowMs: number; rerunOf: bigint | null }
  /** Nothing to run: the row is final (or was just recorded skipped by --on-interrupted skip). */
  | { outcome: 'done'; storeNowMs: number; record: SlotRecord }
  /** The slot is not due yet by the store's clock. */
  | { outcome: 'early'; storeNowMs: number }
  /** This term no longer holds the lease, or a later term has the slot. */
  | { outcome: 'fenced'; storeNowMs: number };

export interface SlotSkipRequest extends SlotTerm {
  slots: readonly { key: string; slotAtMs: number | null }[];
  reason: string;
}

export interface SlotCompletion extends SlotTerm {
  key: string;
  status: 'succeeded' | 'failed' | 'interrupted';
  exitCode: number | null;
  reason: string | null;
}

/**
 * One batch of a prune of one schedule's rows (see ./retention.ts, which loops it). Horizons are
 * measured back from the store's clock, at the call.
 */
export interface SlotPruneRequest {
  name: string;
  /**
   * Scheduled rows (slotAtMs set) whose slot time is more than this before the store's now are
   * candidates. Never kept from deletion by it alone: the newest `keep` rows, the newest row older
   * than the horizon, and every 'claimed' row stay (see {@link slotPruneCutoff}).
   */
  olderThanMs: number;
  /** The newest scheduled rows kept whatever their age; at least 1. */
  keep: number;
  /**
   * `--once-per` rows (slotAtMs null) that ended more than this before the store's now are
   * deleted too; undefined: never (a pruned key runs again when `run --once-per` is given it).
   */
  oncePerOlderThanMs?: number;
  /** At most this many rows are deleted by this call (one short transaction or script). */
  limit: number;
}

export interface SlotPruneResult {
  deleted: number;
  /** The call stopped at `limit`: there may be more to delete. */
  more: boolean;
  storeNowMs: number;
}

/**
 * The slot time below which a schedule's rows may be deleted, given its scheduled slot times
 * newest first as far as needed: the older of the `keep`-th newest row and the newest row older
 * than the horizon. Null: nothing may go. Why the second: the catch-up (scheduler/cron.ts) reads
 * "is there a row before the window" to tell a schedule that ran before (its missed slots in
 * the window are owed) from a new one (nothing is owed before its first row); that row is kept,
 * so a pruned schedule never looks new, and no row inside the window is touched (the horizon is
 * at least the window: retention.ts checks it), so no slot that ran looks missed.
 */
export function slotPruneCutoff(newestFirst: readonly number[], horizonMs: number, keep: number): number | null {
  const kept = newestFirst[Math.max(1, keep) - 1];
  const boundary = newestFirst.find((t) => t < horizonMs);
  if (kept === undefined || boundary === undefined) return null;
  return Math.min(kept, boundary);
}

/** The calls the scheduler makes; a store implements them (structurally: nothing to extend). */
export interface SlotLedgerPort {
  readonly kind: string;
  claim(req: SlotClaimRequest): Promise<SlotClaimResult>;
  /** Records slots as skipped where the ledger has no row for them yet. Fenced like a claim. */
  skip(req: SlotSkipRequest): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }>;
  /** False when the row no longer carries this term's claim. */
  complete(req: SlotCompletion): Promise<{ completed: boolean; storeNowMs: number }>;
  /** Marks every slot an earlier term of `name` left 'claimed' as 'interrupted'. Fenced like a claim. */
  interruptStale(term: SlotTerm): Promise<{ fenced: boolean; interrupted: number; storeNowMs: number }>;
  /**
   * The newest `limit` rows of `name` (default 1000), oldest first; with `sinceMs` / `untilMs`,
   * only scheduled slots in (sinceMs, untilMs].
   */
  records(name: string, options?: { sinceMs?: number; untilMs?: number; limit?: number }): Promise<SlotRecord[]>;
  /**
   * Retention (optional, so a ledger of the caller's still fits the port; every built-in one has
   * it): deletes up to `limit` of `name`'s rows that nothing depends on. Not fenced: it touches no
   * row a term reads (see {@link SlotPruneRequest}). `pruneLedger` (./retention.ts) loops it.
   */
  prune?(req: SlotPruneRequest): Promise<SlotPruneResult>;
  /** The names with rows in the ledger (for a prune of every schedule). */
  names?(): Promise<string[]>;
  /**
   * The per-schedule record (optional, like prune; every built-in ledger has it): written by
   * startCron when a replica first leads the schedule and when the record changes, never per
   * slot. Replaces the stored record only if its token is at least the stored one's.
   */
  putSchedule?(record: ScheduleRecord): Promise<void>;
  /** Every schedule's record, by name. */
  schedules?(): Promise<ScheduleRecord[]>;
  close(): Promise<void>;
}

/** What a store writes for a claim: nothing, a new row, or the existing row rewritten. */
type SlotWrite =
  | { kind: 'none' }
  | { kind: 'insert' | 'update'; status: 'claimed' | 'skipped'; reason: string | null };

/**
 * The claim rule, given the lease check's answer and the slot's row as read under lock.
 * Why a lower token's 'claimed' row means "interrupted": the caller holds a live term, tokens
 * only grow, and only one term is live at a time, so the term that claimed it has ended.
 */
export function decideSlotClaim(
  row: Pick<SlotRecord, 'status' | 'token'> | undefined,
  req: SlotClaimRequest,
  leaseHeld: boolean,
  storeNowMs: number,
): { write: SlotWrite; outcome: 'claimed' | 'done' | 'early' | 'fenced'; rerunOf: bigint | null } {
  const none = { kind: 'none' } as const;
  if (!leaseHeld) return { write: none, outcome: 'fenced', rerunOf: null };
  if (req.slotAtMs !== null && req.slotAtMs > storeNowMs) return { write: none, outcome: 'early', rerunOf: null };
  if (row === undefined) return { write: { kind: 'insert', status: 'claimed', reason: null }, outcome: 'claimed', rerunOf: null };
  if (row.token > req.token) return { write: none, outcome: 'fenced', rerunOf: null };
  if (row.token === req.token) return { write: none, outcome: row.status === 'claimed' ? 'claimed' : 'done', rerunOf: null };
  if (row.status === 'claimed' || row.status === 'interrupted') {
    if (req.onInterrupted === 'skip') {
      return { write: { kind: 'update', status: 'skipped', reason: `interrupted in term ${row.token}; --on-interrupted skip` }, outcome: 'done', rerunOf: null };
    }
    return { write: { kind: 'update', status: 'claimed', reason: `rerun: term ${row.token} was interrupted` }, outcome: 'claimed', rerunOf: row.token };
  }
  if (row.status === 'failed' && req.rerunFailed) {
    return { write: { kind: 'update', status: 'claimed', reason: `rerun: failed in term ${row.token}` }, outcome: 'claimed', rerunOf: row.token };
  }
  return { write: none, outcome: 'done', rerunOf: null };
}

/** The slot key of a scheduled time: ISO 8601 UTC, the same on every replica. */
export function slotKey(slotAtMs: number): string {
  return new Date(slotAtMs).toISOString();
}

/**
 * The same for every run of one slot, reruns by a later term included, and different for every
 * other slot: `leasehold:NAME:slot:KEY`. Unlike a term's key (`leasehold:NAME:TOKEN`, see
 * `idempotencyKey` in leasehold/fence) it has no token in it, because an interrupted slot's rerun
 * must be recognised as the same piece of work by a receiver that deduplicates.
 */
export function slotIdempotencyKey(name: string, key: string): string {
  return `leasehold:${name}:slot:${key}`;
}

/**
 * A ledger call on behalf of `term`, retried with backoff (100ms doubling to 2s) while the term
 * lasts when the store is merely unavailable; undefined once the term has ended. Any other error
 * is thrown: the ledger said something a retry cannot change.
 */
export async function ledgerCall<T>(leasehold: Leasehold, name: string, term: Term, fn: () => Promise<T>): Promise<T | undefined> {
  for (let attempt = 0; ; attempt++) {
    if (term.signal.aborted) return undefined;
    try {
      return await fn();
    } catch (e) {
      if (!isRetryableError(e)) throw e;
      leasehold.logger.warn({ lease: name, err: errorMessage(e) }, 'leasehold: slot ledger call failed; retrying');
      await sleepOn(leasehold.clock, Math.min(2000, 100 * 2 ** attempt), term.signal);
    }
  }
}
