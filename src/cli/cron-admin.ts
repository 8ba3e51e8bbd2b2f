/**
 * The read-only cron commands: `leasehold cron history NAME` (one schedule's slots) and
 * `leasehold cron ls` (every schedule in the store, with its lease and its last outcomes).
 *
 * Where `cron ls` finds the schedules: the slot ledger has no list of names on every store
 * (Redis keeps one hash per name and no index of them: only a SCAN of the keyspace could find
 * them), so the names come from the lease store's list, and a lease is a schedule when its
 * newest ledger rows include a scheduled slot (a `run --once-per` key has no slot time). Every
 * schedule's lease has a row there: a slot is claimed only under a term of it. On Redis, a
 * released lease's row is kept for the store's retainMs (7 days by default), so a schedule
 * whose last term ended longer ago than that is not listed (`cron history NAME` still reads it).
 *
 * What it cannot say: the next due slot. The schedule's expression lives in the replicas'
 * command lines, not in the store; the ledger holds the slots that were handled.
 */
import { openSlotLedger } from '../backends/index.js';
import type { SlotRecord } from '../scheduler/ledger.js';
import { nextDueOf, type ScheduleRecord } from '../scheduler/schedule-record.js';
import { EXIT, formatMs, openStoreFromFlags, out, requireCurrentSchema, table, toJson, usageError, type StoreFlagValues } from './common.js';

/** How many of a name's newest ledger rows `cron ls` reads: its last outcome and last success. */
const ROWS_PER_SCHEDULE = 100;

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** `--limit` for cron history: 1 to 100000, default 50. */
function historyLimit(limit: string | undefined): number {
  if (limit === undefined) return 50;
  if (!/^\d+$/.test(limit) || Number(limit) < 1 || Number(limit) > 100_000) {
    throw usageError(`--limit ${JSON.stringify(limit)} is not a count; give a whole number from 1 to 100000`);
  }
  return Number(limit);
}

function rowJson(r: SlotRecord): Record<string, unknown> {
  return {
    name: r.name,
    slot: r.key,
    slotAt: iso(r.slotAtMs),
    status: r.status,
    token: r.token.toString(),
    holder: r.holder,
    startedAt: iso(r.startedAtMs),
    endedAt: iso(r.endedAtMs),
    exitCode: r.exitCode,
    reason: r.reason,
  };
}

export async function cronHistory(name: string, values: StoreFlagValues & { limit?: string; json?: boolean }): Promise<number> {
  const limit = historyLimit(values.limit);
  const { store, url } = await openStoreFromFlags(values);
  try {
    await requireCurrentSchema(store);
    const ledger = await openSlotLedger(store, url);
    try {
      const rows = (await ledger.records(name, { limit })).map(rowJson);
      if (values.json === true) {
        out(toJson(rows));
        return EXIT.OK;
      }
      if (rows.length === 0) {
        out(`no slots for ${JSON.stringify(name)} in ${store.description}`);
        return EXIT.OK;
      }
      const s = (v: unknown): string => (v === null || v === undefined ? '-' : String(v as string | number));
      out(
        table(
          ['SLOT', 'STATUS', 'TOKEN', 'HOLDER', 'STARTED (STORE CLOCK)', 'ENDED', 'EXIT', 'REASON'],
          rows.map((r) => [s(r['slot']), s(r['status']), s(r['token']), s(r['holder']), s(r['startedAt']), s(r['endedAt']), s(r['exitCode']), r['reason'] === null ? '' : s(r['reason'])]),
        ),
      );
      return EXIT.OK;
    } finally {
      await ledger.close();
    }
  } finally {
    await store.close();
  }
}

interface ScheduleSummary {
  name: string;
  /** The schedule's lease: held while a slot's job runs (per-slot) or by the leader (--mode leader). */
  lease: { state: 'held' | 'expired' | 'free'; holder: string | null; token: string; expiresInMs: number | null };
  /** The newest scheduled slot in the ledger. */
  last: Record<string, unknown>;
  /** The newest slot that succeeded among the last ROWS_PER_SCHEDULE rows, or null. */
  lastSuccess: { slot: string; endedAt: string | null; holder: string | null } | null;
  /** Outcomes among the same rows (the newest ROWS_PER_SCHEDULE). */
  recent: Partial<Record<SlotRecord['status'], number>>;
  storeNow: string;
  /**
   * What the schedule is, as the replica leading it wrote it (expression and zone, mode,
   * catch-up policy and window, a catch-up in progress); null when it has no record (a ledger
   * without them, or replicas older than them).
   */
  schedule: {
    description: string;
    expression: string | null;
    timeZone: string | null;
    everyMs: number | null;
    mode: string;
    catchUp: string;
    catchUpWindowMs: number;
    catchingUp: { from: string; until: string; slots: number } | null;
    writtenBy: { holder: string; token: string; at: string };
  } | null;
  /** The next slot after storeNow, from the record's expression (by the store's clock); null without a record. */
  nextDue: string | null;
}

/** `leasehold cron ls [--name NAME] [--json]`. */
export async function cronList(values: StoreFlagValues & { name?: string; json?: boolean }): Promise<number> {
  const { store, url } = await openStoreFromFlags(values);
  try {
    await requireCurrentSchema(store);
    const ledger = await openSlotLedger(store, url);
    try {
      const leases = (await store.list(values.name === undefined ? {} : { name: values.name })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      const schedules: ScheduleSummary[] = [];
      const records = new Map((ledger.schedules === undefined ? [] : await ledger.schedules()).map((r) => [r.name, r]));
      for (const l of leases) {
        const rows = (await ledger.records(l.name, { limit: ROWS_PER_SCHEDULE })).filter((r) => r.slotAtMs !== null);
        const last = rows.at(-1);
        if (last === undefined) continue;
        const success = rows.filter((r) => r.status === 'succeeded').at(-1);
        const recent: ScheduleSummary['recent'] = {};
        for (const r of rows) recent[r.status] = (recent[r.status] ?? 0) + 1;
        schedules.push({
          name: l.name,
          lease: { state: l.state, holder: l.holder, token: l.token.toString(), expiresInMs: l.expiresAtMs === null ? null : l.expiresAtMs - l.storeNowMs },
          last: rowJson(last),
          lastSuccess: success === undefined ? null : { slot: success.key, endedAt: iso(success.endedAtMs), holder: success.holder },
          recent,
          storeNow: new Date(l.storeNowMs).toISOString(),
          ...scheduleOf(records.get(l.name), l.storeNowMs),
        });
      }
      if (values.json === true) {
        out(toJson(schedules));
        return EXIT.OK;
      }
      if (schedules.length === 0) {
        out(`no schedules${values.name === undefined ? '' : ` named ${JSON.stringify(values.name)}`} in ${store.description} (a schedule appears once a replica of \`leasehold cron\` has handled a slot)`);
        return EXIT.OK;
      }
      out(
        table(
          ['NAME', 'SCHEDULE', 'NEXT DUE', 'LAST SLOT', 'OUTCOME', 'BY', 'LAST SUCCESS', `LAST ${ROWS_PER_SCHEDULE} SLOTS`, 'LEASE'],
          schedules.map((s) => [
            s.name,
            s.schedule === null
              ? '? (no record)'
              : `${s.schedule.description}, ${s.schedule.mode}, catch-up ${s.schedule.catchUp} ${formatMs(s.schedule.catchUpWindowMs)}` +
                (s.schedule.catchingUp === null ? '' : `, catching up ${s.schedule.catchingUp.slots} from ${s.schedule.catchingUp.from}`),
            s.nextDue ?? '-',
            String(s.last['slot']),
            String(s.last['status']) + (s.last['reason'] === null || s.last['status'] === 'succeeded' ? '' : ` (${String(s.last['reason'])})`),
            s.last['holder'] === null ? '-' : String(s.last['holder']),
            s.lastSuccess?.slot ?? 'none',
            Object.entries(s.recent)
              .map(([k, n]) => `${n} ${k}`)
              .join(', '),
            s.lease.state === 'held' ? `held by ${s.lease.holder ?? '?'} (token ${s.lease.token}, ${formatMs(s.lease.expiresInMs ?? 0)} left)` : s.lease.state,
          ]),
        ),
      );
      return EXIT.OK;
    } finally {
      await ledger.close();
    }
  } finally {
    await store.close();
  }
}

/** The record's part of a summary: the next due slot from its expression, by the store's clock. */
function scheduleOf(r: ScheduleRecord | undefined, storeNowMs: number): Pick<ScheduleSummary, 'schedule' | 'nextDue'> {
  if (r === undefined) return { schedule: null, nextDue: null };
  const next = nextDueOf(r, storeNowMs);
  return {
    schedule: {
      description: r.description,
      expression: r.expression,
      timeZone: r.timeZone,
      everyMs: r.everyMs,
      mode: r.mode,
      catchUp: r.catchUp,
      catchUpWindowMs: r.catchUpWindowMs,
      catchingUp: r.catchingUp === null ? null : { from: new Date(r.catchingUp.fromMs).toISOString(), until: new Date(r.catchingUp.untilMs).toISOString(), slots: r.catchingUp.slots },
      writtenBy: { holder: r.holder, token: r.token.toString(), at: new Date(r.updatedAtMs).toISOString() },
    },
    nextDue: next === null ? null : new Date(next).toISOString(),
  };
}
