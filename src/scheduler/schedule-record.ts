/**
 * The per-schedule record: what a schedule is (its expression and zone, mode, catch-up policy)
 * and whether a term is catching up, as the replica that leads it wrote it. Without it `cron ls`
 * and the dashboard could only show a schedule's slot rows and guess the rest.
 *
 * Written by startCron when a replica first leads the schedule and when what it would write
 * changes (a catch-up starts or ends, a deploy changed the expression): never per slot, so a
 * slot costs the store what it did before. The next due slot is not stored: it moves every slot,
 * and a reader computes it from the stored expression and zone with the store's clock
 * ({@link nextDueOf}). A record is replaced only by a term whose token is at least the stored
 * one, so a replica whose term has ended does not overwrite a newer leader's record.
 */
import { errorMessage } from '../core/errors.js';
import type { LoggerLike } from '../core/logger.js';
import { cronSchedule, everySchedule, type Schedule } from './schedule.js';

export interface ScheduleRecord {
  name: string;
  /** As a person would write it: `0 3 * * * (Europe/Berlin)`, `every 1s`. */
  description: string;
  /** The cron expression; null for a period or a schedule of the caller's. */
  expression: string | null;
  /** The cron expression's IANA zone; null with no expression. */
  timeZone: string | null;
  /** The period of an `every` schedule; null otherwise. */
  everyMs: number | null;
  mode: 'per-slot' | 'leader';
  catchUp: 'latest' | 'all' | 'none';
  catchUpWindowMs: number;
  /** The owed slots (missed, interrupted) a term was catching up when it wrote this; null when none. */
  catchingUp: { fromMs: number; untilMs: number; slots: number } | null;
  /** The term that wrote it. */
  holder: string;
  token: bigint;
  /** When it was written, by the writer's estimate of the store's clock. */
  updatedAtMs: number;
}

/** The JSON a store keeps (the token as a decimal string: a bigint overflows JSON numbers). */
export function encodeSchedule(r: ScheduleRecord): string {
  return JSON.stringify({ ...r, token: r.token.toString() });
}

export function decodeSchedule(text: string): ScheduleRecord {
  const o = JSON.parse(text) as Omit<ScheduleRecord, 'token'> & { token: string };
  return { ...o, token: BigInt(o.token) };
}

/** The first slot after `storeNowMs`, from the record alone; null for a schedule of the caller's (no expression or period stored). */
export function nextDueOf(r: ScheduleRecord, storeNowMs: number): number | null {
  let s: Schedule;
  try {
    if (r.expression !== null) s = cronSchedule(r.expression, r.timeZone ?? 'UTC');
    else if (r.everyMs !== null) s = everySchedule(r.everyMs);
    else return null;
  } catch {
    // Written by a leasehold that accepted what this one does not: unknown, not an error.
    return null;
  }
  return s.next(storeNowMs);
}

/** What startCron knows of its schedule, for the record. */
interface ScheduleFacts {
  name: string;
  schedule: Schedule;
  mode: ScheduleRecord['mode'];
  catchUp: ScheduleRecord['catchUp'];
  catchUpWindowMs: number;
}

/** The port's optional write, as startCron sees it (the ledger's `putSchedule`). */
interface ScheduleWriter {
  putSchedule?(record: ScheduleRecord): Promise<void>;
}

/**
 * startCron's writer: `note` writes the record when it differs from what this replica last
 * wrote (its first term, a catch-up starting or ending) and otherwise sends nothing. A failed
 * write is logged and tried again at the next note: the record is for people, and a schedule
 * must not stop running for it.
 */
export function scheduleNoter(ledger: ScheduleWriter, facts: ScheduleFacts, logger: LoggerLike): (term: { holder: string; token: bigint }, catchingUp: number[], storeNowMs: number) => Promise<void> {
  const spec = facts.schedule.spec;
  const base = {
    name: facts.name,
    description: facts.schedule.description,
    expression: spec !== undefined && 'expression' in spec ? spec.expression : null,
    timeZone: spec !== undefined && 'expression' in spec ? spec.timeZone : null,
    everyMs: spec !== undefined && 'everyMs' in spec ? spec.everyMs : null,
    mode: facts.mode,
    catchUp: facts.catchUp,
    catchUpWindowMs: facts.catchUpWindowMs,
  };
  let written: string | undefined;
  return async (term, owed, storeNowMs) => {
    if (ledger.putSchedule === undefined) return;
    const catchingUp = owed.length === 0 ? null : { fromMs: Math.min(...owed), untilMs: Math.max(...owed), slots: owed.length };
    // Holder and token change every per-slot term: they do not make a record worth rewriting.
    const what = JSON.stringify({ ...base, catchingUp });
    if (what === written) return;
    try {
      await ledger.putSchedule({ ...base, catchingUp, holder: term.holder, token: term.token, updatedAtMs: Math.round(storeNowMs) });
      written = what;
    } catch (e) {
      logger.warn({ lease: facts.name, err: errorMessage(e) }, "leasehold: could not write the schedule's record (cron ls shows less); trying again at its next term");
    }
  };
}
