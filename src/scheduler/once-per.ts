/**
 * `runOncePer(key, fn, options)`: the library form of `leasehold run --once-per KEY`. Takes the
 * lease `name`, claims KEY in the slot ledger with the term's fencing token, runs `fn`, records
 * the outcome, releases. A KEY that already succeeded is not run again, on any replica, ever; a
 * KEY that failed, or whose term ended while it ran (a crash, a lost lease), runs again on the
 * next call (at-least-once for those: `idempotencyKey` is the same for every run of KEY).
 */
import { ConfigError, LeaseLostError, errorMessage } from '../core/errors.js';
import type { Duration } from '../core/config.js';
import type { Lease, LeaseOptions, Term } from '../core/lease.js';
import type { Leasehold } from '../core/leasehold.js';
import { slotIdempotencyKey, type SlotLedgerPort, type SlotRecord } from './ledger.js';

export interface OncePerOptions extends LeaseOptions {
  leasehold: Leasehold;
  /** The slot ledger in the same store as the leases (see openScheduling or the *SlotLedger classes). */
  ledger: SlotLedgerPort;
  /** The lease name: the same on every replica that may run KEY. */
  name: string;
  /** Wait for the lease while another replica holds it (default true), as `runExclusive`. */
  wait?: boolean | Duration;
  signal?: AbortSignal;
}

export interface OncePerContext {
  name: string;
  key: string;
  token: bigint;
  /** Aborts with a LeaseLostError when the term ends: stop, KEY will run again. */
  signal: AbortSignal;
  term: Term;
  lease: Lease;
  /** The same for every run of KEY (`leasehold:NAME:slot:KEY`). */
  idempotencyKey: string;
  /** The token of the failed or interrupted term this run repeats, or null. */
  rerunOf: bigint | null;
}

export type OncePerResult<T> =
  /** `fn` ran and resolved; KEY is recorded succeeded. */
  | { ran: true; value: T; token: bigint; rerunOf: bigint | null }
  /** KEY was already done (by this or another replica): `record` says when and by which term. */
  | { ran: false; record: SlotRecord };

/**
 * Runs `fn` once per KEY across every replica that calls this with the same `name` and store.
 * @throws {ConfigError} an empty key.
 * @throws {LeaseLostError} the term ended before KEY could be claimed, or while `fn` ran (KEY is
 *   recorded interrupted and the next call runs it again).
 * @throws whatever `fn` throws (KEY is recorded failed and the next call runs it again).
 */
export async function runOncePer<T>(key: string, fn: (ctx: OncePerContext) => Promise<T> | T, options: OncePerOptions): Promise<OncePerResult<T>> {
  if (typeof key !== 'string' || key === '') throw new ConfigError('runOncePer needs a non-empty key, for example "migrate-2026-03" or a release id');
  const { leasehold, ledger, name, wait, signal, ...leaseOptions } = options;
  const lease = leasehold.lease(name, leaseOptions);
  try {
    const term = await lease.acquire({ wait: wait ?? true, signal });
    const who = { name, holder: term.holder, token: term.token };
    const claim = await ledger.claim({ ...who, key, slotAtMs: null, onInterrupted: 'rerun', rerunFailed: true, signal: term.signal });
    if (claim.outcome === 'fenced') throw new LeaseLostError(name, term.token, 'expired', `the term ended before once-per key ${JSON.stringify(key)} could be claimed; call again`);
    if (claim.outcome === 'done') return { ran: false, record: claim.record };
    if (claim.outcome === 'early') throw new ConfigError(`the ledger answered 'early' for once-per key ${JSON.stringify(key)}, which has no time`);
    let value: T;
    try {
      value = await fn({ name, key, token: term.token, signal: term.signal, term, lease, idempotencyKey: slotIdempotencyKey(name, key), rerunOf: claim.rerunOf });
    } catch (e) {
      await complete(ledger, { ...who, key }, term, 'failed', errorMessage(e));
      throw e;
    }
    await complete(ledger, { ...who, key }, term, 'succeeded', null);
    // As runExclusive: a term that ended while fn ran may have had its later writes fenced.
    if (term.signal.aborted) throw term.signal.reason as Error;
    return { ran: true, value, token: term.token, rerunOf: claim.rerunOf };
  } finally {
    await lease.close();
  }
}

/** Records the outcome; a term that ended meanwhile records 'interrupted' (owed: the next call reruns it). */
async function complete(ledger: SlotLedgerPort, who: { name: string; holder: string; token: bigint; key: string }, term: Term, status: 'succeeded' | 'failed', reason: string | null): Promise<void> {
  const lost = term.signal.aborted;
  const why: unknown = term.signal.reason;
  try {
    await ledger.complete({
      ...who,
      status: lost ? 'interrupted' : status,
      exitCode: null,
      reason: lost ? `the term ended while it ran (${why instanceof LeaseLostError ? why.reason : 'stopped'})` : reason,
    });
  } catch {
    // Left 'claimed': the next call sees an ended term's claim and runs KEY again.
  }
}
