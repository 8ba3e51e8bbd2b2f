/**
 * Retention for the fleet registry: {@link pruneFleet} deletes, in short batches, the ownership
 * records of agents that deregistered more than `olderThan` ago (the resource then has no
 * owner: a lookup says NoOwner rather than OwnerDead, and its next placement gets a larger
 * generation, drawn from the one counter every placement uses, which is never pruned), then those
 * agents' own records. A registered agent's records, live or stale, are never touched: a stale
 * owner is exactly what "owner dead" must keep reporting until someone reassigns it.
 */
import type { Duration } from '../core/config.js';
import { parseHorizon } from '../scheduler/retention.js';
import { ConfigError } from '../core/errors.js';
import type { FleetPort } from './port.js';

export interface PruneFleetOptions {
  /** Agents deregistered longer ago than this (by the store's clock). Default 30d. */
  olderThan?: Duration;
  /** Records per batch. Default 500. */
  batchSize?: number;
  signal?: AbortSignal;
}

export interface PruneFleetResult {
  ownership: number;
  agents: number;
  batches: number;
}

/** @throws {ConfigError} a bad option, or a port without prune. */
export async function pruneFleet(port: FleetPort, options: PruneFleetOptions = {}): Promise<PruneFleetResult> {
  const olderThanMs = parseHorizon(options.olderThan ?? '30d', 'olderThan');
  const limit = options.batchSize ?? 500;
  if (!Number.isInteger(limit) || limit < 1) throw new ConfigError(`batchSize must be a whole number of records, at least 1; got ${limit}`);
  const prune = port.prune?.bind(port);
  if (prune === undefined) throw new ConfigError(`this ${port.kind} fleet cannot prune (it has no prune method); every built-in one can`);
  const result: PruneFleetResult = { ownership: 0, agents: 0, batches: 0 };
  for (let more = true; more; ) {
    options.signal?.throwIfAborted();
    const r = await prune({ olderThanMs, limit }, options.signal === undefined ? undefined : { signal: options.signal });
    result.batches++;
    result.ownership += r.ownership;
    result.agents += r.agents;
    // A batch that changed nothing (it met only concurrent changes) ends it: the next prune goes on.
    more = r.more && r.ownership + r.agents > 0;
  }
  return result;
}
