/**
 * Shared vocabulary of the chaos harness (see docs/chaos.md).
 *
 * Glossary
 * - worker: one real OS process running the leasehold library (test/chaos/worker.ts).
 * - unit: one piece of singleton work: read the token, work a little, then write to the
 *   resource carrying that token, WITHOUT re-checking the lease in between.
 * - resource: a PostgreSQL table (test/chaos/resource.ts) that keeps a high-water mark and an
 *   append-only log of accepted writes. Always PostgreSQL, whatever store holds the leases.
 * - fault: one thing the nemesis did (test/chaos/nemesis.ts), with when it started and healed.
 * - belief: the interval in which a worker held a term, as the worker saw it. Two beliefs at
 *   once are expected under pauses; the fence is what makes them harmless.
 * - session-end: the server ends the leader's session connection while its process lives
 *   (pg_terminate_backend, KILL CONNECTION): the revocation case of liveness 'session'.
 * - mono: CLOCK_MONOTONIC in milliseconds. Every process on the host shares it, libfaketime
 *   leaves it alone (FAKETIME_DONT_FAKE_MONOTONIC=1), so it is the common time base of every
 *   log; wall clocks may be faked on purpose.
 */

export type StoreKind = 'postgres' | 'sqlite' | 'redis' | 'etcd' | 'mysql';

export const FAULT_KINDS = [
  'pause',
  'kill',
  'term',
  'snapshot',
  'fork',
  'clock-jump',
  'clock-past',
  'proxy-delay',
  'proxy-blackhole',
  'proxy-reset',
  'restart',
  'session-end',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** Faults aimed at one process (failover is measured from when they began) vs. at the store link. */
export const PROCESS_FAULTS: ReadonlySet<FaultKind> = new Set(['pause', 'kill', 'term', 'snapshot', 'fork', 'clock-jump', 'clock-past', 'session-end']);

/**
 * How the workers' leases judge a holder alive (LeaseOptions.liveness): by renewals alone, or
 * also by their session (docs/liveness.md), where a dead holder's term ends at once.
 */
export type ChaosLiveness = 'ttl' | 'session';

/** CLOCK_MONOTONIC in ms: comparable across every process on this host. */
export function monoMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** Fields on every worker log line. `t` is mono; `wall` is the worker's own (maybe faked) Date.now(). */
export interface EventBase {
  t: number;
  wall: number;
  w: string;
  pid: number;
}

export type WorkerEventBody =
  | { ev: 'start'; holder: string; label: string; mode: WorkerMode; unfenced: boolean; resumedFrom?: string; forkedFrom?: string; clock?: string }
  | { ev: 'identity'; holder: string; why: string }
  | { ev: 'claim'; kind: 'acquire' | 'renew'; sent: number; outcome: string; token?: string; holder: string; error?: string; session?: boolean }
  | { ev: 'acquired'; token: string; holder: string }
  | { ev: 'jeopardy'; token: string }
  | { ev: 'recovered'; token: string }
  | { ev: 'lost'; token: string; reason: string }
  | { ev: 'released'; token: string; handedOver: boolean }
  | { ev: 'unit'; token: string; seq: number; holder: string; resumed?: boolean }
  | { ev: 'accepted' | 'fenced' | 'duplicate' | 'write-error'; token: string; seq: number; resumed?: boolean; highWater?: string | null; message?: string }
  | { ev: 'snapshot'; file: string; token: string | null; seq: number | null; api: boolean }
  | { ev: 'marker'; action: 'dropped' | 'kept'; token: string | null }
  | { ev: 'suspected'; detector: string; detail: string }
  | { ev: 'draining' }
  | { ev: 'stopped' }
  | { ev: 'error'; message: string };

export type WorkerEvent = EventBase & WorkerEventBody;
export type WorkerMode = 'elector' | 'acquire';

/** How a worker came to exist. */
export type WorkerOrigin = 'initial' | 'replacement' | 'rolling' | 'restore' | 'fork' | 'old-clock';

export interface WorkerInfo {
  id: string;
  pid: number;
  origin: WorkerOrigin;
  /** The worker it replaced, was restored from, or was forked from. */
  parent?: string;
  mode: WorkerMode;
  spawnedAt: number;
  exitedAt: number | null;
  /** How it ended: 'SIGKILL' (by the nemesis), 'SIGTERM' (drained), 'exit 0', 'exit 1' (crashed), 'running'. */
  exit: string;
  /** True when the harness (nemesis, trim, shutdown) asked it to go. */
  askedToStop: boolean;
  /** Intervals during which it was SIGSTOPped, [from, to]. */
  stopped: Array<[number, number]>;
  events: WorkerEvent[];
}

export interface FaultRecord {
  n: number;
  kind: FaultKind;
  /** Worker ids the fault was aimed at (empty for store faults). */
  targets: string[];
  /** What the target was doing when picked. */
  role: 'leader' | 'follower' | 'store' | 'new';
  start: number;
  /** When the fault stopped acting (SIGCONT, proxy back to pass, store answering again...). */
  heal: number;
  /** Failover is measured from here: `start` for process faults, `heal` for store faults. */
  ref: number;
  params: Record<string, string | number | boolean>;
  /** Workers started by the fault (replacements, restores, forks). */
  spawned: string[];
  note: string;
}

/** One accepted write, as the resource logged it. `t` is the database's commit-time clock, as mono. */
export interface ResourceRow {
  id: number;
  token: bigint;
  worker: string;
  pid: number;
  holder: string;
  seq: number;
  t: number;
  fenced: boolean;
}

export interface Timing {
  ttlMs: number;
  /**
   * The TTL the store actually grants: etcd grants whole seconds, and at least its minimum
   * (about 2s), so a 1s lease lives 2s there. Failover is bounded by this one.
   */
  storeTtlMs: number;
  renewMs: number;
  workMinMs: number;
  workMaxMs: number;
}
