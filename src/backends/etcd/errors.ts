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

/**
 * An answer gRPC refused as larger than its receive limit (RESOURCE_EXHAUSTED, which etcd3 marks
 * recoverable). The member is fine and the same read fails the same way on every member, so it
 * is neither an outage nor retryable (pages.ts reads large ranges in pages instead).
 */
export function isAnswerTooLarge(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (/larger than max/i.test(e.message)) return true;
  }
  return false;
}

export function isTransient(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  // Before the class test: RESOURCE_EXHAUSTED is also etcd's "too many requests" (a busy
  // member, worth another), but an over-size answer is not, and marking the member down for it
  // sends the cluster's every call elsewhere while the caller retries a read that cannot succeed.
  if (isAnswerTooLarge(err)) return false;
  if (TRANSIENT.has(err.constructor.name)) return true;
  return Object.getOwnPropertySymbols(err).some((s) => s.description === 'RecoverableError');
}
