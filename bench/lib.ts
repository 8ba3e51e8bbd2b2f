/**
 * What every benchmark shares: the run's size (smoke, quick, full), the statistics, and the
 * record of results. A figure is only ever printed with the baseline measured in the same run,
 * interleaved with it, so load from other processes on the machine falls on both alike.
 */
import { randomBytes } from 'node:crypto';

export type Mode = 'smoke' | 'quick' | 'full';

export interface Sizes {
  /** Samples per latency figure (each side of an interleaved pair). */
  samples: number;
  /** Lease counts for the renewal figure. */
  leases: number[];
  handovers: number;
  failovers: number;
  /** Idle followers, and how many TTLs they are watched for. */
  followers: number;
  followerTtls: number;
  startups: number;
  /** TTL for the failover and follower figures (etcd: twice this; it grants whole seconds). */
  ttlMs: number;
}

export const SIZES: Record<Mode, Sizes> = {
  smoke: { samples: 3, leases: [1, 100], handovers: 2, failovers: 1, followers: 3, followerTtls: 1, startups: 1, ttlMs: 500 },
  quick: { samples: 15, leases: [1, 100, 1000], handovers: 10, failovers: 2, followers: 10, followerTtls: 2, startups: 5, ttlMs: 1000 },
  full: { samples: 40, leases: [1, 100, 1000, 10_000], handovers: 25, failovers: 5, followers: 50, followerTtls: 4, startups: 15, ttlMs: 1000 },
};

export interface Stat {
  median: number;
  p90: number;
  n: number;
}

export interface Result {
  /** The figure: 'renewal', 'handover', ... */
  figure: string;
  store: string;
  /** What was measured, e.g. '1000 leases'. */
  label: string;
  unit: string;
  leasehold: Stat;
  baselineName: string;
  baseline: Stat;
  /** leasehold median / baseline median. */
  ratio: number;
  /** Anything else the figure counts (store calls per tick, server commands, ...). */
  extra?: Record<string, number | string>;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
export const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

export function stat(xs: readonly number[]): Stat {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return { median: Number.NaN, p90: Number.NaN, n: 0 };
  const mid = s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  return { median: mid, p90: s[Math.min(s.length - 1, Math.ceil(0.9 * s.length) - 1)]!, n: s.length };
}

export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/**
 * Runs `a` and `b` alternately, `n` times each (after one unrecorded warm-up of each), starting
 * with a different one each round so neither always runs on a warmer connection.
 */
export async function interleave(n: number, a: () => Promise<number>, b: () => Promise<number>): Promise<[number[], number[]]> {
  await a();
  await b();
  const as: number[] = [];
  const bs: number[] = [];
  for (let i = 0; i < n; i++) {
    if (i % 2 === 0) {
      as.push(await a());
      bs.push(await b());
    } else {
      bs.push(await b());
      as.push(await a());
    }
  }
  return [as, bs];
}

export class Recorder {
  readonly results: Result[] = [];
  readonly skipped: { figure: string; store: string; why: string }[] = [];

  add(r: Omit<Result, 'ratio'>): void {
    // A baseline of zero (a peer that makes no calls at all) has no ratio: JSON null, printed n/a.
    const full: Result = { ...r, ratio: r.baseline.median > 0 ? r.leasehold.median / r.baseline.median : Number.NaN };
    this.results.push(full);
    const f = (n: number): string => (Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2));
    const extra = r.extra === undefined ? '' : `  [${Object.entries(r.extra).map(([k, v]) => `${k} ${typeof v === 'number' ? f(v) : v}`).join(', ')}]`;
    process.stdout.write(
      `  ${r.store.padEnd(8)} ${r.label.padEnd(22)} leasehold ${f(r.leasehold.median)} (p90 ${f(r.leasehold.p90)}) ${r.unit}` +
        ` | ${r.baselineName} ${f(r.baseline.median)} (p90 ${f(r.baseline.p90)}) | ${Number.isFinite(full.ratio) ? `${f(full.ratio)}x` : 'n/a'}${extra}\n`,
    );
  }

  skip(figure: string, store: string, why: string): void {
    this.skipped.push({ figure, store, why });
    process.stdout.write(`  ${store.padEnd(8)} skipped: ${why}\n`);
  }
}

export function heading(title: string): void {
  process.stdout.write(`\n# ${title}\n`);
}
