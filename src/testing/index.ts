/**
 * For tests and the chaos harness only, not part of the public API: what a snapshot of a
 * process's memory would hold of its term, and a Lease that resumes from it as a restored
 * process would. Two processes resumed from one snapshot are how a VM restored twice is
 * simulated without a hypervisor.
 */
export { snapshotLease, resumeLease, type LeaseSnapshot } from '../core/lease.js';
