import type { CallOptions, LeasePort } from '../core/port.js';

/**
 * The contract between the lease engine and a store. The engine knows nothing of drivers; a
 * store knows nothing of timers. Every store folder (`postgres/`, `sqlite/`, ...) implements
 * {@link LeaseStore}: the engine's port ({@link LeasePort}, core/port.ts) and the operator's
 * calls ({@link LeaseAdmin}). `leasehold/conformance` (src/conformance/) proves each one against
 * the expectations below, and drives every claim case through the rule in core/claim-rule.ts.
 *
 * Expectations every store must meet (the conformance suite checks each):
 *  1. Expiry is judged by the store's own clock. The store reports that clock in every answer.
 *  2. `claim` is atomic per lease: of any set of concurrent claims on a free lease, one wins.
 *  3. Tokens are strictly increasing per lease name, for ever: every acquisition (after a
 *     release, an expiry, a revocation, a takeover, a restart of the store) gets a token larger
 *     than any token that name has had. A renewal keeps the token.
 *  4. A renewal succeeds only if the row's holder is the caller, the row's nonce is one of the
 *     nonces the caller expects, and the term has not expired. On success the nonce is replaced
 *     by the caller's fresh one, so two clones of one term cannot both keep renewing.
 *  4b. A renewal with the caller's holder id but a nonce the store does not hold, on a live
 *     term, means two processes share one term (a snapshot restored twice). The store ends the
 *     term on the spot (history event 'conflict', holder cleared) and answers 'lost'/'cloned';
 *     the other clone's next renewal is answered 'lost'/'cloned' too. Neither clone can be told
 *     from the other, so neither keeps the term: the next acquisition gets a larger token, and
 *     once it writes, both clones' writes are fenced.
 *  5. Only the holder's current term can be released; operators can revoke any term.
 *  6. Every change of holder is recorded in the history with the store's time.
 *  7. Errors are typed: `StoreUnavailableError` (retryable) when the outcome is unknown,
 *     `ClosedError` for a call on a closed store,
 *     `SchemaError` when the schema is missing or old, `ConfigError` for bad settings.
 */

// The engine's side of the contract lives with the engine (core/port.ts); these names stay
// exported from here for stores and users that import them from this module.
export type {
  CallOptions,
  ClaimRequest,
  ClaimResult,
  FreedListener,
  GrantedClaim,
  LeasePort,
  LeaseSession,
  LostReason,
  ReleaseRequest,
  StoreSettingCheck,
} from '../core/port.js';
export { MAX_EXPECTED_NONCES } from '../core/port.js';

export interface LeaseInfo {
  name: string;
  /** Null when free (released, revoked, or never held). */
  holder: string | null;
  /** The last token issued for this name (the current term's, when held). */
  token: bigint;
  state: 'held' | 'expired' | 'free';
  expiresAtMs: number | null;
  storeNowMs: number;
  /** When the current (or last) term began, by the store's clock. */
  termStartedAtMs: number | null;
  renewedAtMs: number | null;
}

export type HistoryEvent = 'acquired' | 'takeover' | 'released' | 'revoked' | 'conflict';

export interface HistoryEntry {
  id: bigint;
  name: string;
  event: HistoryEvent;
  /** The holder after the event (null for released/revoked). */
  holder: string | null;
  /** The holder before the event, where there was one. */
  previousHolder: string | null;
  token: bigint;
  atMs: number;
  detail: string | null;
}

export interface RevokeResult {
  revoked: boolean;
  previousHolder: string | null;
  token: bigint | null;
}

export interface SchemaStatus {
  /** The schema version found in the store; 0 when leasehold's tables do not exist. */
  current: number;
  /** The version this build of leasehold needs. */
  expected: number;
}

export interface MigrateOptions extends CallOptions {
  /**
   * A token floor: every token issued after this call, for any lease name (including names never
   * seen), is larger than `minToken`. For a store that lost its history (a wiped etcd, a Redis
   * restored from an old dump) while fenced resources kept their high-water marks. Never lowers
   * anything: a floor or a token already higher stays. Where stored tokens are rewritten
   * (PostgreSQL, SQLite, etcd), live terms at or below the floor are ended and their holders stand
   * down at once; Redis tokens are time-based, and a live term there keeps its token.
   */
  minToken?: bigint;
}

export interface MigrateResult extends SchemaStatus {
  /** With `minToken`: the floor now in force (at least minToken) and how many live terms it ended. */
  tokenFloor?: { floor: bigint; raised: boolean; endedTerms: number };
}

/**
 * The operator's calls: what the CLI (migrate, doctor, status, history, release --force) uses and
 * the lease engine never does.
 */
export interface LeaseAdmin {
  /** `postgres`, `sqlite`, ... */
  readonly kind: string;
  /** Where it points, with any password redacted: safe to log. */
  readonly description: string;

  /** Creates or upgrades the schema. Idempotent; safe to run from many processes at once. */
  migrate(options?: MigrateOptions): Promise<MigrateResult>;
  schemaStatus(options?: CallOptions): Promise<SchemaStatus>;

  /** Operator revocation of whoever holds `name`, recorded in the history. */
  revoke(name: string, reason: string, options?: CallOptions): Promise<RevokeResult>;

  list(options?: CallOptions & { name?: string }): Promise<LeaseInfo[]>;
  /** The newest `limit` entries (default 1000; 0 gives none), oldest first. */
  history(options?: CallOptions & { name?: string; limit?: number }): Promise<HistoryEntry[]>;
  /** The store's clock, in milliseconds since the epoch. */
  now(options?: CallOptions): Promise<number>;

  /**
   * Optional: a lower bound of the token the next acquisition of `name` would get (without a
   * name: of a name never held). `leasehold doctor --fence-high-water` compares it with a
   * fenced resource's high-water mark.
   */
  nextToken?(options?: CallOptions & { name?: string }): Promise<bigint>;

  /**
   * Optional: the highest high-water marks in the fence table that lives beside the leases
   * (PostgreSQL `schema.fences`, SQLite `leasehold_fences`), highest first; empty when none.
   */
  fenceHighWater?(options?: CallOptions & { limit?: number }): Promise<{ resource: string; token: bigint }[]>;

  /**
   * Optional: whether the store looks restored from an older backup, so that it would issue
   * tokens again (etcd: restore.ts). While `restored`, the store grants no term;
   * `migrate --min-token` clears it. `seenToken`: the highest token known issued before.
   */
  restoreCheck?(options?: CallOptions): Promise<{ restored: boolean; detail: string; seenToken?: bigint }>;

  close(): Promise<void>;
}

/** A whole store: the engine's port and the operator's calls. Every store in this folder is one. */
export interface LeaseStore extends LeasePort, LeaseAdmin {}
