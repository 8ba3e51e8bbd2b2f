/**
 * `leasehold/metrics/otel`: the same metrics as `leasehold/metrics`, on an OpenTelemetry Meter
 * (`metrics.getMeter('leasehold')` from @opentelemetry/api). leasehold does not depend on
 * OpenTelemetry: the meter is taken structurally, so any 1.x API works.
 *
 * Names use dots, as OpenTelemetry does: leasehold.leader, leasehold.token,
 * leasehold.terms_won, leasehold.terms_lost (attribute reason), leasehold.renewal.duration (s),
 * leasehold.jeopardy, leasehold.suspicions (attribute detector), leasehold.fenced_writes
 * (attribute resource); every per-lease one has the attribute `lease`. A Prometheus exporter
 * turns them into the same series as the prom-client entry, suffixes aside.
 */
import type { Leasehold } from '../core/leasehold.js';
import { MetricsTracker, type MetricsSink, type TrackOptions } from './core.js';

type Attributes = Record<string, string>;

/** The subset of @opentelemetry/api's Meter that leasehold uses. */
export interface MeterLike {
  createCounter(name: string, options?: { description?: string; unit?: string }): { add(value: number, attributes?: Attributes): void };
  createHistogram(name: string, options?: { description?: string; unit?: string }): { record(value: number, attributes?: Attributes): void };
  createObservableGauge(
    name: string,
    options?: { description?: string; unit?: string },
  ): {
    addCallback(cb: (result: { observe(value: number, attributes?: Attributes): void }) => void): void;
    removeCallback(cb: (result: { observe(value: number, attributes?: Attributes): void }) => void): void;
  };
}

export interface RegisterOtelMetricsOptions extends TrackOptions {
  meter: MeterLike;
  /** Default `leasehold.`. */
  prefix?: string;
}

export function registerOtelMetrics(leasehold: Leasehold, options: RegisterOtelMetricsOptions): MetricsTracker {
  const p = options.prefix ?? 'leasehold.';
  const m = options.meter;
  const won = m.createCounter(`${p}terms_won`, { description: 'Terms this process won' });
  const lost = m.createCounter(`${p}terms_lost`, { description: 'Terms this process ended, by reason' });
  const renewal = m.createHistogram(`${p}renewal.duration`, { description: 'Renewal round trips that landed', unit: 's' });
  const jeopardy = m.createCounter(`${p}jeopardy`, { description: 'Times a renewal failed or was overdue and the token was withheld' });
  const suspicions = m.createCounter(`${p}suspicions`, { description: 'Suspensions, restores or clones detected, by detector' });
  const fenced = m.createCounter(`${p}fenced_writes`, { description: 'Writes a resource fence refused (stale token), by resource' });
  const sink: MetricsSink = {
    termWon: (lease) => won.add(1, { lease }),
    termLost: (lease, reason) => lost.add(1, { lease, reason }),
    renewal: (lease, s) => renewal.record(s, { lease }),
    jeopardy: (lease) => jeopardy.add(1, { lease }),
    suspicion: (detector) => suspicions.add(1, { detector }),
    fenced: (resource) => fenced.add(1, { resource }),
  };
  const tracker = new MetricsTracker(leasehold, sink, options);
  const leader = m.createObservableGauge(`${p}leader`, { description: 'Whether this process leads the lease (1) or not (0)' });
  const token = m.createObservableGauge(`${p}token`, { description: "The current term's fencing token (exact up to 2^53)" });
  const observeLeader = (r: { observe(v: number, a?: Attributes): void }): void => {
    for (const g of tracker.gauges()) r.observe(g.leader, { lease: g.lease });
  };
  const observeToken = (r: { observe(v: number, a?: Attributes): void }): void => {
    for (const g of tracker.gauges()) if (g.token !== null) r.observe(Number(g.token), { lease: g.lease });
  };
  leader.addCallback(observeLeader);
  token.addCallback(observeToken);
  const close = tracker.close.bind(tracker);
  tracker.close = () => {
    close();
    leader.removeCallback(observeLeader);
    token.removeCallback(observeToken);
  };
  return tracker;
}
