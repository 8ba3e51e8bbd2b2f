/**
 * The error taxonomy. Every error leasehold throws or hands to an AbortSignal is a
 * {@link LeaseholdError} with a stable `code`, an optional `cause`, and a `retryable`
 * marker. Messages say what to do next, because they are read at 3am.
 */

export type ErrorCode =
  | 'CONFIG' // bad option, bad duration, bad name, bad URL
  | 'STORE_UNAVAILABLE' // could not reach the store, or it did not answer in time
  | 'SCHEMA' // schema missing or older than this version of leasehold
  | 'STORE' // the store answered with an error that waiting will not fix (an SQL error, an unknown failure)
  | 'LEASE_LOST' // a term ended (reason says why)
  | 'NOT_LEADER' // asked for a token while not holding the lease (or in jeopardy)
  | 'NOT_ACQUIRED' // acquire({ wait: false }) or a wait that ran out
  | 'FENCED' // the resource refused a stale token
  | 'FENCE_OWNED' // the resource's fence belongs to another lease name
  | 'NO_OWNER' // no lease exists under that name
  | 'OWNER_DEAD' // a lease exists but its holder's term has expired
  | 'ALREADY_OWNED' // fleet: place() on a resource that already has an owner
  | 'NO_LIVE_AGENT' // fleet: no live, non-draining agent matches
  | 'OWNER_CHANGED' // fleet: reassign({ from }) where the owner is no longer `from`
  | 'LIVENESS' // liveness 'session' cannot be had safely on this store or connection (LivenessError.why)
  | 'ABORTED' // the caller's own signal aborted the call
  | 'CLOSED'; // a call on a store, client or lease that was closed

export interface LeaseholdErrorOptions {
  cause?: unknown;
  retryable?: boolean;
}

export class LeaseholdError extends Error {
  readonly code: ErrorCode;
  /** True when the same call may succeed if tried again later (store blips, busy locks). */
  readonly retryable: boolean;

  constructor(code: ErrorCode, message: string, options: LeaseholdErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/** Bad input caught at the edge: options, durations, names, URLs. Never retryable. */
export class ConfigError extends LeaseholdError {
  constructor(message: string, options: LeaseholdErrorOptions = {}) {
    super('CONFIG', message, { ...options, retryable: false });
  }
}

/** The store could not be reached or did not answer. The outcome of the call is unknown. */
export class StoreUnavailableError extends LeaseholdError {
  constructor(message: string, options: LeaseholdErrorOptions = {}) {
    super('STORE_UNAVAILABLE', message, { ...options, retryable: true });
  }
}

/** The store answered but its schema is missing or out of date. */
export class SchemaError extends LeaseholdError {
  constructor(message: string, options: LeaseholdErrorOptions = {}) {
    super('SCHEMA', message, { ...options, retryable: false });
  }
}

/**
 * The store answered, with an error that is neither a connection problem nor a missing schema
 * (an SQL error, a script error, anything a store does not recognise). Not retryable: the
 * engine does not retry it in silence, because trying again will most likely fail the same way.
 */
export class StoreError extends LeaseholdError {
  constructor(message: string, options: LeaseholdErrorOptions = {}) {
    super('STORE', message, { ...options, retryable: false });
  }
}

/**
 * The store was restored from an older backup (or lost its history), so the tokens it would
 * issue next may already have been issued before the restore: a fence accepts a token equal to
 * its high-water mark, so a reissued token would let a second holder through. No term is granted
 * until an operator runs `leasehold migrate --min-token N` with N at least the highest token any
 * fenced resource accepted. A `StoreError`: not retryable, since waiting does not fix it.
 */
export class StoreRestoredError extends StoreError {
  /** The highest token this process (or the one that left the mark) saw before the restore, when known. */
  readonly seenToken: bigint | undefined;

  constructor(message: string, options: LeaseholdErrorOptions & { seenToken?: bigint } = {}) {
    super(message, options);
    this.seenToken = options.seenToken;
  }
}

export type LeaseLostReason =
  /** No renewal landed before the local deadline (store slow, down, or the process was paused). */
  | 'expired'
  /** The store says another holder (or a clone of this one) now owns the lease. */
  | 'superseded'
  /** This process released the lease itself. */
  | 'released'
  /** An operator revoked the lease (`leasehold release --force`). */
  | 'revoked'
  /** Renewals kept failing and the deadline passed without an answer. */
  | 'store-unreachable'
  /** A detector decided this process was suspended, restored or cloned. */
  | 'suspended'
  /** The work stopped reporting progress (see `progress()`). */
  | 'stalled'
  /** A same-database fenced write found that another process (a restored snapshot, a fork) wrote with this term. */
  | 'cloned';

export class LeaseLostError extends LeaseholdError {
  readonly reason: LeaseLostReason;
  readonly leaseName: string;
  readonly token: bigint;

  constructor(
    leaseName: string,
    token: bigint,
    reason: LeaseLostReason,
    detail: string,
    options: LeaseholdErrorOptions = {},
  ) {
    super(
      'LEASE_LOST',
      `lease "${leaseName}" term ${token} ended (${reason}): ${detail}. Stop work started under token ${token}; ` +
        'writes carrying it will be fenced.',
      { ...options, retryable: false },
    );
    this.reason = reason;
    this.leaseName = leaseName;
    this.token = token;
  }
}

export class NotLeaderError extends LeaseholdError {
  constructor(message: string, options: LeaseholdErrorOptions = {}) {
    super('NOT_LEADER', message, { ...options, retryable: true });
  }
}

export class NotAcquiredError extends LeaseholdError {
  readonly leaseName: string;
  readonly holder: string | null;
  readonly expiresInMs: number | null;
  /** Refused by `unlessReleasedSince`: a term granted since then was released by its holder. */
  releasedSince = false;
  /** When the term that holds it was granted, by the store's clock; null when the store did not say. */
  grantedAtMs: number | null = null;
  constructor(leaseName: string, holder: string | null, expiresInMs: number | null, detail: string) {
    super(
      'NOT_ACQUIRED',
      `lease "${leaseName}" was not acquired: ${detail}` +
        (holder === null ? '' : ` (held by ${holder}${expiresInMs === null ? '' : `, expires in ${expiresInMs}ms by the store's clock`})`),
      { retryable: true },
    );
    this.leaseName = leaseName;
    this.holder = holder;
    this.expiresInMs = expiresInMs;
  }
}

/** The resource refused a write because it has already accepted a higher token. Zero rows changed. */
export class FencedError extends LeaseholdError {
  readonly resource: string;
  readonly token: bigint;
  readonly highWater: bigint | null;
  constructor(resource: string, token: bigint, highWater: bigint | null) {
    super(
      'FENCED',
      `write to "${resource}" with token ${token} was fenced: the resource has accepted token ${highWater ?? '?'}. ` +
        'A newer leader exists; stop this unit of work, nothing was written.',
      { retryable: false },
    );
    this.resource = resource;
    this.token = token;
    this.highWater = highWater;
  }
}

/**
 * The resource's high-water mark was first fenced under another lease name. Tokens of two
 * leases are unrelated numbers, so comparing them would refuse or admit writes at random.
 * Zero rows changed.
 */
export class FenceOwnedError extends LeaseholdError {
  readonly resource: string;
  /** The lease name that tried to write. */
  readonly lease: string;
  /** The lease name the mark belongs to. */
  readonly owner: string;
  constructor(resource: string, lease: string, owner: string) {
    super(
      'FENCE_OWNED',
      `write to "${resource}" under lease "${lease}" was refused: the resource's fence belongs to lease "${owner}", whose tokens are not comparable with this lease's. ` +
        `Give each lease its own resource names (for example "${lease}:${resource}"), or write to this resource only under lease "${owner}". Nothing was written.`,
      { retryable: false },
    );
    this.resource = resource;
    this.lease = lease;
    this.owner = owner;
  }
}

/**
 * Liveness 'session' (LeaseOptions.liveness) was refused: the store cannot tie a term to its
 * holder's session (`unsupported`), the connection's session is not the holder's own (`pooler`:
 * PgBouncer or a proxy in between), or the server could declare a live holder's session dead
 * before the holder stands down on its own (`keepalive`). Nothing was claimed. Not retryable:
 * change the setting the message names, or use liveness 'ttl'.
 */
export class LivenessError extends LeaseholdError {
  readonly why: 'unsupported' | 'pooler' | 'keepalive';
  constructor(why: LivenessError['why'], message: string, options: LeaseholdErrorOptions = {}) {
    super('LIVENESS', message, { ...options, retryable: false });
    this.why = why;
  }
}

export class AbortedError extends LeaseholdError {
  constructor(message: string, options: LeaseholdErrorOptions = {}) {
    super('ABORTED', message, options);
  }
}

/**
 * A call on something already closed (a store, a client, a lease). Not retryable: the same
 * object will never answer again; open a new one. A programming error, not bad configuration,
 * so the CLI does not report it as a usage error.
 */
export class ClosedError extends LeaseholdError {
  constructor(message: string, options: LeaseholdErrorOptions = {}) {
    super('CLOSED', message, { ...options, retryable: false });
  }
}

/** One check for "try again later" (store blips) versus "fix something first". */
export function isRetryableError(err: unknown): boolean {
  return err instanceof LeaseholdError && err.retryable;
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
