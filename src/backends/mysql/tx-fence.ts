/**
 * The MySQL/MariaDB fence inside a transaction a query builder opened (src/fence/<library>.ts
 * over Kysely's MysqlDialect, Knex's mysql2 client, Drizzle's mysql2 driver): the steps of
 * src/fence/engine.ts in InnoDB's SQL, the rule of ./fence.ts and ./term-fence.ts.
 *
 * Differences from fencedMysqlTransaction, each because the library owns the connection:
 * - No `idleTimeout`. MariaDB's idle_transaction_timeout and MySQL's wait_timeout are session
 *   settings; on a connection the library pools they would outlive this transaction and end the
 *   user's later ones. fencedMysqlTransaction sets and restores them; here it is refused.
 * - No autocommit guard: a `fn` that catches a deadlock (InnoDB rolled everything back) and goes
 *   on writes outside the fence, as it would in any transaction of that library.
 * - A clone's term is ended (after the rollback) by statements that may each run on another
 *   pooled connection: a compare-and-set UPDATE, with its history row written just before it
 *   under the same condition.
 */
import { ConfigError, FenceOwnedError, FencedError, SchemaError, StoreUnavailableError } from '../../core/errors.js';
import { leaseOf, type Lease } from '../../core/lease.js';
import { judge, ownerOf, type FenceDialect, type FenceExecute, type FencePlan, type TermFenceFailure, type TermFenceRequest, type TxFenceOptions } from '../term-fence.js';
import { isRetryableLockError } from './errors.js';
import { NOW_US, T } from './schema.js';
import { MysqlStore } from './store.js';
import { qualified } from './term-fence.js';

interface MysqlPlan extends FencePlan {
  table: string;
  tableLabel: string;
  /** With `term`: the lease store's database. */
  database: string | undefined;
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_$]{0,63}$/;
const MAX_BIGINT = 2n ** 63n - 1n;
const CLONE_DETAIL = 'two processes wrote with one term (a restored snapshot or a clone), seen by a fenced write';

/** The row's fence columns are this process's (as ./term-fence.ts); `expect` is a `$n`. */
function oursSql(first: boolean, expect: string): string {
  return `CASE WHEN fence_token IS NULL OR fence_token < token THEN ${first ? 1 : 0} ELSE COALESCE(FIND_IN_SET(fence_nonce, ${expect}) > 0, 0) END`;
}

async function leaseRow(exec: FenceExecute, leases: string, req: TermFenceRequest): Promise<Record<string, unknown> | undefined> {
  const rows = await exec(
    `SELECT holder, CAST(token AS CHAR) AS token, ended_by, COALESCE(expires_at_us > ${NOW_US}, 0) AS live, ${oursSql(req.first, '$1')} AS ours
       FROM ${leases} WHERE name = $2`,
    [req.expect.join(','), req.name],
  );
  return rows[0];
}

function judgeRow(row: Record<string, unknown> | undefined, req: TermFenceRequest): TermFenceFailure {
  if (row === undefined) return { kind: 'missing' };
  const holder = (row['holder'] as string | null) ?? null;
  const token = BigInt(String(row['token']));
  const live = Number(row['live']) === 1;
  const ours = Number(row['ours']) === 1;
  const conflict = holder === req.holder && token === req.token && live && !ours;
  return judge({ holder, token, endedBy: (row['ended_by'] as string | null) ?? null, live, ours, conflict }, req);
}

export const mysqlFenceDialect: FenceDialect<TxFenceOptions, MysqlPlan> = {
  plan(options) {
    const term = options.term;
    const token = options.token ?? term?.token;
    if (typeof token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token), or pass the term');
    if (token < -MAX_BIGINT - 1n || token > MAX_BIGINT) throw new ConfigError(`fence token ${token} does not fit a BIGINT`);
    if (term !== undefined && token !== term.token) throw new ConfigError(`token ${token} is not the token of the term passed with it (${term.token})`);
    const resource = options.resource;
    if (typeof resource !== 'string' || resource.length === 0 || [...resource].length > 200) throw new ConfigError('fence resource must be a string of 1-200 characters');
    if (options.idleTimeout !== undefined && options.idleTimeout !== false) {
      throw new ConfigError(
        "idleTimeout is a session setting on MySQL/MariaDB, and on the library's pooled connection it would outlive this transaction: " +
          'leave it out here, or use fencedMysqlTransaction from leasehold/fence (it sets and restores it) where a writer frozen in its transaction must be cut off',
      );
    }
    let lease: Lease | undefined;
    let database: string | undefined;
    if (term !== undefined) {
      lease = leaseOf(term);
      if (lease === undefined) throw new ConfigError('`term` must be a term this process acquired (from acquire(), onElected or runExclusive)');
      const store = lease.fenceStore;
      if (!(store instanceof MysqlStore)) {
        throw new ConfigError(
          `lease "${lease.name}" lives in a ${store.kind} store, not MySQL: \`term\` checks the lease in the transaction's own server. ` +
            'For a resource outside the lease store, pass `token` only (and use idempotency keys).',
        );
      }
      database = store.database;
    }
    const owner = ownerOf(options.lease, lease?.name);
    if (term?.signal.aborted) throw term.signal.reason as Error;
    let table: string;
    if (options.table === undefined) table = database === undefined ? `\`${T.fences}\`` : qualified(database, T.fences);
    else {
      const parts = options.table.split('.');
      if (parts.length > 2 || parts.some((p) => !IDENT.test(p))) throw new ConfigError(`fence table ${JSON.stringify(options.table)} is not [database.]table made of letters, digits, _ and $`);
      table = parts.map((p) => `\`${p}\``).join('.');
    }
    return { resource, token, owner, idleMs: undefined, term, lease, table, tableLabel: options.table ?? T.fences, database };
  },

  async advance(exec, plan) {
    const tok = plan.token.toString();
    const ok = plan.owner === undefined ? 'token <= VALUES(token)' : 'token <= VALUES(token) AND (lease IS NULL OR lease = VALUES(lease))';
    try {
      // As ./fence.ts: `lease` before `token`, which changes only when the condition holds.
      await exec(
        plan.owner === undefined
          ? `INSERT INTO ${plan.table} (resource, token, updated_at_us) VALUES ($1, ${tok}, ${NOW_US})
             ON DUPLICATE KEY UPDATE updated_at_us = IF(${ok}, VALUES(updated_at_us), updated_at_us), token = IF(${ok}, VALUES(token), token)`
          : `INSERT INTO ${plan.table} (resource, token, updated_at_us, lease) VALUES ($1, ${tok}, ${NOW_US}, $2)
             ON DUPLICATE KEY UPDATE updated_at_us = IF(${ok}, VALUES(updated_at_us), updated_at_us), lease = IF(${ok}, VALUES(lease), lease),
                                     token = IF(${ok}, VALUES(token), token)`,
        plan.owner === undefined ? [plan.resource] : [plan.resource, plan.owner],
      );
      // The row is locked by the advance: a plain read sees it, and fixes REPEATABLE READ's snapshot after the lock.
      const hw = await exec(`SELECT CAST(token AS CHAR) AS token${plan.owner === undefined ? '' : ', lease'} FROM ${plan.table} WHERE resource = $1`, [plan.resource]);
      const row = hw[0];
      const markOwner = row?.['lease'];
      if (plan.owner !== undefined && typeof markOwner === 'string' && markOwner !== plan.owner) throw new FenceOwnedError(plan.resource, plan.owner, markOwner);
      const mark = row === undefined ? null : BigInt(String(row['token']));
      if (mark !== plan.token) throw new FencedError(plan.resource, plan.token, mark);
    } catch (err) {
      const errno = (err as { errno?: unknown } | undefined)?.errno;
      if (errno === 1146 || errno === 1049) {
        throw new SchemaError(`fence table ${plan.tableLabel} does not exist; run \`leasehold migrate\` or createMysqlFenceTable()`, { cause: err });
      }
      if (errno === 1054 && plan.owner !== undefined) {
        throw new SchemaError(`fence table ${plan.tableLabel} has no \`lease\` column (created by an older leasehold): run \`leasehold migrate\` or createMysqlFenceTable(pool) once`, {
          cause: err,
        });
      }
      throw err;
    }
  },

  async rotate(exec, plan, req) {
    const tok = req.token.toString();
    await exec(
      `UPDATE ${qualified(plan.database!, T.leases)} SET fence_token = ${tok}, fence_nonce = $1
        WHERE name = $2 AND holder = $3 AND token = ${tok} AND expires_at_us > ${NOW_US} AND ${oursSql(req.first, '$4')}`,
      [req.next, req.name, req.holder, req.expect.join(',')],
    );
    // The same connection (the transaction's): the UPDATE's count. The new nonce always changes the row.
    const rows = await exec('SELECT ROW_COUNT() AS n', []);
    return Number(rows[0]?.['n']) === 1;
  },

  async classify(exec, plan, req) {
    const leases = qualified(plan.database!, T.leases);
    const tok = req.token.toString();
    const live = `name = $1 AND holder = $2 AND token = ${tok} AND expires_at_us > ${NOW_US} AND NOT (${oursSql(req.first, '$3')})`;
    await exec(
      `INSERT INTO ${qualified(plan.database!, T.history)} (name, event, holder, previous_holder, token, at_us, detail)
         SELECT name, 'conflict', NULL, holder, token, ${NOW_US}, $4 FROM ${leases} WHERE ${live}`,
      [req.name, req.holder, req.expect.join(','), CLONE_DETAIL],
    );
    await exec(`UPDATE ${leases} SET holder = NULL, nonce = NULL, expires_at_us = ${NOW_US}, ended_by = 'conflict' WHERE ${live}`, [
      req.name,
      req.holder,
      req.expect.join(','),
    ]);
    return judgeRow(await leaseRow(exec, leases, req), req);
  },

  async judgeInside(exec, plan, req) {
    return judgeRow(await leaseRow(exec, qualified(plan.database!, T.leases), req), req);
  },

  mapError(err, plan) {
    if (isRetryableLockError(err)) {
      return new StoreUnavailableError(`a lock conflict ended the fenced transaction on "${plan.resource}" (${(err as Error).message}): nothing was committed; retry it`, {
        cause: err,
      });
    }
    return err;
  },
};
