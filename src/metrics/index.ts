/**
 * `leasehold/metrics`: Prometheus metrics on the caller's prom-client Registry (prom-client is
 * an optional peer dependency: this entry is the only part of leasehold that loads it).
 *
 *   import { Registry } from 'prom-client';
 *   import { registerMetrics } from 'leasehold/metrics';
 *   const registry = new Registry();
 *   const metrics = registerMetrics(leasehold, { registry });
 *
 * Metrics (label `lease` unless said otherwise):
 *   leasehold_leader                      gauge 0/1: this process leads (client-go's leader_election_master_status)
 *   leasehold_token                       gauge: the current term's fencing token (absent when not holding)
 *   leasehold_terms_won_total             counter
 *   leasehold_terms_lost_total{reason}    counter: expired, superseded, released, revoked, store-unreachable, suspended, stalled, cloned
 *   leasehold_renewal_seconds             histogram: renewal round trip
 *   leasehold_jeopardy_total              counter: renewals that failed or were overdue (token withheld)
 *   leasehold_suspicions_total{detector}  counter: wall-clock-jump, store-clock-advance, deadline-passed, manual
 *   leasehold_fenced_writes_total{resource} counter: writes a fence refused (count them with countFenced / fenced)
 *
 * `registerFleetMetrics(fleet, { registry })` adds the fleet's (./fleet.ts): agents by state,
 * resources owned and heartbeat age per agent.
 * `registerCronMetrics(cron, { registry })` adds a schedule's (./cron.ts): slots by outcome,
 * missed slots, start lateness, and the last success read from the ledger.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { Leasehold } from '../core/leasehold.js';
import { MetricsTracker, type MetricsSink, type TrackOptions } from './core.js';

export { MetricsTracker, type MetricsSink, type TrackOptions, type LeaseGaugeValues } from './core.js';
export { registerFleetMetrics, type RegisterFleetMetricsOptions, type FleetMetrics } from './fleet.js';
export { registerCronMetrics, LATENESS_BUCKETS, type RegisterCronMetricsOptions, type CronMetrics } from './cron.js';

export interface RegisterMetricsOptions extends TrackOptions {
  registry: Registry;
  /** Default `leasehold_`. */
  prefix?: string;
  /** Renewal latency buckets, in seconds. */
  renewalBuckets?: number[];
}

/** Renewals are one round trip to a store: milliseconds, and seconds when something is wrong. */
export const RENEWAL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * Registers leasehold's metrics on `registry` and starts counting. Returns the tracker:
 * `instrument(lease)`, `countFenced(write)`, `fenced(err)`, and `close()` (which also removes
 * the metrics from the registry).
 */
export function registerMetrics(leasehold: Leasehold, options: RegisterMetricsOptions): MetricsTracker {
  const p = options.prefix ?? 'leasehold_';
  const registers = [options.registry];
  const won = new Counter({ name: `${p}terms_won_total`, help: 'Terms this process won', labelNames: ['lease'], registers });
  const lost = new Counter({ name: `${p}terms_lost_total`, help: 'Terms this process ended, by reason', labelNames: ['lease', 'reason'], registers });
  const renewal = new Histogram({
    name: `${p}renewal_seconds`,
    help: 'Renewal round trips that landed, from send to answer',
    labelNames: ['lease'],
    buckets: options.renewalBuckets ?? RENEWAL_BUCKETS,
    registers,
  });
  const jeopardy = new Counter({ name: `${p}jeopardy_total`, help: 'Times a renewal failed or was overdue and the token was withheld', labelNames: ['lease'], registers });
  const suspicions = new Counter({ name: `${p}suspicions_total`, help: 'Suspensions, restores or clones detected, by detector', labelNames: ['detector'], registers });
  const fenced = new Counter({ name: `${p}fenced_writes_total`, help: 'Writes a resource fence refused (stale token), by resource', labelNames: ['resource'], registers });
  const sink: MetricsSink = {
    termWon: (lease) => won.inc({ lease }),
    termLost: (lease, reason) => lost.inc({ lease, reason }),
    renewal: (lease, s) => renewal.observe({ lease }, s),
    jeopardy: (lease) => jeopardy.inc({ lease }),
    suspicion: (detector) => suspicions.inc({ detector }),
    fenced: (resource) => fenced.inc({ resource }),
  };
  const tracker = new MetricsTracker(leasehold, sink, options);
  // Read at scrape time: a lease's leadership is a fact of that moment, not of its last event.
  const gauges: Gauge[] = [
    new Gauge({
      name: `${p}leader`,
      help: 'Whether this process leads the lease (1) or not (0): it holds a term and its last renewal landed in time',
      labelNames: ['lease'],
      registers,
      collect() {
        this.reset();
        for (const g of tracker.gauges()) this.set({ lease: g.lease }, g.leader);
      },
    }),
    new Gauge({
      name: `${p}token`,
      help: "The current term's fencing token (exact up to 2^53), while this process holds a term",
      labelNames: ['lease'],
      registers,
      collect() {
        this.reset();
        for (const g of tracker.gauges()) if (g.token !== null) this.set({ lease: g.lease }, Number(g.token));
      },
    }),
  ];
  const close = tracker.close.bind(tracker);
  tracker.close = () => {
    close();
    for (const n of ['terms_won_total', 'terms_lost_total', 'renewal_seconds', 'jeopardy_total', 'suspicions_total', 'fenced_writes_total']) {
      options.registry.removeSingleMetric(`${p}${n}`);
    }
    for (const g of gauges) g.reset();
    options.registry.removeSingleMetric(`${p}leader`);
    options.registry.removeSingleMetric(`${p}token`);
  };
  return tracker;
}
