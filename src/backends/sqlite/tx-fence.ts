/**
 * The SQLite fence inside a transaction a query builder opened (src/fence/<library>.ts over
 * Kysely's SqliteDialect, Knex's better-sqlite3 client): the same steps as the PostgreSQL one
 * (src/fence/engine.ts), in SQLite's SQL. Every statement answers rows (RETURNING), since some
 * libraries run a statement that answers none through a call that fails on it.
 *
 * SQLite has no server to end a transaction left idle: a writer frozen inside one (SIGSTOP, a
 * paused VM) keeps the file's write lock until it resumes or dies, and every other writer's
 * transaction fails with SQLITE_BUSY after its busy timeout meanwhile. So there is no
 * `idleTimeout` here; it is refused rather than silently ignored.
 */
import { realpathSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError, StoreUnavailableError } from '../../core/errors.js';
import { leaseOf, type Lease } from '../../core/lease.js';
import { judge, ownerOf, type FenceDialect, type FencePlan, type TermFenceFailure, type TermFenceRequest, type TxFenceOptions } from '../term-fence.js';
import { isBusy } from './errors.js';
import { sqliteAdvanceSql, sqliteRefusal, sqliteSchemaError } from './fence.js';
import { SqliteStore } from './store.js';

interface SqlitePlan extends FencePlan {
  table: string;
  tableLabel: string;
  /** With `term`: the lease store's file, which the transaction's database must be. */
  file: string | undefined;
}

const LEASES = 'leasehold_leases';
const HISTORY = 'leasehold_history';
const CLONE_DETAIL = 'two processes wrote with one term (a restored snapshot or a clone), seen by a fenced write';

function canonical(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

/** Whether the lease row was this process's to write with: the same rule as ./term-fence.ts. `expect` is a `$n`. */
function oursSql(first: boolean, expect: string): string {
  return `CASE WHEN fence_token IS NULL OR fence_token < token THEN ${first ? 1 : 0} ELSE coalesce(fence_nonce IN (SELECT value FROM json_each(${expect})), 0) END`;
}

function judgeRow(row: Record<string, unknown> | undefined, req: TermFenceRequest, conflict: boolean): TermFenceFailure {
  if (row === undefined) return { kind: 'missing' };
  const holder = (row['holder'] as string | null) ?? null;
  const token = BigInt(row['token'] as string);
  const live = Number(row['live']) === 1;
  const ours = Number(row['ours']) === 1;
  const clone = conflict || (holder === req.holder && token === req.token && live && !ours);
  return judge({ holder, token, endedBy: (row['ended_by'] as string | null) ?? null, live, ours, conflict: clone }, req);
}

export const sqliteFenceDialect: FenceDialect<TxFenceOptions, SqlitePlan> = {
  plan(options) {
    const term = options.term;
    const token = options.token ?? term?.token;
    if (typeof token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token), or pass the term');
    if (term !== undefined && token !== term.token) throw new ConfigError(`token ${token} is not the token of the term passed with it (${term.token})`);
    if (typeof options.resource !== 'string' || options.resource.length === 0) throw new ConfigError('fence resource must be a non-empty string');
    if (options.idleTimeout !== undefined && options.idleTimeout !== false) {
      throw new ConfigError(
        'SQLite has no idleTimeout: no server can end a transaction left idle, so a writer frozen inside one keeps the write lock until it resumes or dies. Leave idleTimeout out on SQLite',
      );
    }
    let lease: Lease | undefined;
    let file: string | undefined;
    if (term !== undefined) {
      lease = leaseOf(term);
      if (lease === undefined) throw new ConfigError('`term` must be a term this process acquired (from acquire(), onElected or runExclusive)');
      const store = lease.fenceStore;
      if (!(store instanceof SqliteStore)) {
        throw new ConfigError(
          `lease "${lease.name}" lives in a ${store.kind} store, not SQLite: \`term\` checks the lease in the transaction's own database. ` +
            'For a resource outside the lease store, pass `token` only (and use idempotency keys).',
        );
      }
      file = store.path;
    }
    const owner = ownerOf(options.lease, lease?.name);
    if (term?.signal.aborted) throw term.signal.reason as Error;
    const tableLabel = options.table ?? 'leasehold_fences';
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(tableLabel)) throw new ConfigError(`fence table ${JSON.stringify(tableLabel)} is not a plain identifier`);
    return { resource: options.resource, token, owner, idleMs: undefined, term, lease, table: `"${tableLabel}"`, tableLabel, file };
  },

  async advance(exec, plan) {
    try {
      if (plan.file !== undefined) {
        const main = (await exec('SELECT file FROM pragma_database_list WHERE name = $1', ['main']))[0]?.['file'];
        if (typeof main !== 'string' || main === '' || canonical(main) !== canonical(plan.file)) {
          throw new ConfigError(`\`term\` needs the lease store's own SQLite file (${plan.file}), and this transaction is on ${main || 'an in-memory database'}`);
        }
      }
      const params = plan.owner === undefined ? [plan.resource, Date.now()] : [plan.resource, Date.now(), plan.owner];
      const rows = await exec(sqliteAdvanceSql(plan.table, plan.token, plan.owner !== undefined), params);
      if (rows.length > 0) return;
      const hw = await exec(`SELECT CAST(token AS TEXT) AS token${plan.owner === undefined ? '' : ', lease'} FROM ${plan.table} WHERE resource = $1`, [plan.resource]);
      throw sqliteRefusal(plan.resource, plan.token, plan.owner, hw[0]);
    } catch (err) {
      throw sqliteSchemaError(err, plan.tableLabel, plan.owner);
    }
  },

  async rotate(exec, _plan, req) {
    const tok = req.token.toString();
    const rows = await exec(
      `UPDATE ${LEASES} SET fence_token = ${tok}, fence_nonce = $1
        WHERE name = $2 AND holder = $3 AND token = ${tok} AND expires_at > $4 AND ${oursSql(req.first, '$5')}
       RETURNING 1 AS n`,
      [req.next, req.name, req.holder, Date.now(), JSON.stringify(req.expect)],
    );
    return rows.length === 1;
  },

  async classify(exec, _plan, req) {
    // After the rollback, outside it: end a clone's term (a compare-and-set, one statement), then say why.
    const tok = req.token.toString();
    const now = Date.now();
    const ended = await exec(
      `UPDATE ${LEASES} SET holder = NULL, nonce = NULL, expires_at = $1, ended_by = 'conflict'
        WHERE name = $2 AND holder = $3 AND token = ${tok} AND expires_at > $4 AND NOT (${oursSql(req.first, '$5')})
       RETURNING CAST(token AS TEXT) AS token`,
      [now, req.name, req.holder, now, JSON.stringify(req.expect)],
    );
    if (ended.length > 0) {
      await exec(
        `INSERT INTO ${HISTORY} (name, event, holder, previous_holder, token, at, detail) VALUES ($1, 'conflict', NULL, $2, ${tok}, $3, $4) RETURNING id`,
        [req.name, req.holder, now, CLONE_DETAIL],
      );
    }
    return judgeRow(await leaseRow(exec, req), req, ended.length > 0);
  },

  async judgeInside(exec, _plan, req) {
    return judgeRow(await leaseRow(exec, req), req, false);
  },

  mapError(err, plan) {
    if (isBusy(err)) {
      return new StoreUnavailableError(
        `the fenced transaction on "${plan.resource}" found the SQLite file's write lock held by another writer past the busy timeout (or frozen inside its transaction): nothing of it was committed; retry`,
        { cause: err },
      );
    }
    return err;
  },
};

async function leaseRow(exec: Parameters<FenceDialect<TxFenceOptions>['advance']>[0], req: TermFenceRequest): Promise<Record<string, unknown> | undefined> {
  const rows = await exec(
    `SELECT holder, CAST(token AS TEXT) AS token, ended_by, expires_at > $1 AS live, ${oursSql(req.first, '$2')} AS ours FROM ${LEASES} WHERE name = $3`,
    [Date.now(), JSON.stringify(req.expect), req.name],
  );
  return rows[0];
}
