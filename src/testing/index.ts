/**
 * `leasehold/testing`: for tests and the chaos harness, not for production code. What a snapshot of a
 * process's memory would hold of its term, and a Lease that resumes from it as a restored
 * process would. Two processes resumed from one snapshot are how a VM restored twice is
 * simulated without a hypervisor. `MemoryStore` is the reference store that follows the claim
 * rule, for tests of code built on leasehold (one process only).
 */
export { snapshotLease, resumeLease, type LeaseSnapshot } from '../core/lease.js';
export { MemoryStore } from './memory-store.js';
