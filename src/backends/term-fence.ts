/**
 * What the PostgreSQL and SQLite same-database fences share (./postgres/term-fence.ts and
 * ./sqlite/term-fence.ts): the request, and the rule that names why a fenced write's last
 * statement changed nothing. Each backend runs its own SQL; the verdict is the same.
 */
import { ConfigError, LeaseLostError, StoreUnavailableError } from '../core/errors.js';
import type { Lease, Term } from '../core/lease.js';
import type { LostReason } from './store.js';
import type { Duration } from '../core/config.js';

/**
 * The options of a fence inside a transaction a library opened, whatever the database: each
 * dialect reads `table` and `idleTimeout` its own way (src/backends/<store>/fence.ts).
 */
export type TxFenceOptions = {
  resource: string;
  table?: string;
  idleTimeout?: Duration | false;
  lease?: string;
} & ({ token: bigint; term?: Term } | { term: Term; token?: bigint });

export interface TermFenceRequest {
  name: string;
  holder: string;
  token: bigint;
  /** The fence nonces this process may have set for this term. */
  expect: readonly string[];
  /** No fenced write of this term may have committed yet. */
  first: boolean;
}

/** What the row says after a fenced write's UPDATE changed nothing. */
export type TermFenceFailure = { kind: 'lost'; reason: LostReason } | { kind: 'missing' } | { kind: 'ours' };

/** Shared by the PostgreSQL and SQLite fences: the same rule as a renewal's 'lost' reasons. */
export function judge(
  row: { holder: string | null; token: bigint; endedBy: string | null; live: boolean; ours: boolean; conflict: boolean },
  req: { holder: string; token: bigint },
): TermFenceFailure {
  if (row.conflict) return { kind: 'lost', reason: 'cloned' };
  if (row.holder === req.holder && row.token === req.token) {
    // Ours and live: the row moved under a write of this process, which the one-at-a-time rule
    // prevents; refuse this one write (retryable) rather than call anyone a clone.
    return row.live && row.ours ? { kind: 'ours' } : { kind: 'lost', reason: 'expired' };
  }
  if (row.holder === null && row.token === req.token) {
    if (row.endedBy === 'conflict') return { kind: 'lost', reason: 'cloned' };
    if (row.endedBy === 'revoked') return { kind: 'lost', reason: 'revoked' };
    if (row.endedBy === 'released') return { kind: 'lost', reason: 'released' };
    return { kind: 'lost', reason: 'expired' };
  }
  return { kind: 'lost', reason: 'superseded' };
}

/**
 * One statement in the caller's own transaction, whatever library opened it: `$1, $2 ...`
 * placeholders, each used once and in order (an adapter whose library wants `?` rewrites them),
 * every statement a SELECT (or a data-modifying CTE under one), so every library hands back rows.
 */
export type FenceExecute = (sql: string, params: readonly unknown[]) => Promise<readonly Record<string, unknown>[]>;

/** A fenced write's validated options, as a dialect plans it. */
export interface FencePlan {
  resource: string;
  token: bigint;
  /** The lease name the mark is claimed for (the term's, or the `lease` option), if known. */
  owner: string | undefined;
  /** The idle-in-transaction bound in ms, undefined for none of ours. */
  idleMs: number | undefined;
  /** With `term`: the term and its lease (the resource is in the lease store's own database). */
  term: Term | undefined;
  lease: Lease | undefined;
}

/**
 * What a dialect does inside a transaction someone else opened (src/fence/engine.ts runs the
 * steps; each backend's fence.ts implements them in its SQL).
 */
export interface FenceDialect<O, P extends FencePlan = FencePlan> {
  /** Validates the options at the edge. @throws {ConfigError} */
  plan(options: O): P;
  /** The idle bound and the mark's advance; locks the mark's row until the transaction ends. @throws {FencedError} @throws {FenceOwnedError} @throws {SchemaError} */
  advance(exec: FenceExecute, plan: P): Promise<void>;
  /** With `term`: moves the lease row's fence nonce to `req.next` if the row is this process's. */
  rotate(exec: FenceExecute, plan: P, req: TermFenceRequest & { next: string }): Promise<boolean>;
  /** With `term`, in a transaction of its own after the rollback: why the row was not ours (ending a clone's term). */
  classify(exec: FenceExecute, plan: P, req: TermFenceRequest): Promise<TermFenceFailure>;
  /** With `term`, inside the refused transaction (no other connection to use): why, without ending anything. */
  judgeInside(exec: FenceExecute, plan: P, req: TermFenceRequest): Promise<TermFenceFailure>;
  /** A statement's error, with the server's ending of an idle transaction made a typed error. */
  mapError(err: unknown, plan: P): unknown;
}

/**
 * The error for a refused term check (the lease row was not this process's), for every SQL
 * fence: ends the term in this process when the store says it is over. `where` names the
 * database the lease row was looked for in, `what` is what was rolled back.
 */
export function refusedTermFence(
  why: TermFenceFailure,
  lease: Lease,
  term: Term,
  say: { missing: string; what: 'write' | 'transaction'; subject?: string },
): Error {
  const name = lease.name;
  if (why.kind === 'missing') return new ConfigError(`lease "${name}" has no row in ${say.missing}`);
  if (why.kind === 'ours') {
    return new StoreUnavailableError(`the fenced ${say.what} ${say.subject ?? ''}for lease "${name}" was rolled back because the lease row moved under it; retry it`);
  }
  const detail =
    why.reason === 'cloned'
      ? `another process holding this term (a restored snapshot or a fork) committed a fenced write with it; this ${say.what} was rolled back`
      : `a fenced write found the term over in the store (${why.reason}); the ${say.what} was rolled back`;
  lease.fenceLost(term, why.reason, detail);
  return term.signal.aborted ? (term.signal.reason as Error) : new LeaseLostError(name, term.token, why.reason === 'released' ? 'superseded' : why.reason, detail);
}

/** The mark's owner: the term's lease name, or the `lease` option (which must then agree). */
export function ownerOf(option: string | undefined, termLease: string | undefined): string | undefined {
  if (option !== undefined && (typeof option !== 'string' || option.length === 0)) throw new ConfigError('`lease` must be a non-empty lease name');
  if (option !== undefined && termLease !== undefined && option !== termLease) {
    throw new ConfigError(`\`lease\` is "${option}" but the term passed with it is of lease "${termLease}"; leave \`lease\` out when you pass \`term\``);
  }
  return termLease ?? option;
}
