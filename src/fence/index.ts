/**
 * Resource-side fences. The leader can be wrong about being the leader (that is the premise);
 * the resource cannot be wrong about which token it last accepted.
 *
 * What fencing cannot cover: a side effect outside a store that checks tokens, such as an
 * email, a webhook, or a payment API. There, derive an idempotency key from the lease name and
 * token ({@link idempotencyKey}) so the receiver drops the duplicate, and call
 * `lease.confirm()` right before the call.
 */
export { fencedTransaction, createPgFenceTable, type PgFenceOptions, type PgFenceTarget } from './postgres.js';
export { fencedWriteSync, createSqliteFenceTable, type SqliteFenceOptions } from './sqlite.js';
export { fencedSet, fencedHSet } from './redis.js';
export { FencedError } from '../core/errors.js';

/**
 * A key that is the same for every retry within one term and different in every other term:
 * `leasehold:<name>:<token>[:<step>]`. Give it to receivers that deduplicate by key.
 */
export function idempotencyKey(name: string, token: bigint, step?: string): string {
  return `leasehold:${name}:${token}${step === undefined ? '' : `:${step}`}`;
}
