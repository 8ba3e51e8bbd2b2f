import { ConfigError } from '../core/errors.js';
import { AlreadyOwnedError, NoLiveAgentError, NoOwnerError, OwnerChangedError, OwnerDeadError } from './errors.js';
import type { CallOptions } from '../core/port.js';
import { validateAgentId, validateLabels, validateResource } from './labels.js';
import type { AgentRow, FleetPort, Labels, OwnerRow } from './port.js';

/** The most records one page of {@link Fleet.resources} may ask for: an answer of a known size on every store. */
export const RESOURCE_PAGE_MAX = 1000;
const RESOURCE_PAGE_DEFAULT = 100;

/** An owner on record, by the store's clock: live; stale (registered, its liveness lease lapsed or gone); deregistered. The last two are owner-dead. */
export type OwnerState = 'live' | 'stale' | 'deregistered';

export function ownerState(row: Pick<OwnerRow, 'live' | 'deregistered'>): OwnerState {
  return row.live ? 'live' : row.deregistered ? 'deregistered' : 'stale';
}

/** One ownership record of a listing, with its owner's state. */
export interface ResourceRow extends OwnerRow {
  ownerState: OwnerState;
}

export interface ResourceListing {
  resources: ResourceRow[];
  /** The `after` of the next page; null: this was the last. */
  next: string | null;
}

/** A live owner, as the store saw it at the lookup. */
export interface Owner {
  resource: string;
  agent: string;
  /** The fencing token of this ownership: strictly larger on every change of owner, for ever. */
  generation: bigint;
  /** Store now minus the owner's last heartbeat, by the store's clock. */
  heartbeatAgeMs: number;
  /** How much longer the store vouches for the owner without another heartbeat. Always > 0. */
  expiresInMs: number;
}

export interface Placement {
  resource: string;
  agent: string;
  generation: bigint;
}

/**
 * The fleet registry over one store: who owns what, and whether that owner is alive. Agents
 * themselves run with `Agent.start` (./agent.ts). Every call is one round trip; nothing
 * is cached here (see {@link OwnerCache} for the one cache that is safe).
 */
export class Fleet {
  readonly port: FleetPort;

  constructor(port: FleetPort) {
    if (port === undefined) throw new ConfigError('new Fleet(port) needs a fleet port; see openFleet(url)');
    this.port = port;
  }

  /**
   * Who owns `resource`, if that owner is alive by the store's clock. Never places anything.
   * @throws {NoOwnerError} no record. @throws {OwnerDeadError} a record whose owner is not alive.
   */
  async owner(resource: string, options?: CallOptions): Promise<Owner> {
    const name = validateResource(resource);
    const row = await this.port.owner(name, options);
    if (row === undefined) throw new NoOwnerError(name);
    if (!row.live) throw ownerDead(row);
    return { resource: name, agent: row.agent, generation: row.generation, heartbeatAgeMs: row.heartbeatAgeMs ?? 0, expiresInMs: row.expiresInMs ?? 0 };
  }

  /**
   * Gives `resource` to a live, non-draining agent carrying every label in `labels` (the one
   * owning fewest resources; ties broken at random), in one atomic store operation.
   * @throws {AlreadyOwnedError} it has an owner (alive or not). @throws {NoLiveAgentError}
   */
  async place(resource: string, options: { labels?: Labels } & CallOptions = {}): Promise<Placement> {
    const name = validateResource(resource);
    const labels = validateLabels(options.labels);
    const r = await this.port.place(name, labels, options);
    if (r.outcome === 'owned') throw new AlreadyOwnedError(name, r.agent, r.generation);
    if (r.outcome === 'no-agent') {
      const want = Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(',');
      throw new NoLiveAgentError(name, `no live, non-draining agent${want === '' ? '' : ` with labels ${want}`}`);
    }
    return { resource: name, agent: r.agent, generation: r.generation };
  }

  /**
   * Moves `resource` from `from` (which must be its owner on record, alive or dead) to `to`, or
   * to an agent picked as `place` picks (with the labels it was placed with). The generation
   * goes up, so writes fenced with the old one are refused.
   * @throws {OwnerChangedError} the owner is not `from`. @throws {NoLiveAgentError}
   */
  async reassign(resource: string, options: { from: string; to?: string } & CallOptions): Promise<Placement> {
    const name = validateResource(resource);
    const from = validateAgentId(options?.from);
    const to = options.to === undefined ? null : validateAgentId(options.to);
    if (to === from) throw new ConfigError(`reassign "${name}" from "${from}" to itself changes nothing; name another agent, or leave --to out`);
    const r = await this.port.reassign(name, from, to, options);
    if (r.outcome === 'owner-changed') throw new OwnerChangedError(name, from, r.owner);
    if (r.outcome === 'no-agent') {
      throw new NoLiveAgentError(name, to === null ? `no live, non-draining agent other than "${from}" matches its labels` : `agent "${to}" is not live, or is draining`);
    }
    return { resource: name, agent: r.agent, generation: r.generation };
  }

  /**
   * Deletes the ownership record if `from` owns it. A later placement gets a larger generation
   * than any before it. @throws {OwnerChangedError}
   */
  async remove(resource: string, options: { from: string } & CallOptions): Promise<void> {
    const name = validateResource(resource);
    const from = validateAgentId(options?.from);
    if (!(await this.port.remove(name, from, options))) {
      const row = await this.port.owner(name, options);
      throw new OwnerChangedError(name, from, row?.agent ?? null);
    }
  }

  /** Keeps the agent alive and owning, but out of placement. @throws {ConfigError} no such agent. */
  async drain(agent: string, options?: CallOptions): Promise<void> {
    await this.setDraining(agent, true, options);
  }

  async undrain(agent: string, options?: CallOptions): Promise<void> {
    await this.setDraining(agent, false, options);
  }

  private async setDraining(agent: string, draining: boolean, options?: CallOptions): Promise<void> {
    const id = validateAgentId(agent);
    if (!(await this.port.setDraining(id, draining, options))) {
      throw new ConfigError(`no agent "${id}" is registered in ${this.port.description}; \`leasehold fleet ls\` lists them`);
    }
  }

  /** Every agent ever registered, with its liveness by the store's clock, by id. */
  agents(options?: CallOptions): Promise<AgentRow[]> {
    return this.port.agents(options);
  }

  /**
   * One page of the resources on record, in the store's order of names, each with its owner
   * and generation and whether that owner is live, stale or deregistered by the store's clock
   * (the last two: owner-dead). Pass `next` back as `after` for the following page. Records
   * change between pages: a resource placed meanwhile behind the cursor is not seen.
   * @throws {ConfigError} a limit outside 1..RESOURCE_PAGE_MAX, or a port without `resources`.
   */
  async resources(options: { after?: string; limit?: number } & CallOptions = {}): Promise<ResourceListing> {
    const limit = options.limit ?? RESOURCE_PAGE_DEFAULT;
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > RESOURCE_PAGE_MAX) {
      throw new ConfigError(`a page of resources is 1 to ${RESOURCE_PAGE_MAX} records, got ${String(limit)}; read more pages with \`after\``);
    }
    const after = options.after === undefined || options.after === '' ? undefined : validateResource(options.after);
    const list = this.port.resources?.bind(this.port);
    if (list === undefined) throw new ConfigError(`this ${this.port.kind} fleet cannot list resources (its port has no resources method); every built-in one can`);
    const page = await list(after === undefined ? { limit } : { after, limit }, options);
    return { resources: page.rows.map((r) => ({ ...r, ownerState: ownerState(r) })), next: page.next };
  }

  close(): Promise<void> {
    return this.port.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

function ownerDead(row: OwnerRow): OwnerDeadError {
  let staleFor: number | null = null;
  if (row.deregisteredAtMs !== null) staleFor = Math.max(0, row.storeNowMs - row.deregisteredAtMs);
  else if (row.expiresInMs !== null) staleFor = Math.max(0, -row.expiresInMs);
  return new OwnerDeadError(row.resource, row.agent, row.generation, staleFor, row.deregistered);
}
