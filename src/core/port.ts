/**
 * The engine's port: the only store calls the lease engine makes (claim, release, the optional
 * "freed" channel, close). The engine owns this interface; every store in `backends/` implements
 * it, together with the operator's calls ({@link LeaseAdmin} in `backends/store.ts`), which the
 * engine never makes. Like client-go's resource lock, it is small on purpose: a store someone
 * writes for MySQL or DynamoDB implements these and proves them with `leasehold/conformance`.
 *
 * What a claim answers, row by row, is decided by one pure function, `decideClaim` in
 * `./claim-rule.ts`; a store either calls it (SQLite, the in-memory reference store) or encodes
 * it in its own language (PostgreSQL's SQL, Redis's Lua, etcd's transactions), and the
 * conformance table checks that encoding against the rule.
 */

export interface CallOptions {
  signal?: AbortSignal;
}

export interface ClaimRequest {
  name: string;
  /** The caller's holder id (per process instance, see core/identity). */
  holder: string;
  /** How long the store should grant the term for, from the store's now. */
  ttlMs: number;
  /**
   * Null to contend for the lease. When renewing: the nonce(s) this process may have set last:
   * the confirmed one and, after renewals whose answers were lost, the ones it had sent (the
   * engine sends at most three; a store accepts up to {@link MAX_EXPECTED_NONCES}). Nonces are
   * base64url: no commas, no spaces.
   */
  expect: readonly string[] | null;
  /** The nonce the store stores on success; fresh kernel randomness on every claim. */
  nextNonce: string;
  /**
   * Optional, contenders only (`expect` null), and only for a port with {@link LeasePort.handover}.
   * Present: this contender will wait if told 'busy', so the store may register it as the lease's
   * waiter under `nextNonce`, and a holder's release may hand it the term under that nonce. Its
   * elements are the nextNonces of this contender's earlier claims that may have left it a term
   * (answered 'busy', so registered; or unanswered): a live term held by `holder` under one of
   * them was handed to it. Stores whose handed terms are offers (PostgreSQL schema 17, MySQL 10)
   * accept it: a write that gives it this claim's TTL and swaps the nonce for `nextNonce` (a
   * compare-and-swap, so of two clones presenting the registered nonce only one accepts), answered
   * 'acquired' as an acquisition is. Older schemas (PostgreSQL before 17, MySQL before 10, where
   * a handed term runs the waiter's whole TTL) answer it 'acquired' with that
   * {@link GrantedClaim nonce}, without a write. Stores that do not hand over ignore the field. At most {@link MAX_EXPECTED_NONCES}; base64url.
   */
  handoff?: readonly string[];
  /**
   * Optional, liveness 'session' only: the id of the caller's {@link LeaseSession}. The store ties a
   * term it grants to that session when the session holds the lease's session lock at that
   * moment ({@link ClaimResult} `session`), and ends a term whose recorded session is gone before
   * it decides. Stores without {@link LeasePort.openSession} never see it.
   */
  session?: string;
  /**
   * Optional, contenders only (`expect` null), a store time in ms: grant nothing when the lease's
   * latest term was granted at or after it and has since been released by its holder (not
   * expired, revoked or ended by a conflict); answer 'busy' with `releasedSince` instead. A
   * per-slot cron contender passes its slot's time: a released term granted since the slot
   * came due was that slot's winner, alive to the end of it, so a second term could only read
   * the ledger, find the slot handled and release. A store may ignore it (SQLite honours it,
   * where contenders queue behind the file's write lock for longer than a short slot's whole
   * term); its contender then gets a term and finds the slot done in the ledger.
   */
  unlessReleasedSince?: number;
}

/** How many nonces one renewal may present (the engine sends at most three). */
export const MAX_EXPECTED_NONCES = 8;

/** Why a renewal failed, as the store sees the row. */
export type LostReason =
  | 'expired' // still our row, but the store's clock passed its expiry
  | 'superseded' // another holder owns it
  | 'cloned' // our holder id, but another process with that id renewed it (a restored snapshot); the term was ended
  | 'revoked' // an operator revoked it
  | 'released'; // released (by a clone of this process, since this process did not)

export type ClaimResult =
  | {
      name: string;
      outcome: 'acquired' | 'renewed';
      token: bigint;
      holder: string;
      expiresAtMs: number;
      storeNowMs: number;
      /**
       * The nonce the store holds for the term, when it is not the request's `nextNonce`: a term
       * a release handed to this contender and confirmed without a write (PostgreSQL before schema
       * 17, MySQL before 10; see {@link ClaimRequest.handoff}). The caller renews and releases with it.
       */
      nonce?: string;
      /** Liveness 'session': true when the store tied the term to the request's session. */
      session?: boolean;
    }
  | {
      name: string;
      outcome: 'busy';
      /** The current holder (null if the store could not say). */
      holder: string | null;
      token: bigint | null;
      expiresAtMs: number | null;
      storeNowMs: number;
      /** Refused by {@link ClaimRequest.unlessReleasedSince}: the lease is free, but a term granted since then was released. */
      releasedSince?: true;
      /**
       * Optional: when the term that holds the lease was granted, by the store's clock (absent
       * when the store does not say). A per-slot cron contender tells an earlier slot's term
       * still running (granted before its slot: worth waiting for) from its own slot's winner
       * (granted since: nothing left to do).
       */
      grantedAtMs?: number;
      /**
       * Liveness 'session': not granted only because the lease's session lock is free and the
       * request's session does not hold it (it missed the lock, and whoever held it has let go
       * since): a term granted now would be tied to nothing. The contender's session takes the
       * lock and claims again at once ({@link LeaseSession.waitForLock}).
       */
      sessionLockFree?: true;
    }
  | {
      name: string;
      outcome: 'lost';
      reason: LostReason;
      holder: string | null;
      token: bigint | null;
      expiresAtMs: number | null;
      storeNowMs: number;
    };

/** A claim the store granted (an acquisition or a renewal). */
export type GrantedClaim = Extract<ClaimResult, { outcome: 'acquired' | 'renewed' }>;

export interface ReleaseRequest {
  name: string;
  holder: string;
  expect: readonly string[];
}

/** Called with a lease name when the store says it may have become free. */
export type FreedListener = (name: string) => void;

/** What the lease engine calls on a store, and nothing else. */
export interface LeasePort {
  /** `postgres`, `sqlite`, ... */
  readonly kind: string;
  /** Where it points, with any password redacted: safe to log. */
  readonly description: string;

  /**
   * Optional: the most leases one `claim` should carry (the renewal batcher splits a tick into calls of
   * at most this many). Default 5000 (the renewal batcher's MAX_BATCH).
   */
  readonly maxClaimBatch?: number;

  /** Acquire or renew many leases in one round trip. Results come back in request order. */
  claim(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]>;
  /**
   * Releases the caller's current term. False when the caller no longer held it. A port with
   * {@link handover} may hand the term to the registered waiter in the same step (a new term,
   * with a larger token, as an acquisition), and also withdraws the caller's own waiter
   * registration when `expect` holds the nonce it registered under.
   */
  release(request: ReleaseRequest, options?: CallOptions): Promise<boolean>;
  /**
   * Optional: many releases in one round trip, each answered as `release` would answer it, in
   * request order (the engine sends at most `maxClaimBatch` of them, each name at most once).
   * Closing a process that holds N leases then costs N / maxClaimBatch calls instead of N.
   */
  releaseMany?(requests: readonly ReleaseRequest[], options?: CallOptions): Promise<boolean[]>;

  /**
   * Optional: a push channel for "this lease may be free" (LISTEN/NOTIFY, pub/sub, watch).
   * Without it followers sleep until the store-reported expiry. The returned function stops
   * listening. `onReconnect` fires after the channel was down, since notifications may have
   * been missed while it was. `onDown` (for ports that set {@link freedCoversExpiry}) fires
   * when the channel goes down, including before the returned promise resolves if it never came
   * up; `onReconnect` follows once it is back.
   */
  watchFreed?(listener: FreedListener, onReconnect?: () => void, onDown?: () => void): Promise<() => Promise<void>>;

  /**
   * Optional, with `watchFreed`: the channel also reports every term that runs out (etcd deletes
   * the key on expiry, and the watch sees that delete like any other), and while it is up it
   * misses nothing that happened after it came up. "Up" is from `watchFreed` resolving (unless
   * `onDown` fired first) or from `onReconnect`, until `onDown`. A port that sets this must call
   * `onDown`. Followers then wait on the channel alone, with only a rare safety re-check
   * (core/contention.ts, followerRecheckMs), instead of polling at each expiry: idle followers cost no
   * requests. Without it (LISTEN/NOTIFY and pub/sub only hear releases) followers re-check
   * within one TTL.
   */
  readonly freedCoversExpiry?: true;

  /**
   * Optional: the store honours {@link ClaimRequest.unlessReleasedSince} (refuses, with
   * `releasedSince`, a contender whose lease a term begun since then has held and released). A
   * store without it grants as usual; the refusal only saves a per-slot cron contender's term.
   * The conformance suite checks the refusal on every store that sets this.
   */
  readonly honoursReleasedSince?: true;

  /**
   * Optional: one-write handover. A waiting contender's 'busy' claim registers it as the lease's
   * waiter ({@link ClaimRequest.handoff}); a release then hands the term straight to a waiter
   * registered recently enough (new token, the waiter's nonce) and notifies, and the waiter
   * accepts it with its next claim, which answers 'acquired' with the waiter's own TTL. Until
   * accepted, the handed term is an offer that lapses at the end of its acceptance window (a
   * third of the waiter's TTL, at least 500 ms, at most the TTL) after the release, so a waiter
   * that died keeps nobody out for longer (on older schemas, and on MySQL for a waiter registered
   * by a process of the previous version, the handed term runs the waiter's whole TTL and is
   * confirmed by a read). The engine then sends `handoff` on waiting
   * contenders' claims and, when such a contender stops without a term, withdraws it with a
   * `release` of the nonces it registered under.
   */
  readonly handover?: true;

  /**
   * Optional: settings of the store that can break leasehold's promises without failing a single
   * call (Redis: a maxmemory-policy that may evict a live lease record). `leasehold doctor`
   * prints each finding and fails on a `fail`; the client logs every finding that is not `ok`
   * once, at warn, when it first claims. Resolves (never rejects) with the findings.
   */
  checkSettings?(options?: CallOptions): Promise<StoreSettingCheck[]>;

  /**
   * Optional: liveness 'session' (LeaseOptions.liveness). Opens a session of this process's own
   * for one lease (PostgreSQL: a dedicated connection) and takes the lease's session lock when
   * it is free. A store without it refuses the mode.
   * @throws {LivenessError} when the session would not be this process's alone (a pooler), or
   *   when the store could end a live holder's session before the holder stands down (keepalive).
   */
  openSession?(name: string, ttlMs: number, options?: CallOptions): Promise<LeaseSession>;

  close(): Promise<void>;
}

/**
 * A session of the holder's own that the store ties a term to (liveness 'session'): while it
 * lives, so may the term, until its expiry; once it is gone (the process died, the server ended
 * it), the store ends the term at the next claim of a contender, as a revocation ends one.
 */
export interface LeaseSession {
  /** What claims carry ({@link ClaimRequest.session}). */
  readonly id: string;
  /** True once the session ended (closed by us, or by the server or the network). */
  readonly ended: boolean;
  /**
   * Read-only: this session holds the lease's session lock now (taken when it opened, or granted
   * by {@link waitForLock}), so no other session does: a claim now ends a term whose recorded
   * session is gone, and ties the term it grants to this one. A session that opened after the
   * holder died holds it at once, and {@link waitForLock} would wait for nothing: look here first.
   * SQLite has no lock: true once a wait saw the recorded holder's process gone.
   */
  readonly holdsLock: boolean;
  /**
   * Waits up to `ms` for the lease's session lock to become this session's: it is granted the
   * moment the session holding it ends. Resolves early only when granted; never rejects.
   */
  waitForLock(ms: number): Promise<void>;
  /** Called once if the session ends without {@link close} or {@link release}, with what ended it. */
  onEnd(listener: (detail: string) => void): void;
  /**
   * The holder's release over the session itself: the term ends and the session lock is let go
   * in one transaction, so a follower waiting on the lock finds the term released, not
   * orphaned. Then closes the session. Answers as {@link LeasePort.release}.
   */
  release(request: ReleaseRequest, options?: CallOptions): Promise<boolean>;
  close(): Promise<void>;
}

/** One finding of {@link LeasePort.checkSettings}, in `leasehold doctor`'s shape. */
export interface StoreSettingCheck {
  /** What was checked, one word (`eviction`). */
  check: string;
  /** `fail`: it can break a promise now; `warn`: it would after a change, or could not be read. */
  status: 'ok' | 'warn' | 'fail';
  /** What was found, what it means and what to set. */
  detail: string;
}
