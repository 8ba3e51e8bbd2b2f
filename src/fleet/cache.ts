import { realClock, type Clock } from '../core/clock.js';
import { parseDuration, type Duration } from '../core/config.js';
import { ConfigError } from '../core/errors.js';
import type { CallOptions } from '../core/port.js';
import type { Owner } from './fleet.js';

export interface OwnerCacheOptions {
  /** How long a live answer is reused. Default 1s. Never longer than the store vouched for the owner. */
  ttl?: Duration;
  /** Entries kept at most (oldest dropped first). Default 10,000. */
  maxEntries?: number;
  /** For tests: the monotonic clock the TTL runs on. */
  clock?: Clock;
}

export interface OwnerCacheStats {
  hits: number;
  misses: number;
}

interface Entry {
  owner: Owner;
  /** Monotonic time after which the entry is not used. */
  until: number;
}

/**
 * An edge cache for owner lookups that remembers positive answers only. A cached "dead" (or
 * "no owner") is ignorance with a timestamp: one slow heartbeat would read as a dead agent for a
 * whole TTL. So an absent or expired entry always asks the store, every error passes straight
 * through and is never stored, and this cache can only ever say "live".
 *
 * The price is the other direction: an owner that dies right after a lookup is reported live
 * until the entry ends. An entry ends at the cache TTL or at the owner's liveness expiry as the
 * store reported it, whichever is first, counted from when the lookup was sent (so it never
 * outlives what the store itself vouched for). Work must still carry the generation to a fence.
 */
export class OwnerCache {
  private readonly lookup: (resource: string, options?: CallOptions) => Promise<Owner>;
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  private readonly clock: Clock;
  private readonly entries = new Map<string, Entry>();
  private hits = 0;
  private misses = 0;

  constructor(fleet: { owner(resource: string, options?: CallOptions): Promise<Owner> }, options: OwnerCacheOptions = {}) {
    this.lookup = (resource, o) => fleet.owner(resource, o);
    this.ttlMs = parseDuration(options.ttl ?? 1000, 'cache ttl');
    this.maxEntries = options.maxEntries ?? 10_000;
    if (!Number.isInteger(this.maxEntries) || this.maxEntries < 1) throw new ConfigError(`maxEntries must be a whole number >= 1, got ${this.maxEntries}`);
    this.clock = options.clock ?? realClock;
  }

  /**
   * The live owner, from the cache or the store. @throws whatever `fleet.owner` throws
   * (NoOwnerError, OwnerDeadError, StoreUnavailableError): always the store's own answer.
   */
  async owner(resource: string, options?: CallOptions): Promise<Owner> {
    const hit = this.entries.get(resource);
    if (hit !== undefined) {
      if (this.clock.monoNow() < hit.until) {
        this.hits++;
        return hit.owner;
      }
      this.entries.delete(resource);
    }
    this.misses++;
    const sent = this.clock.monoNow();
    const owner = await this.lookup(resource, options);
    const until = sent + Math.min(this.ttlMs, owner.expiresInMs);
    if (until > this.clock.monoNow()) {
      this.entries.delete(resource);
      this.entries.set(resource, { owner, until });
      if (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    }
    return owner;
  }

  /** Forget a resource (after this process reassigned or removed it, say). */
  invalidate(resource: string): void {
    this.entries.delete(resource);
  }

  stats(): OwnerCacheStats {
    return { hits: this.hits, misses: this.misses };
  }
}
