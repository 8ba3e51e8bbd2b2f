/**
 * etcd errors as leasehold classifies them: which ones leave a call's outcome unknown (try the
 * next member), and the keepalive's own. Here, not in client.ts, so the member pool
 * (members.ts) and the client can both use them without importing each other.
 */

/** A keepalive that got no answer in its attempt's time, or whose stream failed: nothing is known, try another member. */
export class EtcdKeepAliveError extends Error {
  override name = 'EtcdKeepAliveError';
}

/** The gRPC errors (by etcd3 class name) after which the outcome of a call is unknown, or nothing was sent. */
const TRANSIENT = new Set([
  'GRPCUnavailableError',
  'GRPCDeadlineExceededError',
  'GRPCCancelledError',
  'GRPCInternalError',
  'GRPCAbortedError',
  'GRPCResourceExhastedError',
  'GRPCUnknownError',
  'GRPCConnectFailedError',
  'EtcdWatchStreamEnded',
  'BrokenCircuitError',
  'EtcdKeepAliveError',
]);

export function isTransient(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  if (TRANSIENT.has(err.constructor.name)) return true;
  return Object.getOwnPropertySymbols(err).some((s) => s.description === 'RecoverableError');
}
