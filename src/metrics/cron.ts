/**
 * Schedule metrics on a prom-client Registry, for the crons this process runs (`startCron`,
 * `leasehold cron`). Label `schedule` is the cron's name.
 *
 *   leasehold_cron_slots_total{schedule,outcome}          counter: slot outcomes this replica recorded:
 *                                                         succeeded, failed, interrupted, skipped, completion-refused
 *   leasehold_cron_missed_slots_total{schedule}           counter: slots this replica recorded skipped as missed
 *   leasehold_cron_start_lateness_seconds{schedule}       histogram: a job's start after its slot's time, by the store's clock
 *   leasehold_cron_last_success_timestamp_seconds{schedule} gauge: when the newest succeeded slot ended, by the store's clock,
 *                                                         read from the ledger (whichever replica ran it)
 *   leasehold_cron_next_slot_timestamp_seconds{schedule}  gauge: the schedule's next slot after this host's now
 *   leasehold_cron_ledger_read_errors_total{schedule}     counter: scrapes whose ledger read failed
 *
 * Why the counters are per replica and the last success is not: each slot's outcome is written
 * by exactly one replica (the one whose term claimed or skipped it), so `sum by (schedule)` of
 * the counters across replicas is the schedule's own count, with nothing counted twice. "When
 * did this schedule last succeed" is a fact of the ledger, not of a replica (in per-slot mode any
 * replica may have run the slot), so every replica reads it from there and reports the same
 * value: alert on `max by (schedule)`. docs/observability.md has the alert rules.
 *
 * Several crons may share one registry: the metrics are registered once per registry and
 * prefix, and each cron adds its own label values.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { CronHandle, SlotEvent } from '../scheduler/cron.js';
import type { SlotRecord } from '../scheduler/ledger.js';

export interface RegisterCronMetricsOptions {
  registry: Registry;
  /** Default `leasehold_`. */
  prefix?: string;
  /** Scrapes closer together than this share one ledger read per schedule. Default 5000 ms. */
  minIntervalMs?: number;
  /** Start-lateness buckets, in seconds. */
  latenessBuckets?: number[];
}

export interface CronMetrics {
  /** Stops counting this cron and drops its label values (the metrics stay for other crons). */
  close(): void;
}

/** A job starts a few milliseconds after its slot; seconds when a store or a host was slow. */
export const LATENESS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** How many of a schedule's newest ledger rows a scrape reads to find its last success. */
const ROWS_PER_READ = 100;

const OUTCOMES = new Set<SlotEvent['event']>(['succeeded', 'failed', 'interrupted', 'skipped', 'completion-refused']);

interface Watched {
  cron: CronHandle;
  /** The newest success seen so far (ms, store clock): kept when later reads no longer reach it. */
  lastSuccessMs: number | null;
  last: { at: number; read: Promise<void> } | undefined;
}

interface Family {
  slots: Counter;
  missed: Counter;
  lateness: Histogram;
  errors: Counter;
  crons: Map<string, Watched>;
}

const families = new WeakMap<Registry, Map<string, Family>>();

function family(options: RegisterCronMetricsOptions): Family {
  const p = options.prefix ?? 'leasehold_';
  let byPrefix = families.get(options.registry);
  if (byPrefix === undefined) families.set(options.registry, (byPrefix = new Map()));
  const known = byPrefix.get(p);
  if (known !== undefined) return known;
  const registers = [options.registry];
  const minInterval = options.minIntervalMs ?? 5000;
  const crons = new Map<string, Watched>();
  const errors = new Counter({ name: `${p}cron_ledger_read_errors_total`, help: 'Scrapes whose read of the slot ledger failed', labelNames: ['schedule'], registers });
  const refresh = (w: Watched): Promise<void> => {
    const now = performance.now();
    if (w.last === undefined || now - w.last.at >= minInterval) {
      const read = w.cron.ledger.records(w.cron.name, { limit: ROWS_PER_READ }).then(
        (rows: SlotRecord[]) => {
          for (const r of rows) {
            if (r.status === 'succeeded' && r.endedAtMs !== null && (w.lastSuccessMs === null || r.endedAtMs > w.lastSuccessMs)) w.lastSuccessMs = r.endedAtMs;
          }
        },
        () => void errors.inc({ schedule: w.cron.name }),
      );
      w.last = { at: now, read };
    }
    return w.last.read;
  };
  new Gauge({
    name: `${p}cron_last_success_timestamp_seconds`,
    help: "When the schedule's newest succeeded slot ended, by the store's clock, read from the ledger",
    labelNames: ['schedule'],
    registers,
    async collect() {
      this.reset();
      const all = [...crons.values()];
      await Promise.all(all.map(refresh));
      for (const w of all) if (w.lastSuccessMs !== null) this.set({ schedule: w.cron.name }, w.lastSuccessMs / 1000);
    },
  });
  new Gauge({
    name: `${p}cron_next_slot_timestamp_seconds`,
    help: "The schedule's next slot after this host's now",
    labelNames: ['schedule'],
    registers,
    collect() {
      this.reset();
      for (const w of crons.values()) {
        const next = w.cron.schedule.next(Date.now());
        if (next !== null) this.set({ schedule: w.cron.name }, next / 1000);
      }
    },
  });
  const made: Family = {
    slots: new Counter({ name: `${p}cron_slots_total`, help: 'Slot outcomes this replica recorded, by outcome', labelNames: ['schedule', 'outcome'], registers }),
    missed: new Counter({ name: `${p}cron_missed_slots_total`, help: 'Slots this replica recorded skipped as missed (no replica ran them in time)', labelNames: ['schedule'], registers }),
    lateness: new Histogram({
      name: `${p}cron_start_lateness_seconds`,
      help: "A job's start after its slot's time, by the store's clock",
      labelNames: ['schedule'],
      buckets: options.latenessBuckets ?? LATENESS_BUCKETS,
      registers,
    }),
    errors,
    crons,
  };
  byPrefix.set(p, made);
  return made;
}

/**
 * Counts `cron`'s slots on `options.registry` and reports its schedule's last success from the
 * ledger at scrape time. prom-client escapes label values per the text format.
 * @throws {Error} a cron of the same name is already registered on this registry and prefix.
 */
export function registerCronMetrics(cron: CronHandle, options: RegisterCronMetricsOptions): CronMetrics {
  const f = family(options);
  const schedule = cron.name;
  if (f.crons.has(schedule)) throw new Error(`a cron named ${JSON.stringify(schedule)} is already registered on this registry`);
  f.crons.set(schedule, { cron, lastSuccessMs: null, last: undefined });
  const onSlot = (e: SlotEvent): void => {
    if (e.event === 'started' && e.delayMs !== undefined) f.lateness.observe({ schedule }, Math.max(0, e.delayMs) / 1000);
    if (!OUTCOMES.has(e.event)) return;
    f.slots.inc({ schedule, outcome: e.event });
    if (e.event === 'skipped' && e.reason?.startsWith('missed') === true) f.missed.inc({ schedule });
  };
  cron.on('slot', onSlot);
  return {
    close() {
      cron.off('slot', onSlot);
      f.crons.delete(schedule);
      for (const m of [f.slots, f.missed, f.lateness, f.errors]) {
        // Only this schedule's series; another cron on the registry keeps its own.
        (m as Counter<string>).remove({ schedule });
        for (const outcome of OUTCOMES) (m as Counter<string>).remove({ schedule, outcome });
      }
    },
  };
}
