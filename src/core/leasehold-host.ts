import type { Renewal } from './scheduler.js';

/** A held term as the client sees it: the scheduler renews it; the detectors and "freed" notifications reach it. */
export interface HeldTerm extends Renewal {
  /** The store says the lease may have been freed: renew at once; the store's answer decides. */
  checkNow(): void;
  /** A suspension detector fired: end the term and hand it back to the store. */
  suspend(detail: string): void;
}
