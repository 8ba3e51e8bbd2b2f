/**
 * The dashboard's schedules: a schedule is a job lease whose slot ledger has scheduled rows
 * (`leasehold cron` writes them; `run --once-per` rows have no slot time and do not count). Its
 * slots come from one ledger read per lease (`records(name, { limit })`); what it is (expression
 * and zone, mode, catch-up policy, a catch-up in progress) from the schedule records startCron
 * writes (`schedules()`, one read for every schedule: when one shows up without a record, else every
 * LEDGER_SLOW_MS), and its
 * next due slot from the stored expression by the store's clock. A ledger of the caller's without
 * records, or a schedule whose replicas predate them, falls back to an estimate from the slot times.
 *
 * When to read (the store load is the point): a lease's ledger is read when the lease is first
 * seen and when the watcher reports a change of it (per-slot cron takes a new term for every
 * slot, so a change is exactly "a slot started or ended"), at most once per second per name, and
 * a known schedule's ledger again on a slow timer (leader mode keeps one term across slots, so
 * its slots end without a lease change). Reads are serial: one ledger read in flight at a time,
 * whatever the number of leases or browsers. A lease with no scheduled rows is only read again
 * when it changes.
 */
import type { LeaseView } from '../../observe/index.js';
import type { SlotLedgerPort, SlotRecord } from '../../scheduler/ledger.js';
import { nextDueOf, type ScheduleRecord } from '../../scheduler/schedule-record.js';
import { AGENT_LEASE_PREFIX } from '../../core/reserved.js';
import { errorMessage } from '../../core/errors.js';

/** The last slots shown per schedule. */
const SLOTS_SHOWN = 12;
/** A name's ledger is read at most this often (a lease that changes every 100ms costs 1 read/s). */
export const LEDGER_MIN_GAP_MS = 1000;
/** A known schedule's ledger is read at least this often, changed or not. */
const LEDGER_SLOW_MS = 30_000;

interface SlotRow {
  key: string;
  slotAtMs: number;
  status: SlotRecord['status'];
  token: string;
  holder: string | null;
  startedAtMs: number | null;
  endedAtMs: number | null;
  exitCode: number | null;
  reason: string | null;
  /** Skipped because no replica (or a late leader) ran it in time. */
  missed: boolean;
  /** Slots between this one and the previous row that the ledger has no row for (older than the catch-up window when they were found missed, or never seen). */
  gapBefore: number;
}

export interface ScheduleRow {
  name: string;
  state: LeaseView['state'];
  holder: string | null;
  token: string;
  expiresAtMs: number | null;
  /** The smallest interval between consecutive slots in the rows read: the period of an --every schedule; a cron expression's shortest gap. */
  periodMs: number | null;
  /** The newest slot's time plus periodMs: an estimate, for a schedule with no record. */
  nextDueEstimateMs: number | null;
  /** What the schedule is, from its record (null: no record: a ledger without them, or replicas that predate them). */
  schedule: Omit<ScheduleRecord, 'name' | 'token' | 'updatedAtMs'> | null;
  /** The next slot after the store's time of the lease list, from the record's expression; null without one. */
  nextDueMs: number | null;
  slots: SlotRow[];
  /** By the store's clock. */
  lastSuccessAtMs: number | null;
  /** When its ledger was last read (dashboard clock, ms since epoch). */
  readAtMs: number;
}

interface Known {
  /** Null until read; an empty array: not a schedule. */
  rows: SlotRecord[] | null;
  lastReadAt: number;
  /** Set while a read is owed: the earliest time it may run. */
  dueAt: number | undefined;
  readAtMs: number;
}

/** Job leases only: agents' liveness leases are the fleet's, shown there. */
export function isJobLease(name: string): boolean {
  return !name.startsWith(AGENT_LEASE_PREFIX);
}

export class ScheduleReader {
  private readonly known = new Map<string, Known>();
  private leases = new Map<string, LeaseView>();
  private timer: NodeJS.Timeout | undefined;
  private slow: NodeJS.Timeout | undefined;
  private reading = false;
  private closed = false;
  /** Every schedule's record by name: read after a pass of ledger reads that found a schedule without one, else every LEDGER_SLOW_MS. */
  private records = new Map<string, ScheduleRecord>();
  private recordsReadAt = -Infinity;
  /** Schedules the last records read had none for (replicas of an older leasehold): not a reason to read again. */
  private readonly askedFor = new Set<string>();
  reads = 0;
  /** Reads of the schedule records (`schedules()`), apart from the ledger reads of each name. */
  recordReads = 0;
  error: string | null = null;

  constructor(
    private readonly ledger: SlotLedgerPort,
    private readonly onChange: () => void,
    private readonly now: () => number = () => performance.now(),
  ) {}

  start(): void {
    this.slow = setInterval(() => {
      for (const [name, k] of this.known) if (k.rows !== null && k.rows.length > 0) this.owe(name, k);
    }, LEDGER_SLOW_MS);
    this.slow.unref();
  }

  /** The watcher's latest leases and the names it reported changed. */
  update(leases: ReadonlyMap<string, LeaseView>, changed: readonly string[]): void {
    this.leases = new Map([...leases].filter(([n]) => isJobLease(n)));
    for (const name of this.known.keys()) if (!this.leases.has(name)) this.known.delete(name);
    for (const name of this.leases.keys()) {
      let k = this.known.get(name);
      if (k === undefined) {
        k = { rows: null, lastReadAt: -Infinity, dueAt: undefined, readAtMs: 0 };
        this.known.set(name, k);
        this.owe(name, k);
      }
    }
    for (const name of changed) {
      const k = this.known.get(name);
      if (k !== undefined) this.owe(name, k);
    }
  }

  private owe(_name: string, k: Known): void {
    const at = Math.max(this.now(), k.lastReadAt + LEDGER_MIN_GAP_MS);
    k.dueAt = k.dueAt === undefined ? at : Math.min(k.dueAt, at);
    this.arm();
  }

  private arm(): void {
    if (this.closed || this.reading) return;
    let first = Infinity;
    for (const k of this.known.values()) if (k.dueAt !== undefined) first = Math.min(first, k.dueAt);
    if (first === Infinity) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.drain(), Math.max(0, first - this.now()));
    this.timer.unref();
  }

  /** Reads every ledger that is owed and due, one at a time. Never throws (a timer calls it). */
  private async drain(): Promise<void> {
    this.timer = undefined;
    if (this.reading || this.closed) return;
    this.reading = true;
    let changed = false;
    try {
      for (;;) {
        const now = this.now();
        const next = [...this.known].find(([, k]) => k.dueAt !== undefined && k.dueAt <= now);
        if (next === undefined) break;
        const [name, k] = next;
        k.dueAt = undefined;
        k.lastReadAt = now;
        this.reads++;
        try {
          // Enough rows to find the period and the gaps of the slots shown.
          k.rows = (await this.ledger.records(name, { limit: SLOTS_SHOWN + 1 })).filter((r) => r.slotAtMs !== null);
          k.readAtMs = Date.now();
          this.error = null;
        } catch (e) {
          this.error = `slot ledger: ${errorMessage(e)}`;
        }
        changed = true;
        if (this.closed) return;
      }
      if (changed && this.recordsOwed()) {
        this.recordsReadAt = this.now();
        this.recordReads++;
        try {
          this.records = new Map((await this.ledger.schedules!()).map((r) => [r.name, r]));
        } catch (e) {
          this.error = `schedule records: ${errorMessage(e)}`;
        }
        for (const [name, k] of this.known) if (k.rows !== null && k.rows.length > 0 && !this.records.has(name)) this.askedFor.add(name);
      }
    } finally {
      this.reading = false;
    }
    if (changed) this.onChange();
    this.arm();
  }

  /**
   * A record changes when a schedule is first led and when a catch-up starts or ends, and costs
   * a read of every schedule's: read when a schedule shows up without one, and otherwise on the
   * slow timer, so a catch-up in progress shows within LEDGER_SLOW_MS, at 2 reads a minute.
   */
  private recordsOwed(): boolean {
    if (this.ledger.schedules === undefined) return false;
    if (this.now() - this.recordsReadAt >= LEDGER_SLOW_MS) return true;
    for (const [name, k] of this.known) if (k.rows !== null && k.rows.length > 0 && !this.records.has(name) && !this.askedFor.has(name)) return true;
    return false;
  }

  rows(): ScheduleRow[] {
    const out: ScheduleRow[] = [];
    for (const [name, k] of [...this.known].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      const l = this.leases.get(name);
      if (l === undefined || k.rows === null || k.rows.length === 0) continue;
      out.push(scheduleRow(l, k.rows, k.readAtMs, this.records.get(name)));
    }
    return out;
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.slow !== undefined) clearInterval(this.slow);
  }
}

/** What one ledger read says about a schedule, newest slot first. */
export function scheduleRow(l: LeaseView, records: readonly SlotRecord[], readAtMs: number, record?: ScheduleRecord): ScheduleRow {
  const sorted = records.filter((r): r is SlotRecord & { slotAtMs: number } => r.slotAtMs !== null).sort((a, b) => a.slotAtMs - b.slotAtMs);
  let periodMs: number | null = null;
  for (let i = 1; i < sorted.length; i++) {
    const d = sorted[i]!.slotAtMs - sorted[i - 1]!.slotAtMs;
    if (d > 0 && (periodMs === null || d < periodMs)) periodMs = d;
  }
  const slots: SlotRow[] = sorted.map((r, i) => {
    const prev = sorted[i - 1];
    const gap = prev === undefined || periodMs === null ? 0 : Math.max(0, Math.round((r.slotAtMs - prev.slotAtMs) / periodMs) - 1);
    return {
      key: r.key,
      slotAtMs: r.slotAtMs,
      status: r.status,
      token: r.token.toString(),
      holder: r.holder,
      startedAtMs: r.startedAtMs,
      endedAtMs: r.endedAtMs,
      exitCode: r.exitCode,
      reason: r.reason,
      missed: r.status === 'skipped' && /^missed/.test(r.reason ?? ''),
      gapBefore: gap,
    };
  });
  const newest = sorted.at(-1);
  const success = sorted.filter((r) => r.status === 'succeeded').at(-1);
  return {
    name: l.name,
    state: l.state,
    holder: l.holder,
    token: l.token.toString(),
    expiresAtMs: l.expiresAtMs,
    periodMs,
    nextDueEstimateMs: newest === undefined || periodMs === null ? null : newest.slotAtMs + periodMs,
    schedule: record === undefined ? null : scheduleOf(record),
    nextDueMs: record === undefined ? null : nextDueOf(record, l.storeNowMs),
    // The oldest row only finds the period; the rest are shown.
    slots: slots.slice(-SLOTS_SHOWN).reverse(),
    lastSuccessAtMs: success?.endedAtMs ?? success?.slotAtMs ?? null,
    readAtMs,
  };
}

/** A record as shown: who wrote it is the lease's business (holder and token are shown from it). */
function scheduleOf(r: ScheduleRecord): NonNullable<ScheduleRow['schedule']> {
  const { name: _n, token: _t, updatedAtMs: _u, ...shown } = r;
  return shown;
}
