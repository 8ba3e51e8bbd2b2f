import type { LoggerLike } from './logger.js';
import type { Clock } from './clock.js';
import type { ClaimRequest, ClaimResult, LeasePort, ReleaseRequest } from './port.js';
import type { Renewal } from './renewal-batcher.js';
import type { Lease } from './lease.js';

/** A held term as the client sees it: the renewal batcher renews it; the detectors and "freed" notifications reach it. */
export interface HeldTerm extends Renewal {
  /** The store says the lease may have been freed: renew at once; the store's answer decides. */
  checkNow(): void;
  /** A suspension detector fired: end the term and hand it back to the store. */
  suspend(detail: string): void;
}

/**
 * What a Lease needs from the client that created it (core/leasehold.ts), one interface per
 * concern, so each part of Lease names the little it uses.
 */
export type LeaseHost = HostBasics & RenewalHost & FreedChannelHost & DetectorHost & IdentityHost;

/** The store, the logger, the clock; and being let go of. */
interface HostBasics {
  readonly store: LeasePort;
  readonly logger: LoggerLike;
  readonly clock: Clock;
  /** The lease was closed: the client no longer needs to track it. */
  forget(lease: Lease): void;
  /** Keeps the process's client alive while a contention runs. */
  retainWhileContending(delta: 1 | -1): void;
}

/** Claims and renewals, batched by the client's one renewal loop (core/renewal-batcher.ts). */
interface RenewalHost {
  /** One acquisition attempt, through the client's renewal batcher (batched with whatever else is due). */
  claim(req: ClaimRequest): Promise<ClaimResult>;
  /** A release (or a waiter's withdrawal), coalesced with others sent at once (core/release-batcher.ts). */
  release(req: ReleaseRequest): Promise<boolean>;
  /** A term began: renew it, watch for its revocation, watch for suspensions. */
  enroll(held: HeldTerm): void;
  unenroll(held: HeldTerm): void;
  /** Someone waits for a round trip: tick the renewal batcher now. */
  renewNow(): void;
  /** Called after each renewal: how far the store's clock and the monotonic clock moved. */
  noteStoreAdvance?(storeAdvanceMs: number, localAdvanceMs: number, ttlMs: number): void;
}

/** "Freed" notifications: the store's channel that a lease was released (or expired). */
interface FreedChannelHost {
  waitForFreed(name: string, signal: AbortSignal): { promise: Promise<void>; cancel(): void };
  /** An id of the current up-period of a freed channel that also reports expiry; undefined when none is up. */
  freedEpoch(): number | undefined;
}

/** The suspension detectors (a freeze, a restore, a fork) that end every term at once. */
interface DetectorHost {
  checkSuspension(): void;
  suspect(detector: 'deadline-passed', detail: string): void;
}

/** This process instance's holder id, replaced when a clone may share it. */
interface IdentityHost {
  currentHolder(): string;
  regenerateIdentity(why: string): void;
}
