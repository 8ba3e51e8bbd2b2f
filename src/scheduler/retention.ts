/**
 * Retention for the slot ledger: {@link pruneLedger} deletes a schedule's old rows (or every
 * schedule's) in short batches, keeping what a decision depends on:
 *  - the newest `keep` rows of each schedule (default 100), so history and `cron history` stay
 *    useful and the newest row, which says "this schedule has run before", is never lost;
 *  - the newest row older than the horizon: the catch-up (./cron.ts) asks "is there any row
 *    before the window" to tell a schedule that ran before (its missed slots in the window are
 *    owed) from a new one (nothing before its first row is owed). With that row kept, a pruned
 *    schedule never looks new;
 *  - every row inside the catch-up window: the horizon may not be shorter than the window
 *    (`catchUpWindow`, default 1h as startCron's), so no slot that ran can look missed;
 *  - every 'claimed' row (a job that has not finished, or a term that ended with it: the next
 *    term marks it interrupted);
 *  - `--once-per` keys (rows with no slot time): never, unless `oncePer` is given. A pruned key
 *    runs again the next time `run --once-per KEY` is given that key.
 *
 * Each batch is one short transaction (or script) on the store; the pause between batches lets
 * the running schedules' claims in, so a prune of 100,000 rows does not stall them.
 */
import { parseDuration, type Duration } from '../core/config.js';
import type { Clock } from '../core/clock.js';
import { ConfigError, errorMessage } from '../core/errors.js';
import type { LoggerLike } from '../core/logger.js';
import type { CronRetention } from './cron-handle.js';
import type { SlotLedgerPort } from './ledger.js';

export interface PruneLedgerOptions {
  /** Scheduled rows whose slot time is older than this (by the store's clock) may go. Default 30d. */
  olderThan?: Duration;
  /** One schedule; default every name in the ledger. */
  name?: string;
  /** The newest rows of each schedule kept whatever their age. Default 100, at least 1. */
  keep?: number;
  /**
   * Also `--once-per` rows that ended before this horizon (true: `olderThan`'s). Default false:
   * a pruned key would run again.
   */
  oncePer?: boolean | Duration;
  /** The longest catch-up window of the schedules pruned; `olderThan` may not be shorter. Default 1h. */
  catchUpWindow?: Duration;
  /** Rows per batch (one transaction or script). Default 1000. */
  batchSize?: number;
  /** Pause between batches, so claims waiting on the store go first. Default 5ms. */
  pause?: Duration;
  signal?: AbortSignal;
}

export interface PruneLedgerResult {
  deleted: number;
  /** Rows deleted per name (names with none deleted included). */
  byName: Record<string, number>;
  batches: number;
  /** The store's time at the last batch. */
  storeNowMs: number | null;
}

export const DEFAULT_RETENTION = { olderThan: '30d', keep: 100 } as const;

const DAY_MS = 86_400_000;

/**
 * A retention horizon: a duration as parseDuration reads it, but not capped at a Node.js timer's
 * 24.8 days (nothing waits on it; "90d" is an ordinary retention). Whole days come off first.
 * @throws {ConfigError}
 */
export function parseHorizon(value: Duration, what: string): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  try {
    return parseDuration(value, what);
  } catch (err) {
    const days = typeof value === 'string' ? /^\s*(\d+)\s*d(.*)$/.exec(value) : null;
    if (days === null) throw err;
    const rest = days[2]!.trim();
    return Number(days[1]) * DAY_MS + (rest === '' ? 0 : parseDuration(rest, what));
  }
}

/**
 * Prunes `ledger` per `options` (see the file's comment for what stays).
 * @throws {ConfigError} a horizon shorter than the catch-up window, a bad number, or a ledger without prune.
 */
export async function pruneLedger(ledger: SlotLedgerPort, options: PruneLedgerOptions = {}): Promise<PruneLedgerResult> {
  const olderThanMs = parseHorizon(options.olderThan ?? DEFAULT_RETENTION.olderThan, 'olderThan');
  const windowMs = parseHorizon(options.catchUpWindow ?? '1h', 'catchUpWindow');
  if (olderThanMs < windowMs) {
    throw new ConfigError(
      `olderThan ${olderThanMs}ms is shorter than the catch-up window ${windowMs}ms: rows inside the window are what a new leader reads to tell a missed slot from one that ran; prune older than the window (or pass the schedules' catchUpWindow)`,
    );
  }
  const keep = options.keep ?? DEFAULT_RETENTION.keep;
  if (!Number.isInteger(keep) || keep < 1) throw new ConfigError(`keep must be a whole number of rows, at least 1 (the newest row says the schedule has run before); got ${keep}`);
  const batchSize = options.batchSize ?? 1000;
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new ConfigError(`batchSize must be a whole number of rows, at least 1; got ${batchSize}`);
  const pauseMs = parseDuration(options.pause ?? 5, 'pause');
  const op = options.oncePer;
  const oncePerOlderThanMs = op === undefined || op === false ? undefined : op === true ? olderThanMs : parseHorizon(op, 'oncePer');
  const prune = ledger.prune?.bind(ledger);
  const names = ledger.names?.bind(ledger);
  if (prune === undefined || (options.name === undefined && names === undefined)) {
    throw new ConfigError(`this ${ledger.kind} slot ledger cannot prune (it has no prune or names method); every built-in ledger can`);
  }
  const result: PruneLedgerResult = { deleted: 0, byName: {}, batches: 0, storeNowMs: null };
  for (const name of options.name === undefined ? await names!() : [options.name]) {
    result.byName[name] = 0;
    for (let more = true; more; ) {
      options.signal?.throwIfAborted();
      const r = await prune({ name, olderThanMs, keep, limit: batchSize, ...(oncePerOlderThanMs === undefined ? {} : { oncePerOlderThanMs }) });
      result.batches++;
      result.deleted += r.deleted;
      result.byName[name] += r.deleted;
      result.storeNowMs = r.storeNowMs;
      // A batch that deleted nothing but says "more" (kept rows filled its scan) would loop for ever.
      more = r.more && r.deleted > 0;
      if (more && pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs));
    }
  }
  return result;
}

/** The retention to apply, or undefined for none; a bad one is a ConfigError at start, not at the first prune. */
export function cronRetention(r: CronRetention | false | undefined, windowMs: number, ledger: SlotLedgerPort): { olderThanMs: number; keep: number; everyMs: number } | undefined {
  if (r === false) return undefined;
  if (ledger.prune === undefined) {
    // Every built-in ledger prunes; a caller's own may not: by default that is no retention.
    if (r === undefined) return undefined;
    throw new ConfigError(`retention was asked for, but this ${ledger.kind} slot ledger has no prune method; pass retention: false`);
  }
  const olderThanMs = parseHorizon(r?.olderThan ?? DEFAULT_RETENTION.olderThan, 'retention.olderThan');
  if (olderThanMs < windowMs) throw new ConfigError(`retention.olderThan (${olderThanMs}ms) is shorter than the catch-up window (${windowMs}ms): a new leader reads the window to tell a missed slot from one that ran`);
  const keep = r?.keep ?? DEFAULT_RETENTION.keep;
  if (!Number.isInteger(keep) || keep < 1) throw new ConfigError(`retention.keep must be a whole number of rows, at least 1; got ${keep}`);
  return { olderThanMs, keep, everyMs: parseHorizon(r?.every ?? '1h', 'retention.every') };
}

/**
 * startCron's retention: called by the replica that has just run a slot (so not every replica at
 * once), it prunes at most once per `every` here. Not awaited: a prune is batches of short deletes
 * that never touch what a term reads, and a failed one is only said (the next one tries again).
 */
export function cronPruner(
  ledger: SlotLedgerPort,
  name: string,
  retention: ReturnType<typeof cronRetention>,
  how: { catchUpWindowMs: number; clock: Clock; logger: LoggerLike; signal: AbortSignal },
): () => void {
  let prunedAt: number | undefined;
  let pruning = false;
  return () => {
    const { clock, signal } = how;
    if (retention === undefined || pruning || (prunedAt !== undefined && clock.monoNow() - prunedAt < retention.everyMs)) return;
    pruning = true;
    prunedAt = clock.monoNow();
    pruneLedger(ledger, { name, olderThan: retention.olderThanMs, keep: retention.keep, catchUpWindow: how.catchUpWindowMs, signal })
      .catch((e: unknown) => {
        if (!signal.aborted) how.logger.warn({ lease: name, err: errorMessage(e) }, 'leasehold: pruning the slot ledger failed; the next prune tries again');
      })
      .finally(() => (pruning = false));
  };
}
