/**
 * Lease names the engine reserves. The fleet's agents hold `agent/<id>` as their liveness: a
 * `leasehold run --name agent/x` would make agent x look alive with no agent behind it, so core
 * refuses such a name unless the options object is one the fleet's Agent registered. Defined in
 * core (which knows nothing of the fleet) and re-exported by src/fleet/port.ts.
 */

/** The prefix of an agent's liveness lease: the agent `a1` holds the lease `agent/a1`. */
export const AGENT_LEASE_PREFIX = 'agent/';

/** The options objects the fleet's Agent passes to `leasehold.lease()` for its liveness lease. */
export const AGENT_LEASE_OPTIONS = new WeakSet<object>();
