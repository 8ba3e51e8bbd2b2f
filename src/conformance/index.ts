/**
 * `leasehold/conformance`: the suite leasehold's own stores pass, for a store of your own (MySQL,
 * DynamoDB, ...). Implement `LeaseStore` (backends/store.ts), then in a test file:
 *
 *   import { runConformance } from 'leasehold/conformance';
 *   runConformance('mysql', async (label) => {
 *     const store = await MyStore.open({ prefix: label + '-' + Date.now() });
 *     await store.migrate();
 *     return { store, open: () => MyStore.open(...same prefix...), cleanup: () => store.close() };
 *   });
 *
 * and run it with `node --test`. A fleet port of your own (src/fleet/port.ts) has its suite too:
 * `runFleetConformance(label, factory)`, whose factory also returns the fleet over that store. The claim cases are checked against `decideClaim`, the one
 * written claim rule; `MemoryStore` is the reference store that follows it.
 */
export { runConformance, countingStore, type ConformanceFactory, type ConformanceOptions, type ConformanceTarget } from './suite.js';
export { runFleetConformance, type FleetConformanceFactory, type FleetConformanceOptions, type FleetConformanceTarget } from './fleet.js';
export { ROW_STATES, REQUESTS, compare, expected, expectedListing, US, THEM, type Prepared, type RowStateCase, type RequestCase } from './claim-table.js';
export {
  decideClaim,
  rowAfterClaim,
  endedRow,
  canEndTerm,
  isLive,
  leaseState,
  nextToken,
  CONFLICT_DETAIL,
  type ClaimDecision,
  type ClaimInput,
  type EndedBy,
  type LeaseRowState,
} from '../core/claim-rule.js';
export { MemoryStore, MemoryState, type MemoryStoreOptions } from '../testing/memory-store.js';
export type { LeasePort } from '../core/port.js';
export type { LeaseAdmin, LeaseStore } from '../backends/store.js';
export { runSlotLedgerConformance, type SlotLedgerTarget, type SlotLedgerConformanceOptions } from './slots.js';
