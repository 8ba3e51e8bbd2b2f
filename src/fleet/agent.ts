import { EventEmitter } from 'node:events';
import { parseDuration, type Duration } from '../core/config.js';
import { ConfigError, LeaseLostError, errorMessage, isRetryableError } from '../core/errors.js';
import { sleepOn } from '../core/clock.js';
import type { Lease, Term } from '../core/lease.js';
import type { Leasehold } from '../core/leasehold.js';
import type { Liveness } from '../core/liveness.js';
import type { LoggerLike } from '../core/logger.js';
import type { Fleet } from './fleet.js';
import { validateLabels, validateNewAgentId } from './labels.js';
import { AGENT_LEASE_OPTIONS, AGENT_LEASE_PREFIX, type Labels } from './port.js';

export const DEFAULT_HEARTBEAT_MS = 10_000;
export const DEFAULT_STALE_AFTER_MS = 30_000;
/** Registration retries back off from 100 ms to this (a store that is failing over is not hammered). */
const REGISTER_RETRY_MAX_MS = 2_000;

export interface AgentOptions {
  id: string;
  labels?: Labels;
  /** How often the agent heartbeats (renews its liveness lease). Default 10s. */
  heartbeat?: Duration;
  /** How long after its last heartbeat the store stops counting it alive. Default 30s; at least 2x heartbeat. */
  staleAfter?: Duration;
  /**
   * How long to wait for the id's liveness lease when another process holds it (a crashed
   * predecessor's lease runs out by itself). Default staleAfter + heartbeat. false: do not wait.
   */
  wait?: Duration | false;
  /**
   * How the agent's liveness lease judges it alive (LeaseOptions.liveness, docs/liveness.md).
   * 'session' (PostgreSQL, MySQL/MariaDB, SQLite): the lease is also tied to a session of this
   * process's own, so a process restarted under the same id takes the id over within
   * milliseconds of this one dying (SIGKILL, OOM kill) instead of waiting out stale-after; on
   * PostgreSQL the fleet (placement, owner, agents) also counts the agent dead as soon as its
   * session is gone. Refused (LivenessError) where the mode is. Default 'ttl'.
   */
  liveness?: Liveness;
  signal?: AbortSignal;
}

/** Heartbeat and stale-after, checked once. @throws {ConfigError} staleAfter < 2 x heartbeat. */
export function resolveAgentTiming(opts: { heartbeat?: Duration; staleAfter?: Duration }): { heartbeatMs: number; staleAfterMs: number } {
  const heartbeatMs = parseDuration(opts.heartbeat ?? DEFAULT_HEARTBEAT_MS, 'heartbeat');
  const staleAfterMs = parseDuration(opts.staleAfter ?? DEFAULT_STALE_AFTER_MS, 'stale-after');
  if (heartbeatMs <= 0) throw new ConfigError('heartbeat must be greater than 0');
  if (staleAfterMs < 2 * heartbeatMs) {
    throw new ConfigError(
      `stale-after ${staleAfterMs}ms is less than twice the heartbeat ${heartbeatMs}ms: one late heartbeat would make a healthy agent ` +
        `look dead. Use at least ${2 * heartbeatMs}ms (3x, ${3 * heartbeatMs}ms, is the default ratio)`,
    );
  }
  return { heartbeatMs, staleAfterMs };
}

export interface AgentEvents {
  /** The liveness lease ended without stop(): expired, revoked, or a clone (fork, restored snapshot) was detected. The agent has stood down. */
  lost: [error: LeaseLostError];
}

/**
 * One running agent: it holds the lease `agent/<id>` (TTL = stale-after, renewed every
 * heartbeat) and has its row in the fleet's agents table. Its liveness is that lease, judged by
 * the store's clock. A forked or restored copy presents nonces the store did not issue to it, so
 * the lease rules end the term and this agent stands down (emits `lost`, aborts `signal`) instead
 * of heartbeating on beside its twin. It does not come back by itself: restart the process.
 */
export class Agent extends EventEmitter<AgentEvents> {
  readonly id: string;
  readonly labels: Labels;
  readonly heartbeatMs: number;
  readonly staleAfterMs: number;
  private readonly fleet: Fleet;
  private readonly lease: Lease;
  private readonly term: Term;
  private readonly logger: LoggerLike;
  private stopping: Promise<void> | undefined;

  private constructor(logger: LoggerLike, fleet: Fleet, lease: Lease, term: Term, id: string, labels: Labels, heartbeatMs: number, staleAfterMs: number) {
    super();
    this.logger = logger;
    this.fleet = fleet;
    this.lease = lease;
    this.term = term;
    this.id = id;
    this.labels = labels;
    this.heartbeatMs = heartbeatMs;
    this.staleAfterMs = staleAfterMs;
    term.signal.addEventListener(
      'abort',
      () => {
        const reason: unknown = term.signal.reason;
        if (this.stopping === undefined && reason instanceof LeaseLostError) this.emit('lost', reason);
      },
      { once: true },
    );
  }

  /** Aborts when the agent is no longer alive in the store's eyes (lost, or stopped). */
  get signal(): AbortSignal {
    return this.term.signal;
  }

  /** The liveness lease `agent/<id>`: for probes and metrics (`leasehold/health`, `leasehold/metrics`); do not release it. */
  get livenessLease(): Lease {
    return this.lease;
  }

  /** The liveness lease's token: a larger one for every new life of this agent id. */
  get token(): bigint {
    return this.term.token;
  }

  /**
   * Takes the liveness lease, then registers (upserts the agents row). Registration comes
   * second so that a second process with the same id never rewrites the row while the first
   * is alive: it waits for the lease, or fails.
   * @throws {ConfigError} bad id, labels or timing. @throws {NotAcquiredError} the id is alive elsewhere.
   */
  static async start(leasehold: Leasehold, fleet: Fleet, options: AgentOptions): Promise<Agent> {
    const id = validateNewAgentId(options?.id);
    const labels = validateLabels(options.labels);
    const { heartbeatMs, staleAfterMs } = resolveAgentTiming(options);
    const wait = options.wait === false ? false : parseDuration(options.wait ?? staleAfterMs + heartbeatMs, 'wait');
    // The lease's own local deadline (margin) keeps this process from believing it is alive
    // past what the store would say.
    // No handover: holding agent/<id> is what says "alive", and only a process that confirmed
    // its own claim may say so (a term handed to a waiter that has gone would read as alive).
    const leaseOptions = { ttl: staleAfterMs, renewInterval: heartbeatMs, handover: false, ...(options.liveness === undefined ? {} : { liveness: options.liveness }) };
    AGENT_LEASE_OPTIONS.add(leaseOptions);
    const lease = leasehold.lease(`${AGENT_LEASE_PREFIX}${id}`, leaseOptions);
    let term: Term;
    try {
      term = await lease.acquire({ wait, signal: options.signal });
    } catch (err) {
      await lease.close();
      throw err;
    }
    // A store error as the agent registers (a loaded store's call deadline, a failover) is tried
    // again while the liveness term lasts: the registration writes this agent's own row, so a
    // second try of one that landed unseen changes nothing. When the store stays away the term
    // ends (its renewals go unanswered) and the error is thrown, the lease released.
    for (let attempt = 0; !term.signal.aborted; attempt++) {
      try {
        await fleet.port.registerAgent(id, labels, { signal: options.signal });
        break;
      } catch (err) {
        if (!isRetryableError(err) || term.signal.aborted || options.signal?.aborted === true) {
          await lease.close();
          throw err;
        }
        leasehold.logger.warn({ agent: id, attempt: attempt + 1, err: errorMessage(err) }, 'leasehold: could not register the agent; trying again while its liveness lease is held');
        await sleepOn(leasehold.clock, Math.min(REGISTER_RETRY_MAX_MS, 100 * 2 ** attempt), term.signal);
      }
    }
    // The term ended while the agent registered (the store away for its whole stale-after, an
    // operator's revoke): an Agent returned now would never emit 'lost' (it has passed), and its
    // process would believe it is live. It is not: say so.
    if (term.signal.aborted) {
      await lease.close();
      const reason: unknown = term.signal.reason;
      throw reason instanceof Error ? reason : new LeaseLostError(`${AGENT_LEASE_PREFIX}${id}`, term.token, 'expired', 'it ended while the agent registered');
    }
    return new Agent(leasehold.logger, fleet, lease, term, id, labels, heartbeatMs, staleAfterMs);
  }

  /**
   * Graceful shutdown: deregisters (its resources then read as owner-dead, deregistered), then
   * releases the liveness lease. If the store cannot be told, the lease simply runs out.
   */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      try {
        if (!this.term.signal.aborted) await this.fleet.port.deregisterAgent(this.id);
      } catch (err) {
        this.logger.warn({ agent: this.id, err: errorMessage(err) }, 'leasehold: could not deregister the agent; its liveness lease is released (or runs out) all the same');
      } finally {
        await this.lease.close();
      }
    })();
    return this.stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
