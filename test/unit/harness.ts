import { Leasehold, type LeaseholdOptions } from '../../src/core/leasehold.js';
import { LeaseLostError } from '../../src/core/errors.js';
import type { Term } from '../../src/core/lease.js';
import { FakeClock } from './fake-clock.js';
import { MemoryStore } from './memory-store.js';

/** ttl 3s: renew every 1s, stand down 300ms before the store's expiry. */
export const TIMING = { ttl: 3000 } as const;
export const TTL = 3000;
export const RENEW = 1000;
export const MARGIN = 300;

export interface World {
  clock: FakeClock;
  store: MemoryStore;
  /** Moves the store's clock alone (a store whose clock runs ahead of ours). */
  skewStore(ms: number): void;
  leasehold(options?: Partial<LeaseholdOptions>): Leasehold;
  close(): Promise<void>;
}

/** One fake clock, one in-memory store on the world's time, any number of processes on them. */
export function world(): World {
  const clock = new FakeClock();
  let skew = 0;
  const store = new MemoryStore(() => clock.outsideNow() + skew);
  const made: Leasehold[] = [];
  return {
    clock,
    store,
    skewStore: (ms) => {
      skew += ms;
    },
    leasehold: (options = {}) => {
      const lh = new Leasehold({ store, clock, ...options });
      made.push(lh);
      return lh;
    },
    close: async () => {
      // close() releases through the store: let it answer.
      store.heal();
      store.deliver();
      await Promise.all(made.map((lh) => lh.close()));
    },
  };
}

/** The LeaseLostError a term ended with. */
export function lossOf(term: Term): LeaseLostError {
  const r: unknown = term.signal.reason;
  if (!(r instanceof LeaseLostError)) throw new Error(`term ${term.token} has not ended with a LeaseLostError (${String(r)})`);
  return r;
}
