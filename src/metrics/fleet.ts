/**
 * Fleet metrics on a prom-client Registry, read from the registry of agents at scrape time (one
 * `fleet.agents()` read per scrape, and at most one per `minIntervalMs` however many scrapers):
 *
 *   leasehold_fleet_agents{state}                      gauge: agents by state: live, stale, draining (live ones draining), deregistered
 *   leasehold_fleet_agent_owned{agent}                 gauge: resources each registered agent owns
 *   leasehold_fleet_agent_heartbeat_age_seconds{agent} gauge: store now minus the agent's last heartbeat, by the store's clock
 *   leasehold_fleet_read_errors_total                  counter: scrapes whose read of the registry failed (the gauges then keep nothing)
 *
 * "Stale" is an agent that is registered and not live: its liveness lease ran out, the alert to
 * page on (docs/observability.md has the rule).
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Fleet } from '../fleet/fleet.js';
import type { AgentRow } from '../fleet/port.js';

export interface RegisterFleetMetricsOptions {
  registry: Registry;
  /** Default `leasehold_`. */
  prefix?: string;
  /** Scrapes closer together than this share one read. Default 1000 ms. */
  minIntervalMs?: number;
}

export interface FleetMetrics {
  /** Removes the fleet metrics from the registry. */
  close(): void;
}

export function registerFleetMetrics(fleet: Fleet, options: RegisterFleetMetricsOptions): FleetMetrics {
  const p = options.prefix ?? 'leasehold_';
  const registers = [options.registry];
  const minInterval = options.minIntervalMs ?? 1000;
  let last: { at: number; rows: Promise<AgentRow[] | undefined> } | undefined;
  const errors = new Counter({ name: `${p}fleet_read_errors_total`, help: 'Scrapes whose read of the fleet registry failed', registers });
  const read = (): Promise<AgentRow[] | undefined> => {
    const now = performance.now();
    if (last === undefined || now - last.at >= minInterval) {
      last = {
        at: now,
        rows: fleet.agents().catch(() => {
          errors.inc();
          return undefined;
        }),
      };
    }
    return last.rows;
  };
  const names = ['fleet_agents', 'fleet_agent_owned', 'fleet_agent_heartbeat_age_seconds', 'fleet_read_errors_total'];
  new Gauge({
    name: `${p}fleet_agents`,
    help: 'Fleet agents by state: live, stale (registered, liveness lease run out), draining (live and draining), deregistered',
    labelNames: ['state'],
    registers,
    async collect() {
      this.reset();
      const rows = await read();
      if (rows === undefined) return;
      const count = { live: 0, stale: 0, draining: 0, deregistered: 0 };
      for (const a of rows) {
        if (a.deregistered) count.deregistered++;
        else if (a.live) {
          count.live++;
          if (a.draining) count.draining++;
        } else count.stale++;
      }
      for (const [state, n] of Object.entries(count)) this.set({ state }, n);
    },
  });
  new Gauge({
    name: `${p}fleet_agent_owned`,
    help: 'Resources each registered agent owns',
    labelNames: ['agent'],
    registers,
    async collect() {
      this.reset();
      for (const a of (await read()) ?? []) if (!a.deregistered) this.set({ agent: a.id }, a.owned);
    },
  });
  new Gauge({
    name: `${p}fleet_agent_heartbeat_age_seconds`,
    help: "Store now minus each registered agent's last heartbeat, by the store's clock",
    labelNames: ['agent'],
    registers,
    async collect() {
      this.reset();
      for (const a of (await read()) ?? []) if (!a.deregistered && a.heartbeatAgeMs !== null) this.set({ agent: a.id }, a.heartbeatAgeMs / 1000);
    },
  });
  return {
    close() {
      for (const n of names) options.registry.removeSingleMetric(`${p}${n}`);
    },
  };
}
