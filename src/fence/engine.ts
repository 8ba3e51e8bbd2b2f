/**
 * The one core behind every ORM adapter (src/fence/<library>.ts): a fenced write inside a
 * transaction a library opened, given only a way to run one statement in it. The dialect
 * (src/backends/<store>/fence.ts) owns the SQL; this file owns the order of the steps and what
 * each outcome means for the term:
 *
 * 1. advance the resource's high-water mark (first statement; locks the mark's row until the
 *    transaction ends): a lower token than one accepted is FencedError, a mark of another lease
 *    is FenceOwnedError, and the caller's transaction rolls back because the error leaves it;
 * 2. run the user's work;
 * 3. with `term`: move the lease row's fence nonce if the row is still this process's (the clone
 *    check, as the `pg` fence does), then let the library COMMIT.
 *
 * `fence()` (the user opened the transaction) does 1 and 3 at once, up front: nothing runs after
 * the user's work there. The lease row then stays locked until the user's COMMIT, which delays
 * the lease's renewals for that long: keep such a transaction short, or use fencedTransaction.
 */
import { ConfigError, StoreUnavailableError } from '../core/errors.js';
import type { Lease, Term, TermFenceWrite } from '../core/lease.js';
import { refusedTermFence, type FenceDialect, type FenceExecute, type FencePlan, type TermFenceFailure, type TxFenceOptions } from '../backends/term-fence.js';

export type { FenceExecute, TxFenceOptions } from '../backends/term-fence.js';

/**
 * The fence's SQL (`sql`, from the entry: this module names no backend) for the database a
 * library handle talks to (`dialect`, as the library names it; undefined when it could not say,
 * which is taken as PostgreSQL). A handle on a database
 * with no dialect here is refused before any statement runs: the SQL would fail as a syntax
 * error that says nothing of why.
 * @throws {ConfigError}
 */
export function dialectFor(
  library: string,
  dialect: string | undefined,
  sql: { postgres: FenceDialect<TxFenceOptions, FencePlan>; sqlite?: FenceDialect<TxFenceOptions, FencePlan>; mysql?: FenceDialect<TxFenceOptions, FencePlan> },
): FenceDialect<TxFenceOptions, FencePlan> {
  if (dialect === undefined || /^(postgres|postgresql|pg)$/i.test(dialect)) return sql.postgres;
  if (sql.sqlite !== undefined && /^(sqlite|sqlite3|better-sqlite3)$/i.test(dialect)) return sql.sqlite;
  if (sql.mysql !== undefined && /^(mysql|mysql2|mariadb)$/i.test(dialect)) return sql.mysql;
  const has = ['PostgreSQL', sql.sqlite === undefined ? '' : 'SQLite', sql.mysql === undefined ? '' : 'MySQL/MariaDB'].filter((x) => x !== '').join(', ');
  throw new ConfigError(
    `leasehold/fence/${library} fences writes on ${has}, and this ${library} handle is on ${dialect}: ` +
      (/sqlite/i.test(dialect)
        ? 'on SQLite use fencedWriteSync from leasehold/fence on the same connection (Drizzle: fencedWriteSync(db.$client, options, () => db.insert(...).run()))'
        : 'on MySQL or MariaDB use fencedMysqlTransaction from leasehold/fence, with the mysql2 pool'),
  );
}

/** Thrown inside the library's transaction callback so that it rolls back; never leaves this module. */
class NotOurs extends Error {
  constructor(readonly w: TermFenceWrite) {
    super('the lease row was not this process\'s');
  }
}

/**
 * Fences the transaction `exec` runs in: call it first, before the transaction's own writes.
 * @throws {FencedError} a newer term has written; throw it on so the transaction rolls back.
 * @throws {FenceOwnedError} the resource's mark belongs to another lease name.
 * @throws {LeaseLostError} (with `term`) the term is over, or another process wrote with it.
 */
export async function fenceIn<O, P extends FencePlan>(dialect: FenceDialect<O, P>, exec: FenceExecute, options: O): Promise<void> {
  const plan = dialect.plan(options);
  try {
    await dialect.advance(exec, plan);
    if (plan.term === undefined || plan.lease === undefined) return;
    const { term, lease } = plan;
    const w = await lease.fenceWrite(term);
    let ours: boolean;
    try {
      ours = await dialect.rotate(exec, plan, w);
    } catch (err) {
      w.settle('not-written');
      throw err;
    }
    if (ours) {
      // The COMMIT is the caller's: the row may end up holding `next` or what it held before.
      w.settle('unknown');
      return;
    }
    w.settle('not-written');
    const now = lease.fenceExpected(term);
    throw lost(plan, lease, term, await dialect.judgeInside(exec, plan, { ...w, expect: now.expect, first: now.first }));
  } catch (err) {
    throw dialect.mapError(err, plan);
  }
}

/**
 * Runs `fn` in a transaction the library opens (`open` is the library's own "run this callback in
 * a transaction"), fenced as the module comment says. `outside` runs a statement on the same
 * database outside that transaction (after its rollback, to end a clone's term in the store).
 */
export async function fencedIn<O, P extends FencePlan, Tx, T>(
  dialect: FenceDialect<O, P>,
  options: O,
  open: (body: (tx: Tx) => Promise<T>) => Promise<T>,
  execOf: (tx: Tx) => FenceExecute,
  outside: FenceExecute,
  fn: (tx: Tx) => Promise<T>,
): Promise<T> {
  if (typeof fn !== 'function') throw new ConfigError('fencedTransaction needs a function to run inside the transaction');
  const plan = dialect.plan(options);
  let w: TermFenceWrite | undefined;
  /** The nonce moved and the callback returned: from here the COMMIT is the library's, and may fail. */
  let committing = false;
  /** The library's transaction call has settled: whatever the callback does after that is not handed back. */
  let over = false;
  const gone = (): Error => new StoreUnavailableError(`the transaction of the fenced write on "${plan.resource}" ended while fn ran; nothing was committed`);
  const body = async (tx: Tx): Promise<T> => {
    const exec = execOf(tx);
    await dialect.advance(exec, plan);
    const r = await fn(tx);
    if (plan.term !== undefined && plan.lease !== undefined) {
      if (over) throw gone();
      const mine = await plan.lease.fenceWrite(plan.term);
      if (over) {
        mine.settle('not-written');
        throw gone();
      }
      w = mine;
      if (!(await dialect.rotate(exec, plan, mine))) throw new NotOurs(mine);
    }
    committing = true;
    return r;
  };
  try {
    // postgres.js rejects begin() as soon as the server ends the connection, while the callback
    // is still running (a frozen writer); when the callback settles later it sends COMMIT or
    // ROLLBACK on the dead connection, which crashes the process with a TypeError from a timer
    // (postgres 3.4.9) or reaches a reconnected session. A callback that outlives its
    // transaction therefore never settles: there is nobody left to tell.
    const result = await open(
      (tx) =>
        new Promise<T>((resolve, reject) => {
          body(tx).then(
            (v) => {
              if (!over) resolve(v);
            },
            (e: unknown) => {
              if (!over) reject(e as Error);
            },
          );
        }),
    ).finally(() => {
      over = true;
    });
    w?.settle('written');
    return result;
  } catch (err) {
    // Thrown inside the callback: the library rolled back, nothing written. Thrown by its COMMIT: unknown.
    w?.settle(committing ? 'unknown' : 'not-written');
    if (err instanceof NotOurs && plan.term !== undefined && plan.lease !== undefined) {
      const now = plan.lease.fenceExpected(plan.term);
      let why: TermFenceFailure;
      try {
        why = await dialect.classify(outside, plan, { ...err.w, expect: now.expect, first: now.first });
      } catch (e) {
        throw dialect.mapError(e, plan);
      }
      throw lost(plan, plan.lease, plan.term, why);
    }
    throw dialect.mapError(err, plan);
  }
}

/** The error for a refused term check; ends the term in this process when the store says it is over. */
function lost(plan: FencePlan, lease: Lease, term: Term, why: TermFenceFailure): Error {
  return refusedTermFence(why, lease, term, {
    missing: "the database this transaction ran in; pass `term` only when the resource is in the lease store's own database",
    what: 'transaction',
    subject: `on "${plan.resource}" `,
  });
}

/**
 * For libraries whose raw SQL takes `?` placeholders (Knex, Sequelize's replacements): `$n` in
 * the order they occur, with the values repeated where a `$n` is.
 */
export function questionMarks(sql: string, params: readonly unknown[]): { sql: string; params: unknown[] } {
  const out: unknown[] = [];
  const text = sql.replace(/\$(\d+)/g, (_m, n: string) => {
    out.push(params[Number(n) - 1]);
    return '?';
  });
  return { sql: text, params: out };
}
