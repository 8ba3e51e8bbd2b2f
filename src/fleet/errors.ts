/**
 * The fleet registry's errors. Every one is a LeaseholdError with a `code` (OWNER_DEAD, NO_OWNER,
 * ALREADY_OWNED, NO_LIVE_AGENT, OWNER_CHANGED) and a message that says what to do.
 */
import { LeaseholdError } from '../core/errors.js';

/**
 * Fleet: the resource has an owner on record, but that agent is not alive by the store's clock
 * (its liveness lease expired, or it deregistered). Distinct from {@link NoOwnerError} on
 * purpose: "owner exists but is dead" is not "no owner", and must not be answered by placing
 * the resource afresh. Reassign it (`fleet.reassign(resource, { from: owner })`) if it should move.
 */
export class OwnerDeadError extends LeaseholdError {
  readonly resource: string;
  readonly owner: string;
  readonly generation: bigint;
  /** How long the owner has been stale, by the store's clock; null when its liveness lease is absent. */
  readonly staleForMs: number | null;
  /** True when the owner shut down gracefully (deregistered) rather than stopped heartbeating. */
  readonly deregistered: boolean;
  constructor(resource: string, owner: string, generation: bigint, staleForMs: number | null, deregistered: boolean) {
    const how = deregistered ? 'deregistered' : 'stopped heartbeating';
    const since = staleForMs === null ? 'it has no liveness record' : `stale for ${Math.round(staleForMs)}ms by the store's clock`;
    super(
      'OWNER_DEAD',
      `resource "${resource}" is owned by agent "${owner}" (generation ${generation}), which is not alive: it ${how}, ${since}. ` +
        `Restart the agent, or move the resource with reassign --from ${owner}; do not place it afresh.`,
    );
    this.resource = resource;
    this.owner = owner;
    this.generation = generation;
    this.staleForMs = staleForMs;
    this.deregistered = deregistered;
  }
}

/** Fleet: no ownership record exists for the resource (never placed, or removed). */
export class NoOwnerError extends LeaseholdError {
  readonly resource: string;
  constructor(resource: string) {
    super('NO_OWNER', `resource "${resource}" has no owner on record; place it (fleet place ${resource}) if it should have one`);
    this.resource = resource;
  }
}

/** Fleet: place() found the resource already owned. Nothing was changed. */
export class AlreadyOwnedError extends LeaseholdError {
  readonly resource: string;
  readonly owner: string;
  readonly generation: bigint;
  constructor(resource: string, owner: string, generation: bigint) {
    super(
      'ALREADY_OWNED',
      `resource "${resource}" is already owned by agent "${owner}" (generation ${generation}); look it up with owner(), or move it with reassign`,
    );
    this.resource = resource;
    this.owner = owner;
    this.generation = generation;
  }
}

/** Fleet: no agent is live (by the store's clock), not draining and matching the labels. Retryable: agents come back. */
export class NoLiveAgentError extends LeaseholdError {
  readonly resource: string;
  constructor(resource: string, detail: string) {
    super('NO_LIVE_AGENT', `no agent can take "${resource}": ${detail}; start an agent (leasehold agent) or undrain one`, { retryable: true });
    this.resource = resource;
  }
}

/** Fleet: reassign({ from }) refused because the resource is not owned by `from` (someone moved it first). */
export class OwnerChangedError extends LeaseholdError {
  readonly resource: string;
  /** The owner on record now; null when there is no record. */
  readonly owner: string | null;
  constructor(resource: string, expected: string, owner: string | null) {
    super(
      'OWNER_CHANGED',
      owner === null
        ? `resource "${resource}" has no owner on record, not "${expected}"; nothing was reassigned`
        : `resource "${resource}" is owned by "${owner}", not "${expected}"; nothing was reassigned (look it up again and decide)`,
    );
    this.resource = resource;
    this.owner = owner;
  }
}
