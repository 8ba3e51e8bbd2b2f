/**
 * The input checks every store applies the same way, written once: a claim batch, a history
 * limit. (The list state of a row is `leaseState` in core/claim-rule.ts.) Each throws
 * `ConfigError` before anything reaches the store.
 */
import { ConfigError } from '../core/errors.js';
import { MAX_EXPECTED_NONCES, type ClaimRequest } from '../core/port.js';

/**
 * Lease name -> the number of the last checkClaimBatch call that named it. A name can equal the
 * current call's number only if this call named it already: call numbers never repeat, so a
 * stale entry, or one a clear() dropped, is never mistaken for a duplicate. Cleared past
 * STAMPS_CAP names, so a process that churns through names does not keep them all.
 */
const stamps = new Map<string, number>();
let calls = 0;
const STAMPS_CAP = 200_000;

/**
 * One claim per lease per batch (a batch is applied atomically; two claims on one name would
 * race inside it), names non-empty, a positive TTL, and nonces a store can carry: non-empty,
 * no commas (several stores join the expected nonces with commas), at most
 * {@link MAX_EXPECTED_NONCES} of them.
 * @throws {ConfigError}
 */
export function checkClaimBatch(requests: readonly ClaimRequest[]): void {
  // Plain loops, no closures: every renewal tick passes through here, 10,000 requests at a time.
  // Duplicates are found by stamping each name with this call's number in a map kept between
  // calls. A renewal tick names the same leases as the last one, so the stamps overwrite entries
  // already there: a Set built afresh per call cost 3.5 ms of a 15 ms etcd tick at 10,000 leases
  // (its growth and rehashing, and the garbage), the stamps about a seventh of that.
  const call = ++calls;
  if (stamps.size > STAMPS_CAP) stamps.clear();
  for (const r of requests) {
    if (r.name === '') throw new ConfigError('a lease name must be non-empty');
    if (stamps.get(r.name) === call) throw new ConfigError(`claim batch names lease "${r.name}" twice; one claim per lease per batch`);
    stamps.set(r.name, call);
    if (r.holder === '' || r.nextNonce === '') throw new ConfigError(`claim for lease "${r.name}" has an empty holder or nextNonce`);
    if (!Number.isFinite(r.ttlMs) || r.ttlMs <= 0) throw new ConfigError(`claim for lease "${r.name}" has ttl ${r.ttlMs}ms; it must be a positive number of milliseconds`);
    if (!nonceOk(r.nextNonce) || (r.expect !== null && !noncesOk(r.expect))) {
      throw new ConfigError(`claim for lease "${r.name}" has a nonce that is empty or contains a comma; nonces are base64url`);
    }
    if (r.handoff !== undefined && (r.handoff.length > MAX_EXPECTED_NONCES || !noncesOk(r.handoff))) {
      throw new ConfigError(`claim of "${r.name}" has ${r.handoff.length} handoff nonces, or one empty or with a comma; at most ${MAX_EXPECTED_NONCES}, base64url`);
    }
    if (r.expect !== null && r.expect.length > MAX_EXPECTED_NONCES) {
      throw new ConfigError(`claim of "${r.name}" expects ${r.expect.length} nonces; at most ${MAX_EXPECTED_NONCES} are supported`);
    }
  }
}

/** Several stores join expected nonces with commas: a nonce must be non-empty and hold none. */
function nonceOk(n: string): boolean {
  return n !== '' && n.indexOf(',') === -1;
}

function noncesOk(ns: readonly string[]): boolean {
  for (let i = 0; i < ns.length; i++) if (!nonceOk(ns[i]!)) return false;
  return true;
}

/** The default number of history entries a store returns. */
const DEFAULT_HISTORY_LIMIT = 1000;

/**
 * The history limit every store honours: a whole number >= 0 (0 answers no entries, without a
 * round trip), default {@link DEFAULT_HISTORY_LIMIT}. There is no "unlimited": a store's history
 * can be long, and a caller who wants all of it asks for a number.
 * @throws {ConfigError}
 */
export function historyLimit(limit: number | undefined): number {
  const n = limit ?? DEFAULT_HISTORY_LIMIT;
  if (!Number.isSafeInteger(n) || n < 0) throw new ConfigError(`history limit must be a whole number >= 0, got ${n}`);
  return n;
}
