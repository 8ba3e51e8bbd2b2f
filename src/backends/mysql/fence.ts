import { ConfigError, FenceOwnedError, FencedError, SchemaError, StoreUnavailableError } from '../../core/errors.js';
import { leaseOf, type Lease, type Term } from '../../core/lease.js';
import { parseDuration, type Duration } from '../../core/config.js';
import { isRetryableLockError, mapMysqlError } from './errors.js';
import { LOCK_RETRY_BUDGET_MS } from './batch.js';
import { NOW_US, T } from './schema.js';
import { MysqlStore } from './store.js';
import { ownerOf, refusedTermFence } from '../term-fence.js';
import { classifyFenceFailure, qualified, rotateFenceNonce, type Exec } from './term-fence.js';

export type MysqlFenceOptions = {
  /** What is being protected: one high-water mark per resource ("invoices", "tenant:42"), at most 200 characters. */
  resource: string;
  /**
   * The high-water-mark table, `[database.]table`. Default `leasehold_fences`, which `leasehold
   * migrate` creates in the store's database (in the connection's own database with `token`;
   * with `term`, in the lease store's database).
   */
  table?: string;
  /**
   * How long this transaction may sit idle between statements before the server ends it. The
   * mark's row stays locked until COMMIT, so a writer frozen inside `fn` (SIGSTOP, a paused VM)
   * would make every newer term's write wait for as long as the freeze lasts; past this bound
   * its connection is closed, InnoDB rolls it back, and the newer term goes ahead.
   *
   * MariaDB: `idle_transaction_timeout`, whole seconds (rounded up), set for this transaction only.
   * MySQL 8 has no per-transaction idle timeout; there the bound is the session's `wait_timeout`,
   * set for the duration of this transaction and restored after. `wait_timeout` ends any idle
   * session, in a transaction or not, which for those few seconds is the same thing.
   *
   * Default: with `term`, the lease's TTL (by then the frozen term has expired anyway); with
   * `token` only, no bound of ours. `false` for none. A duration string or milliseconds.
   */
  idleTimeout?: Duration | false;
  /**
   * The lease name this resource's mark belongs to (tokens of two lease names are not
   * comparable). With `term` it is the term's lease (and, if given, must match). The first write
   * naming a lease claims an unclaimed mark; a write under another name is refused with
   * FenceOwnedError. A write naming no lease (`token` only) is not checked: it cannot be.
   */
  lease?: string;
} & (
  | {
      /** The token of the term doing this write. */
      token: bigint;
      term?: Term;
    }
  | {
      /**
       * The term doing this write, when the resource lives on the lease store's own MySQL
       * server. The transaction then also checks, under the lease row's lock, that the term is
       * live in the store and that no other process has written with it (a snapshot restored
       * twice): of two processes holding one term, only one can ever commit. The other is
       * rolled back with `LeaseLostError` reason 'cloned' and its term ends.
       */
      term: Term;
      /** Optional with `term`; if given, it must be the term's. */
      token?: bigint;
    }
);

/** What the fence uses of a mysql2 connection with the callback API (`Connection`, `PoolConnection`). */
export interface MysqlCallbackConnectionLike {
  query(options: { sql: string; values?: unknown }, callback: (err: Error | null, result?: unknown) => void): unknown;
  /** Only the callback API has it: how the two are told apart. */
  promise(): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  removeListener(event: 'error', listener: (err: Error) => void): unknown;
}
/** A `mysql2/promise` connection: the callback connection it wraps is `connection`. */
export interface MysqlPromiseConnectionLike {
  /** Checked at run time: mysql2's typings name the promise class here. */
  connection: object;
}
/** A `mysql2` Pool (callback API). */
export interface MysqlCallbackPoolLike {
  getConnection(callback: (err: Error | null, connection: never) => void): void;
  promise(): unknown;
}
/** A `mysql2/promise` Pool (or `pool.promise()`). */
export interface MysqlPromisePoolLike {
  getConnection(): PromiseLike<object>;
}
interface Releasable {
  release(): void;
  destroy(): void;
}

/** A pool to check a connection out of, or a connection you hold (not inside a transaction). */
export type MysqlFenceTarget = MysqlCallbackPoolLike | MysqlPromisePoolLike | MysqlCallbackConnectionLike | MysqlPromiseConnectionLike;

/** What `fn` is given: a connection of the API you passed (the pool's kind of connection, or your connection itself). */
export type MysqlFenceConnection<P> = P extends { getConnection(): PromiseLike<infer C> }
  ? C
  : P extends { getConnection(callback: (err: Error | null, connection: infer C) => void): void }
    ? C
    : P;

const IDENT = /^[A-Za-z_][A-Za-z0-9_$]{0,63}$/;

function fenceTableName(table: string | undefined, database: string | undefined): string {
  if (table === undefined) return database === undefined ? `\`${T.fences}\`` : qualified(database, T.fences);
  const parts = table.split('.');
  if (parts.length > 2 || parts.some((p) => !IDENT.test(p))) {
    throw new ConfigError(`fence table ${JSON.stringify(table)} is not [database.]table made of letters, digits, _ and $`);
  }
  return parts.map((p) => `\`${p}\``).join('.');
}

function isPool(t: MysqlFenceTarget): t is MysqlCallbackPoolLike | MysqlPromisePoolLike {
  return typeof (t as { getConnection?: unknown }).getConnection === 'function';
}

function coreOf(conn: MysqlCallbackConnectionLike | MysqlPromiseConnectionLike): MysqlCallbackConnectionLike {
  if (typeof (conn as MysqlCallbackConnectionLike).promise === 'function') return conn as MysqlCallbackConnectionLike;
  const inner = (conn as MysqlPromiseConnectionLike).connection as MysqlCallbackConnectionLike | undefined;
  if (inner !== undefined && typeof inner.query === 'function' && typeof inner.promise === 'function') return inner;
  throw new ConfigError('the fence target is not a mysql2 Pool or connection (callback or mysql2/promise API)');
}

async function checkOut(pool: MysqlCallbackPoolLike | MysqlPromisePoolLike): Promise<(MysqlCallbackConnectionLike | MysqlPromiseConnectionLike) & Releasable> {
  if (typeof (pool as MysqlCallbackPoolLike).promise === 'function') {
    return new Promise((resolve, reject) => {
      (pool as MysqlCallbackPoolLike).getConnection((err, c) => (err === null ? resolve(c as Releasable & MysqlCallbackConnectionLike) : reject(err)));
    });
  }
  return (await (pool as MysqlPromisePoolLike).getConnection()) as MysqlPromiseConnectionLike & Releasable;
}

function execOn(core: MysqlCallbackConnectionLike): Exec {
  return (sql, values) =>
    new Promise((resolve, reject) => {
      core.query({ sql, values }, (err, result) => (err === null ? resolve(result) : reject(err)));
    });
}

/** Creates a fence table on the resource's own server, if the lease store lives elsewhere. */
export async function createMysqlFenceTable(target: MysqlFenceTarget, table?: string): Promise<void> {
  const t = fenceTableName(table, undefined);
  const conn = isPool(target) ? await checkOut(target) : target;
  try {
    await execOn(coreOf(conn))(
      `CREATE TABLE IF NOT EXISTS ${t} (
        resource      VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        token         BIGINT NOT NULL,
        updated_at_us BIGINT NOT NULL,
        lease         VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        PRIMARY KEY (resource)
      ) ENGINE = InnoDB`,
    );
    // A table an older leasehold created has no `lease` column (MySQL 8 has no ADD COLUMN IF NOT EXISTS).
    await execOn(coreOf(conn))(`ALTER TABLE ${t} ADD COLUMN lease VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL`).catch((err: unknown) => {
      if ((err as { errno?: unknown }).errno !== 1060) throw err; // duplicate column: already there
    });
  } finally {
    if (conn !== target) (conn as unknown as Releasable).release();
  }
}

/** The lease a `term` option belongs to, and the database its row lives in. */
function sameServer(term: Term): { lease: Lease; database: string } {
  const lease = leaseOf(term);
  if (lease === undefined) throw new ConfigError('`term` must be a term this process acquired (from acquire(), onElected or runExclusive)');
  const store = lease.fenceStore;
  if (!(store instanceof MysqlStore)) {
    throw new ConfigError(
      `lease "${lease.name}" lives in a ${store.kind} store, not MySQL: \`term\` checks the lease in the transaction's own server. ` +
        'For a resource outside the lease store, pass `token` only (and use idempotency keys).',
    );
  }
  return { lease, database: store.database };
}

/** The idle bound in whole seconds (the unit of both servers' settings), or undefined for none of ours. */
function idleSeconds(option: Duration | false | undefined, term: Term | undefined): number | undefined {
  if (option === false) return undefined;
  const ms = option === undefined ? (term === undefined ? undefined : leaseOf(term)?.timing.ttlMs) : parseDuration(option, 'idleTimeout');
  if (ms === undefined) return undefined;
  if (ms < 1) throw new ConfigError('idleTimeout must be at least 1ms; pass false for no bound');
  return Math.ceil(ms / 1000);
}

/** MariaDB or MySQL, asked once per connection (a pooled connection serves many transactions). */
const mariadbByConnection = new WeakMap<object, boolean>();
async function isMariadb(core: MysqlCallbackConnectionLike, exec: Exec): Promise<boolean> {
  let known = mariadbByConnection.get(core);
  if (known === undefined) {
    const rows = (await exec('SELECT VERSION() AS v')) as { v: string }[];
    known = /mariadb/i.test(String(rows[0]?.v));
    mariadbByConnection.set(core, known);
  }
  return known;
}

/**
 * The session settings of a fenced transaction and how to put them back. autocommit is off for
 * the transaction: InnoDB rolls the whole transaction back on a deadlock, and a `fn` that
 * caught that error and went on would otherwise write in autocommit mode, unfenced and at once.
 * With autocommit off those writes land in a new transaction that the savepoint check refuses.
 * The old values wait in user variables, read in the same SET before anything changes.
 */
function sessionSql(idle: { seconds: number; variable: string } | undefined): { set: string; restore: string } {
  if (idle === undefined) {
    return { set: 'SET @leasehold_fence_ac = @@SESSION.autocommit, autocommit = 0', restore: 'SET autocommit = @leasehold_fence_ac' };
  }
  const v = idle.variable;
  return {
    set: `SET @leasehold_fence_ac = @@SESSION.autocommit, @leasehold_fence_idle = @@SESSION.${v}, autocommit = 0, SESSION ${v} = ${idle.seconds}`,
    restore: `SET autocommit = @leasehold_fence_ac, SESSION ${v} = @leasehold_fence_idle`,
  };
}

/** Lock conflicts on the mark's row are retried this often, and only before `fn` has run. */
const LOCK_RETRIES = 5;
const SAVEPOINT = 'leasehold_fence';
const MAX_BIGINT = 2n ** 63n - 1n;

/**
 * Runs `fn` inside one transaction that first advances the resource's high-water mark to
 * `token`, refusing if the mark is already higher. The mark's row stays locked until COMMIT,
 * so an older term's transaction waits and then fails; it never interleaves with a newer one.
 * `target` is a `mysql2` or `mysql2/promise` Pool (a connection is checked out and given back),
 * or a connection you hold; `fn` gets a connection of the same API. Do not COMMIT or ROLLBACK
 * inside `fn`.
 *
 * With `term` (the resource is on the lease store's server), the transaction's last step, after
 * `fn`, checks the lease row and swaps its fence nonce (./term-fence.ts).
 *
 * InnoDB deadlocks and lock-wait timeouts while taking the mark are retried (nothing of `fn` has
 * run); one inside `fn`, or after it, rolls everything back and is a `StoreUnavailableError`.
 *
 * @throws {FencedError} a newer term has written: rolled back, zero rows changed.
 * @throws {LeaseLostError} (with `term`) the term is over, in this process or in the store; reason
 *   'cloned' when another process wrote with the same term. Rolled back; the term's signal aborts.
 * @throws {SchemaError} the fence table is missing.
 * @throws {StoreUnavailableError} the connection was lost (on MariaDB, also when the transaction sat
 *   idle past `idleTimeout`) or a lock conflict ended the transaction: nothing was committed.
 */
export async function fencedMysqlTransaction<T, P extends MysqlFenceTarget>(
  target: P,
  options: MysqlFenceOptions,
  fn: (tx: MysqlFenceConnection<P>) => Promise<T>,
): Promise<T> {
  const term = options.term;
  const token = options.token ?? term?.token;
  if (typeof token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token), or pass the term');
  if (token < -MAX_BIGINT - 1n || token > MAX_BIGINT) throw new ConfigError(`fence token ${token} does not fit a BIGINT`);
  if (term !== undefined && token !== term.token) throw new ConfigError(`token ${token} is not the token of the term passed with it (${term.token})`);
  const resource = options.resource;
  // A longer value would be cut to the column's 200 characters where strict mode is off, and two resources would share a mark.
  if (typeof resource !== 'string' || resource.length === 0 || [...resource].length > 200) {
    throw new ConfigError('fence resource must be a string of 1-200 characters');
  }
  const same = term === undefined ? undefined : sameServer(term);
  const owner = ownerOf(options.lease, same?.lease.name);
  if (term?.signal.aborted) throw term.signal.reason as Error;
  const table = fenceTableName(options.table, same?.database);
  const idle = idleSeconds(options.idleTimeout, term);

  const pooled = isPool(target);
  let conn: MysqlCallbackConnectionLike | MysqlPromiseConnectionLike;
  try {
    conn = pooled ? await checkOut(target) : (target as MysqlCallbackConnectionLike | MysqlPromiseConnectionLike);
  } catch (err) {
    throw mapMysqlError(err, 'the fence');
  }
  const core = coreOf(conn);
  const exec = execOn(core);
  const database = same?.database ?? String((core as { config?: { database?: unknown } }).config?.database ?? '?');
  let broken: Error | undefined;
  // The server may close the connection while no statement is in flight (the idle bound, a
  // restart): mysql2 then emits 'error' on the connection, which with no listener would crash
  // the process. Listening for the transaction turns it into this call's error.
  const onError = (err: Error): void => {
    broken ??= err;
  };
  core.on('error', onError);
  let session: { set: string; restore: string } | undefined;
  let open = false;
  let commitSent = false;
  let restored = false;
  /** fn's own errors reach the caller as they are; leasehold's statements' are mapped. */
  let fromFn = false;
  try {
    const variable = idle === undefined ? undefined : (await isMariadb(core, exec)) ? 'idle_transaction_timeout' : 'wait_timeout';
    session = sessionSql(variable === undefined ? undefined : { seconds: idle!, variable });
    await exec(session.set).catch((err: unknown) => {
      if ((err as { errno?: unknown }).errno === 1193) {
        throw new ConfigError(`this server has no ${variable ?? 'such setting'} (MariaDB 10.3 or later has idle_transaction_timeout); pass idleTimeout: false`, { cause: err });
      }
      throw err;
    });
    open = true;
    await advanceMark(exec, table, options.table, resource, token, term, owner);
    // Not FOR UPDATE: the mark's row is already ours (locked by the advance). A plain read
    // also fixes REPEATABLE READ's snapshot here, after the lock, so `fn` sees what the
    // previous writer of this resource committed.
    const hw = (await exec(`SELECT CAST(token AS CHAR) AS token${owner === undefined ? '' : ', lease'} FROM ${table} WHERE resource = ?`, [resource])) as {
      token: string;
      lease?: string | null;
    }[];
    const mark = hw[0] === undefined ? null : BigInt(hw[0].token);
    const markOwner = hw[0]?.lease;
    if (owner !== undefined && typeof markOwner === 'string' && markOwner !== owner) {
      open = false;
      await exec('ROLLBACK');
      throw new FenceOwnedError(resource, owner, markOwner);
    }
    if (mark !== token) {
      open = false;
      await exec('ROLLBACK');
      throw new FencedError(resource, token, mark);
    }
    await exec(`SAVEPOINT ${SAVEPOINT}`);
    let result: T;
    try {
      result = await fn(conn as MysqlFenceConnection<P>);
    } catch (err) {
      fromFn = true;
      if (broken === undefined && isRetryableLockError(err)) {
        throw new StoreUnavailableError(
          `a lock conflict inside the fenced transaction on "${resource}" (${(err as Error).message}) rolled it back; nothing was committed and fn was not retried`,
          { cause: err },
        );
      }
      throw err;
    }
    try {
      await exec(`RELEASE SAVEPOINT ${SAVEPOINT}`);
    } catch (err) {
      if ((err as { errno?: unknown }).errno !== 1305) throw err;
      // The transaction that took the mark is gone: InnoDB rolled it back inside fn (a
      // deadlock, or a lock-wait timeout with innodb_rollback_on_timeout), or fn ended it.
      throw new StoreUnavailableError(
        `the fenced transaction on "${resource}" was rolled back inside fn (a deadlock or lock-wait timeout fn caught, or a COMMIT/ROLLBACK in fn); ` +
          'nothing after it was committed: retry the unit of work',
        { cause: err },
      );
    }
    if (same !== undefined && term !== undefined) {
      await commitAsTerm(exec, same, term, () => {
        commitSent = true;
      });
    } else {
      commitSent = true;
      await exec('COMMIT');
    }
    open = false;
    await exec(session.restore);
    restored = true;
    return result;
  } catch (err) {
    if ((err as { fatal?: unknown } | undefined)?.fatal === true) broken ??= err as Error;
    if (open && broken === undefined) {
      await exec('ROLLBACK').catch((e: unknown) => {
        broken ??= e as Error;
      });
    }
    if (session !== undefined && !restored && broken === undefined) {
      restored = await exec(session.restore).then(
        () => true,
        () => false,
      );
    }
    if (broken !== undefined && !(err instanceof FencedError) && !(err instanceof FenceOwnedError)) {
      throw new StoreUnavailableError(
        `the connection of the fenced transaction on "${resource}" was lost ${commitSent ? 'during its COMMIT: whether it committed is unknown' : 'before its COMMIT: nothing was committed'}` +
          (idle === undefined ? '' : ` (with idleTimeout ${idle}s the server ends a transaction left idle that long, usually because this process was frozen inside it)`),
        { cause: broken },
      );
    }
    throw fromFn ? err : mapMysqlError(err, database);
  } finally {
    core.removeListener('error', onError);
    // A connection whose session could not be put back (or that broke) does not go back to the pool.
    if (pooled) {
      const c = conn as unknown as Releasable;
      if (broken !== undefined || (session !== undefined && !restored)) c.destroy();
      else c.release();
    }
  }
}

/**
 * Advances the mark to `token` unless it is higher, locking its row until the transaction ends.
 * VALUES() and not MySQL 8's row alias: MariaDB has no alias. updated_at_us first: assignments
 * run left to right and see the new `token`.
 */
async function advanceMark(
  exec: Exec,
  table: string,
  tableOption: string | undefined,
  resource: string,
  token: bigint,
  term: Term | undefined,
  owner: string | undefined,
): Promise<void> {
  const started = performance.now();
  // With an owner, the mark moves only if it is unclaimed or this lease's, and is claimed by it.
  // `lease` before `token`: it changes only when the condition holds, which it then still does.
  const ok = owner === undefined ? 'token <= VALUES(token)' : 'token <= VALUES(token) AND (lease IS NULL OR lease = VALUES(lease))';
  const sql =
    owner === undefined
      ? `INSERT INTO ${table} (resource, token, updated_at_us) VALUES (?, ${token}, ${NOW_US})
         ON DUPLICATE KEY UPDATE updated_at_us = IF(${ok}, VALUES(updated_at_us), updated_at_us),
                                 token = IF(${ok}, VALUES(token), token)`
      : `INSERT INTO ${table} (resource, token, updated_at_us, lease) VALUES (?, ${token}, ${NOW_US}, ?)
         ON DUPLICATE KEY UPDATE updated_at_us = IF(${ok}, VALUES(updated_at_us), updated_at_us),
                                 lease = IF(${ok}, VALUES(lease), lease),
                                 token = IF(${ok}, VALUES(token), token)`;
  for (let attempt = 1; ; attempt++) {
    try {
      await exec(sql, owner === undefined ? [resource] : [resource, owner]);
      return;
    } catch (err) {
      const errno = (err as { errno?: unknown }).errno;
      if (errno === 1146 || errno === 1049) {
        throw new SchemaError(`fence table ${tableOption ?? T.fences} does not exist; run \`leasehold migrate\` or createMysqlFenceTable()`, { cause: err });
      }
      if (errno === 1054 && owner !== undefined) {
        throw new SchemaError(
          `fence table ${tableOption ?? T.fences} has no \`lease\` column (created by an older leasehold): run \`leasehold migrate\` (the store's own table) or createMysqlFenceTable(pool${tableOption === undefined ? '' : `, ${JSON.stringify(tableOption)}`}) once`,
          { cause: err },
        );
      }
      // The first statement of the transaction: a deadlock or a lock-wait timeout here left
      // nothing of fn's behind, so it is safe to roll back and take the mark again.
      if (!isRetryableLockError(err) || attempt >= LOCK_RETRIES || performance.now() - started > LOCK_RETRY_BUDGET_MS || term?.signal.aborted === true) throw err;
      await exec('ROLLBACK');
      await new Promise((r) => setTimeout(r, Math.min(200, 10 * 2 ** attempt) * Math.random()));
    }
  }
}

/**
 * The last step of a fenced transaction with `term`: swap the lease row's fence nonce, then
 * COMMIT. The swap waits for this process's previous fenced write of the term to settle, so
 * this process's nonces reach the row in the order it issued them. Unlike PostgreSQL's one
 * round trip, the UPDATE and the COMMIT are two: a failure of the UPDATE is known to have
 * committed nothing (autocommit is off), and only a failed COMMIT leaves the outcome unknown.
 */
async function commitAsTerm(exec: Exec, same: { lease: Lease; database: string }, term: Term, committing: () => void): Promise<void> {
  const w = await same.lease.fenceWrite(term);
  try {
    let ours: boolean;
    try {
      ours = await rotateFenceNonce(exec, same.database, w);
    } catch (err) {
      w.settle('not-written');
      throw err;
    }
    if (!ours) {
      await exec('ROLLBACK');
      w.settle('not-written');
      const now = same.lease.fenceExpected(term);
      const why = await classifyFenceFailure(exec, same.database, { ...w, expect: now.expect, first: now.first }).catch((err: unknown) =>
        Promise.reject(mapMysqlError(err, same.database)),
      );
      throw refusedTermFence(why, same.lease, term, {
        missing: `database "${same.database}" of the server this transaction ran on; pass \`term\` only when the resource is on the lease store's own server`,
        what: 'transaction',
      });
    }
    committing();
    try {
      await exec('COMMIT');
    } catch (err) {
      w.settle('unknown');
      throw err;
    }
    w.settle('written');
  } finally {
    w.settle('not-written'); // no-op once settled
  }
}
