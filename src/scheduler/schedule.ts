/**
 * When slots fall: a cron expression in a time zone (croner), or a fixed period. Every replica
 * must compute the same slots from the same flags, so a period is aligned to the Unix epoch
 * (`--every 5m` falls on :00, :05, ...), never to the moment a process started.
 */
import { Cron } from 'croner';
import { ConfigError, errorMessage } from '../core/errors.js';

export interface Schedule {
  /** As a person would write it: `0 3 * * * (Europe/Berlin)`, `every 1s`. */
  readonly description: string;
  /** The first slot strictly after `afterMs`, or null when there is none (a cron that never fires again). */
  next(afterMs: number): number | null;
  /**
   * What it was made from, for the schedule's record (`cron ls`, the dashboard), which rebuilds
   * it to tell the next due slot; absent on a schedule of the caller's.
   */
  readonly spec?: { expression: string; timeZone: string } | { everyMs: number };
}

/** Slots in (afterMs, untilMs], oldest first. Throws past `max`: a window that large is a mistake, not a backlog. */
export function slotsBetween(schedule: Schedule, afterMs: number, untilMs: number, max = 100_000): number[] {
  const out: number[] = [];
  for (let t = schedule.next(afterMs); t !== null && t <= untilMs; t = schedule.next(t)) {
    out.push(t);
    if (out.length > max) throw new ConfigError(`more than ${max} slots of ${schedule.description} fall in the catch-up window; shorten --catch-up-window`);
  }
  return out;
}

/** A period of `everyMs`, aligned to the epoch. */
export function everySchedule(everyMs: number): Schedule {
  if (!Number.isInteger(everyMs) || everyMs < 1000) throw new ConfigError(`a schedule period of ${everyMs}ms is too short; use at least 1s`);
  return {
    description: `every ${everyMs % 1000 === 0 ? `${everyMs / 1000}s` : `${everyMs}ms`}`,
    spec: { everyMs },
    next: (afterMs) => (Math.floor(afterMs / everyMs) + 1) * everyMs,
  };
}

/** What cronSchedule accepts, for the messages that refuse something else. */
const ACCEPTED =
  'write 5 fields (minute hour day-of-month month day-of-week, like "30 2 * * *"), 6 with seconds first, or @yearly, @monthly, @weekly, @daily, @hourly';

/**
 * A cron expression (5 fields, 6 with seconds first, or an @nickname) in an IANA zone (default
 * UTC, so that replicas on hosts with different TZ settings agree). Across DST, croner runs a
 * local time that does not exist (02:30 on a spring-forward day) at the first instant after the
 * gap, and a local time that occurs twice (fall-back) once, at its first occurrence: every day
 * has one slot.
 *
 * Refused: croner's 7-field form (a year last: a schedule that ends, after which a replica
 * would lead for ever running nothing) and an expression that never fires (`0 0 30 2 *`).
 * @throws {ConfigError} a bad expression, one that never fires, or an unknown zone.
 */
export function cronSchedule(expression: string, zone = 'UTC'): Schedule {
  checkZone(zone);
  const fields = expression.trim().split(/\s+/);
  if (!expression.trim().startsWith('@') && fields.length > 6) {
    throw new ConfigError(`schedule ${JSON.stringify(expression)} has ${fields.length} fields; ${ACCEPTED}`);
  }
  let cron: Cron;
  try {
    cron = new Cron(expression, { timezone: zone, paused: true });
  } catch (e) {
    throw new ConfigError(`schedule ${JSON.stringify(expression)} is not a cron expression (${errorMessage(e).replace(/^CronPattern: /, '')}); ${ACCEPTED}`);
  }
  // Without a year field a schedule that fires once fires again, so "no next slot from now"
  // means never (croner answers null after searching its own horizon).
  if (cron.nextRun(new Date()) === null) {
    throw new ConfigError(`schedule ${JSON.stringify(expression)} never fires (no such date, like 30 February); ${ACCEPTED}`);
  }
  return {
    description: `${expression} (${zone})`,
    spec: { expression, timeZone: zone },
    next: (afterMs) => cron.nextRun(new Date(afterMs))?.getTime() ?? null,
  };
}

function checkZone(zone: string): void {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
  } catch {
    throw new ConfigError(`time zone ${JSON.stringify(zone)} is unknown; give an IANA name like Europe/Berlin or UTC`);
  }
}

/**
 * The slot a framework's timer that fired at `nowMs` (by this host's clock) stands for: the
 * schedule's instant nearest to it. A timer fires at or a little after its instant, by its own
 * host's clock, so replicas whose clocks differ, or whose timers run tens of milliseconds late,
 * all name the same instant; the store's clock then decides when it is due (the claim's 'early').
 * With `mode: 'floor'`, the latest instant at or before `nowMs`: for a period that is not aligned
 * to the epoch (a setInterval started at boot), which must not name a slot still in the future.
 */
export function slotForFire(schedule: Schedule, nowMs: number, mode: 'nearest' | 'floor' = 'nearest'): number {
  const next = schedule.next(nowMs);
  let lookback = next === null ? 60_000 : Math.max(1000, 2 * ((schedule.next(next) ?? next + 1000) - next));
  let prev: number | null = null;
  // The latest instant <= nowMs: search back from twice the period, doubling (a weekday-only
  // cron on a Monday needs a second try); 12 doublings reach far past any schedule's gap.
  for (let tries = 0; prev === null && tries < 12; tries++, lookback *= 2) {
    for (let t = schedule.next(nowMs - lookback - 1); t !== null && t <= nowMs; t = schedule.next(t)) prev = t;
  }
  if (mode === 'floor' || next === null) {
    if (prev === null) throw new ConfigError(`schedule ${schedule.description} has no slot at or before ${new Date(nowMs).toISOString()}`);
    return prev;
  }
  return prev !== null && nowMs - prev <= next - nowMs ? prev : next;
}

/** One fixed-period timer's previous fire: the slot it was named and when it fired. */
export interface IntervalFire {
  slotAtMs: number;
  firedAtMs: number;
}

/**
 * The slot of a fire of a fixed-period timer started at an arbitrary instant (a `setInterval`,
 * NestJS's `@Interval`), on the epoch-aligned grid of `periodMs` that every replica shares.
 *
 * The first fire is named by the aligned period it fired in. Each later fire counts whole
 * periods from this timer's previous fire (nearest, at least one), so a timer whose phase sits
 * at the grid's edge, its fires measured a few or a few hundred milliseconds either side of it,
 * still names consecutive slots: naming every fire by the period it fell in named one period
 * twice (the second fire declined as done) and skipped the next (recorded missed). Counting
 * keeps the name at most a period and a quarter behind the fire (so fires measured up to a
 * quarter period late still count on, and a fire read early, after one read late, names the
 * slot a little ahead, which the store's clock then says is due); past that (a setInterval's lateness accumulates, a fire
 * held back by a blocked event loop) the fire is named by its own period again, and the slot it
 * passed over is recorded missed: a timer that fires less often than the grid has periods
 * cannot run every one of them. Replicas' timers start at their own boots, so the grid, not
 * their phases, is what they share: each names its fires in order on it, and the ledger runs
 * each slot once.
 */
export function intervalSlot(periodMs: number, nowMs: number, previous?: IntervalFire): number {
  const own = Math.floor(nowMs / periodMs) * periodMs;
  if (previous === undefined) return own;
  const counted = previous.slotAtMs + Math.max(1, Math.round((nowMs - previous.firedAtMs) / periodMs)) * periodMs;
  const lag = nowMs - counted;
  return lag >= -0.25 * periodMs && lag <= 1.25 * periodMs ? counted : own;
}
