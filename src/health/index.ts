/**
 * Health for probes, in the spirit of client-go's HealthzAdaptor: liveness fails only in the
 * wedged-leader case, readiness says "leading".
 *
 * - live: fails when this process believes it holds a term (leading or in jeopardy) but its
 *   last successful renewal (or the acquisition) is older than `maxRenewalAge` (default: the
 *   lease's TTL). The engine stands down at its local deadline, well inside a TTL, so a term
 *   still believed past that means the renewal loop or the event loop is stuck: restarting the
 *   process is the cure. A follower, or a leader whose store is down, stays live (a restart
 *   would not bring the store back).
 * - ready: passes while `lease.isLeader` (a term held and its last renewal landed in time).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseDuration, type Duration } from '../core/config.js';
import type { Lease } from '../core/lease.js';

export interface HealthOptions {
  /** How old the last renewal of a believed term may be before liveness fails. Default: each lease's TTL. */
  maxRenewalAge?: Duration;
}

export interface LeaseHealth {
  lease: string;
  state: Lease['state'];
  leader: boolean;
  token: string | null;
  /** Milliseconds since the last renewal landed (or the term began); null without a term. */
  renewalAgeMs: number | null;
  /** False in the wedged-leader case. */
  live: boolean;
}

export interface HealthReport {
  ok: boolean;
  leases: LeaseHealth[];
}

export class HealthCheck {
  private readonly leases = new Map<Lease, { lastOk: number; off: () => void }>();
  private readonly maxAgeMs: number | undefined;

  constructor(leases: Lease | readonly Lease[], options: HealthOptions = {}) {
    this.maxAgeMs = options.maxRenewalAge === undefined ? undefined : parseDuration(options.maxRenewalAge, 'max renewal age');
    for (const l of Array.isArray(leases) ? (leases as readonly Lease[]) : [leases as Lease]) this.add(l);
  }

  add(lease: Lease): void {
    if (this.leases.has(lease)) return;
    const entry = { lastOk: performance.now(), off: () => {} };
    const ok = (): void => {
      entry.lastOk = performance.now();
    };
    lease.on('acquired', ok);
    lease.on('renewed', ok);
    entry.off = () => {
      lease.off('acquired', ok);
      lease.off('renewed', ok);
    };
    this.leases.set(lease, entry);
  }

  private report(): LeaseHealth[] {
    const now = performance.now();
    return [...this.leases].map(([lease, e]) => {
      const term = lease.currentTerm;
      const age = term === undefined ? null : Math.round(now - e.lastOk);
      const bound = this.maxAgeMs ?? lease.timing.ttlMs;
      return {
        lease: lease.name,
        state: lease.state,
        leader: lease.isLeader,
        token: term === undefined ? null : term.token.toString(),
        renewalAgeMs: age,
        live: age === null || age <= bound,
      };
    });
  }

  /** Liveness: false only when a believed term has not been renewed within the bound. */
  live(): HealthReport {
    const leases = this.report();
    return { ok: leases.every((l) => l.live), leases };
  }

  /** Readiness: true while every lease checked is led by this process. */
  ready(): HealthReport {
    const leases = this.report();
    return { ok: leases.length > 0 && leases.every((l) => l.leader && l.live), leases };
  }

  /**
   * A node:http handler for `GET /healthz` (liveness) and `GET /readyz` (leading): 200 or 503
   * with the report as JSON; 404 elsewhere. Mount it on your own server or use `leasehold run
   * --health-port`.
   */
  readonly handler = (req: IncomingMessage, res: ServerResponse): void => {
    const path = (req.url ?? '/').split('?')[0];
    const r = path === '/healthz' || path === '/livez' ? this.live() : path === '/readyz' ? this.ready() : undefined;
    if (r === undefined || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(r === undefined ? 404 : 405, { 'content-type': 'text/plain' }).end(r === undefined ? 'not found\n' : 'GET only\n');
      return;
    }
    res.writeHead(r.ok ? 200 : 503, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(`${JSON.stringify(r)}\n`);
  };

  close(): void {
    for (const e of this.leases.values()) e.off();
    this.leases.clear();
  }
}

export function healthCheck(leases: Lease | readonly Lease[], options: HealthOptions = {}): HealthCheck {
  return new HealthCheck(leases, options);
}
