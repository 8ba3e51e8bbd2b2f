import { ConfigError, FenceOwnedError, FencedError, SchemaError, StoreUnavailableError } from '../../core/errors.js';
import { leaseOf, type Lease, type Term } from '../../core/lease.js';
import { parseDuration, type Duration } from '../../core/config.js';
import { mapPgError } from './errors.js';
import { PostgresStore, type PgPoolLike, type PgQueryableLike, type PgResultLike } from './store.js';
import { classifyFenceFailure, fenceFunctions, rotateFenceNonceAndCommit, sqlLiteral, type FenceFunctions } from './term-fence.js';
import { judge, ownerOf, refusedTermFence, type FenceDialect, type FencePlan, type TermFenceFailure, type TermFenceRequest } from '../term-fence.js';
import { validateSchemaName } from './schema.js';

export type PgFenceOptions = {
  /** What is being protected: one high-water mark per resource ("invoices", "tenant:42"). */
  resource: string;
  /**
   * The high-water-mark table, `schema.table`. Default `leasehold.fences`, created by
   * `leasehold migrate` in the store's schema: with a store URL `?schema=x`, pass `x.fences`
   * (with `term`, the default is the lease store's own schema).
   */
  table?: string;
  /**
   * How long this transaction may sit idle between statements before PostgreSQL rolls it back
   * (`idle_in_transaction_session_timeout`, set for this transaction only). The fence row stays
   * locked until commit, so a writer frozen mid-transaction (SIGSTOP, a paused VM, a long GC)
   * would make every newer term's write wait for as long as the freeze lasts; past this bound
   * the frozen transaction is ended, its connection closed, and the newer term goes ahead.
   * Default: with `term`, the lease's TTL (by then the frozen term has expired anyway); with
   * `token` only, no bound of ours. `false` for none. A duration string or milliseconds.
   */
  idleTimeout?: Duration | false;
  /**
   * The lease name this resource's mark belongs to (tokens of two lease names are not
   * comparable). With `term` it is the term's lease (and, if given, must match). The first write
   * that names a lease claims an unclaimed mark (a mark written before schema version 9, or only
   * by writes naming no lease); a write under another name is refused with FenceOwnedError,
   * which names both. A write naming no lease (`token` only, no `lease`) is not checked: it cannot be.
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
       * The term doing this write, when the resource lives in the lease store's own PostgreSQL
       * database. The transaction then also checks, under the lease row's lock, that the term is
       * live in the store and that no other process has written with it (a snapshot restored
       * twice): of two processes holding one term, only one can ever commit. The other is
       * rolled back with `LeaseLostError` reason 'cloned' and its term ends.
       */
      term: Term;
      /** Optional with `term`; if given, it must be the term's. */
      token?: bigint;
    }
);

/** A pool to check a connection out of, or a client you already hold (not inside a transaction). */
export type PgFenceTarget = PgPoolLike | PgQueryableLike;

/**
 * A pool hands out clients; a client (pg.Client, or a PoolClient you checked out) is used as
 * is. Both have `connect`, so tell them apart by what only clients have.
 */
function isPool(target: PgFenceTarget): target is PgPoolLike {
  const t = target as unknown as Record<string, unknown>;
  const clientLike = typeof t['release'] === 'function' || 'processID' in t || 'connection' in t;
  return !clientLike && typeof t['connect'] === 'function';
}

function fenceTableName(table = 'leasehold.fences'): string {
  const parts = table.split('.');
  if (parts.length > 2 || parts.some((p) => !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(p))) {
    throw new ConfigError(`fence table ${JSON.stringify(table)} is not [schema.]table made of letters, digits and _`);
  }
  return parts.map((p) => `"${p}"`).join('.');
}

/** Creates a fence table in the resource's own database, if the lease store lives elsewhere. */
export async function createPgFenceTable(db: PgQueryableLike, table = 'leasehold.fences'): Promise<void> {
  const t = fenceTableName(table);
  const parts = table.split('.');
  if (parts.length === 2) await db.query(`CREATE SCHEMA IF NOT EXISTS "${parts[0]}"`);
  await db.query(
    `CREATE TABLE IF NOT EXISTS ${t} (resource text PRIMARY KEY, token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
  );
  // The lease a mark belongs to (src/fence adapters, issue 26): nullable, so a table created by
  // an older version keeps working for writes that name no lease; running this again adds it.
  await db.query(`ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS lease text`);
}

/** The lease a `term` option belongs to, the schema its row lives in, and its store. */
function sameDatabase(term: Term): { lease: Lease; schema: string; store: PostgresStore } {
  const lease = leaseOf(term);
  if (lease === undefined) throw new ConfigError('`term` must be a term this process acquired (from acquire(), onElected or runExclusive)');
  const store = lease.fenceStore;
  if (!(store instanceof PostgresStore)) {
    throw new ConfigError(
      `lease "${lease.name}" lives in a ${store.kind} store, not PostgreSQL: \`term\` checks the lease in the transaction's own database. ` +
        'For a resource outside the lease store, pass `token` only (and use idempotency keys).',
    );
  }
  return { lease, schema: store.schema, store };
}

/** Which of the fence's functions the store's schema has: migration 16's lease-row check, 21's mark advance (./term-fence.ts). */
function storeFunctions(same: { schema: string; store: PostgresStore }): Promise<FenceFunctions> {
  return fenceFunctions(same.store, same.schema, (text, values) => same.store.fleetQuery(text, values));
}

/** idle_in_transaction_session_timeout's FATAL (SQLSTATE 25P03). */
function endedIdle(err: unknown): boolean {
  return (err as { code?: unknown } | undefined)?.code === '25P03';
}

/** The idle-in-transaction bound in ms, or undefined for none of ours (PostgreSQL's 0 would mean "none" too). */
function idleBound(option: Duration | false | undefined, term: Term | undefined): number | undefined {
  if (option === false) return undefined;
  if (option === undefined) return term === undefined ? undefined : leaseOf(term)?.timing.ttlMs;
  const ms = parseDuration(option, 'idleTimeout');
  if (ms < 1) throw new ConfigError('idleTimeout must be at least 1ms; pass false for no bound');
  return ms;
}

/**
 * Runs `fn` inside one transaction that first advances the resource's high-water mark to
 * `token`, refusing if the mark is already higher. The mark's row stays locked until commit,
 * so an older term's transaction waits and then fails; it never interleaves with a newer one.
 *
 * With `term` (the resource is in the lease store's database), the transaction's last step,
 * after `fn`, checks the lease row and swaps its fence nonce (see backends/postgres/term-fence.ts).
 *
 * @throws {FencedError} a newer term has written: the transaction was rolled back, zero rows changed.
 * @throws {LeaseLostError} (with `term`) the term is over, in this process or in the store; reason
 *   'cloned' when another process wrote with the same term. Rolled back; the term's signal aborts.
 * @throws {SchemaError} the fence table is missing.
 * @throws {StoreUnavailableError} the transaction sat idle past `idleTimeout` and PostgreSQL
 *   ended it (nothing committed).
 */
export async function fencedTransaction<T>(
  target: PgFenceTarget,
  options: PgFenceOptions,
  fn: (tx: PgQueryableLike) => Promise<T>,
): Promise<T> {
  const term = options.term;
  const token = options.token ?? term?.token;
  if (typeof token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token), or pass the term');
  if (term !== undefined && token !== term.token) throw new ConfigError(`token ${token} is not the token of the term passed with it (${term.token})`);
  const same = term === undefined ? undefined : sameDatabase(term);
  const owner = ownerOf(options.lease, same?.lease.name);
  if (term?.signal.aborted) throw term.signal.reason as Error;
  const tableOption = options.table ?? (same === undefined ? undefined : `${same.schema}.fences`);
  const table = fenceTableName(tableOption);
  const idleMs = idleBound(options.idleTimeout, term);
  // Asked of the store before the transaction opens (once per store; then already answered).
  const asked = same === undefined ? undefined : storeFunctions(same);
  const pooled = isPool(target);
  const client: PgQueryableLike = pooled ? await target.connect().catch((err: unknown) => Promise.reject(mapPgError(err, 'fence'))) : target;
  const fns = await asked;
  let broken: Error | undefined;
  // A pooled client has no 'error' listener of its own while checked out: if the server drops
  // the connection mid-transaction, an unhandled 'error' event would crash the process. The
  // query in flight rejects anyway; remember the client is broken so the pool discards it.
  const onError = (err: Error): void => {
    broken ??= err; // the first says why (a FATAL with its SQLSTATE); "Connection terminated" follows
  };
  // With an idle bound the server may end the session itself (a process frozen mid-transaction,
  // resumed): listen on a client you hold too, for the transaction only, so that ending arrives
  // as this call's typed error and not as an unhandled 'error' event.
  const emitter =
    pooled || idleMs !== undefined
      ? (client as unknown as { on?(e: 'error', l: (err: Error) => void): unknown; off?(e: 'error', l: (err: Error) => void): unknown })
      : undefined;
  emitter?.on?.('error', onError);
  let open = false;
  try {
    // One round trip: BEGIN (and the idle bound) and the mark's advance, as one simple query,
    // which carries no parameters (the resource goes in as a literal). Open from here: if the
    // advance fails, BEGIN has run and the transaction is aborted, for the catch to roll back.
    const begin = idleMs === undefined ? 'BEGIN' : `BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${idleMs}`;
    open = true;
    let advanced: PgResultLike;
    try {
      // The store's own mark table, on a schema with migration 21: the advance's plan is kept.
      const advance = advanceStatement(fns, options.table === undefined ? same?.schema : undefined, table, sqlLiteral(options.resource), token, owner === undefined ? undefined : sqlLiteral(owner));
      const results = (await client.query(`${begin};\n         ${advance}`)) as PgResultLike | PgResultLike[];
      advanced = Array.isArray(results) ? results[results.length - 1]! : results;
    } catch (err) {
      throw fenceSchemaError(err, tableOption ?? 'leasehold.fences', owner);
    }
    if (advanced.rows.length === 0) {
      const hw = await client.query(`SELECT token::text AS token${owner === undefined ? '' : ', lease'} FROM ${table} WHERE resource = $1`, [options.resource]);
      open = false;
      await client.query('ROLLBACK');
      throw refusedMark(options.resource, token, owner, hw.rows[0]);
    }
    const result = await fn(client);
    if (same !== undefined && term !== undefined) {
      await commitAsTerm(client, same, term, fns?.rotate === true, () => {
        open = false;
      });
    } else {
      await client.query('COMMIT');
    }
    return result;
  } catch (err) {
    if (open) {
      await client.query('ROLLBACK').catch((e: unknown) => {
        broken ??= e as Error;
      });
    }
    if (idleMs !== undefined && endedIdle(broken ?? err)) {
      throw new StoreUnavailableError(
        `PostgreSQL ended the fenced transaction on "${options.resource}" after it sat idle for ${idleMs}ms (idleTimeout), ` +
          'usually because this process was frozen mid-transaction: nothing was committed; retry with a live term',
        { cause: broken ?? err },
      );
    }
    throw err;
  } finally {
    emitter?.off?.('error', onError);
    if (pooled) (client as unknown as { release(err?: Error): void }).release(broken);
  }
}

/**
 * The last step of a fenced transaction with `term`: swap the lease row's fence nonce and
 * COMMIT, in one round trip (./term-fence.ts). The swap waits for this process's previous fenced write of the term to settle, so
 * this process's nonces reach the row in the order it issued them.
 */
async function commitAsTerm(client: PgQueryableLike, same: { lease: Lease; schema: string }, term: Term, cached: boolean, closed: () => void): Promise<void> {
  const w = await same.lease.fenceWrite(term);
  try {
    let committed: boolean;
    try {
      committed = await rotateFenceNonceAndCommit(client, same.schema, w, cached);
    } catch (err) {
      // The UPDATE or the COMMIT failed: which one, and so whether anything committed, is unknown.
      // The transaction may still be open (aborted): the caller's ROLLBACK ends it.
      w.settle('unknown');
      throw endedIdle(err) ? err : mapPgError(err, same.schema);
    }
    if (!committed) {
      await client.query('ROLLBACK');
      closed();
      w.settle('not-written');
      const now = same.lease.fenceExpected(term);
      const why = await classifyFenceFailure(client, same.schema, { ...w, expect: now.expect, first: now.first }).catch((err: unknown) =>
        Promise.reject(mapPgError(err, same.schema)),
      );
      throw refusedTermFence(why, same.lease, term, {
        missing: `schema "${same.schema}" of the database this transaction ran in; pass \`term\` only when the resource is in the lease store's own database`,
        what: 'transaction',
      });
    }
    closed();
    w.settle('written');
  } finally {
    w.settle('not-written'); // no-op once settled: an error before the COMMIT left nothing written
  }
}

/** The options of a fence inside a transaction your ORM opened (src/fence/<library>.ts): the `pg` fence's. */
export type PgTxFenceOptions = PgFenceOptions;

interface PgPlan extends FencePlan {
  /** The quoted table, and the name the user knows it by. */
  table: string;
  tableLabel: string;
  /** With `term`: the lease store's schema, and which of the fence's functions it has (migrations 16 and 21). */
  schema: string | undefined;
  cached: Promise<FenceFunctions> | undefined;
  /** The mark is in the store's own fences table (no `table` given): migration 21's function can advance it. */
  ownTable: boolean;
}

const UNDEFINED_COLUMN = '42703';

/** The SQL of a fenced write inside a transaction someone else opened (src/fence/engine.ts runs it). */
export const pgFenceDialect: FenceDialect<PgTxFenceOptions, PgPlan> = {
  plan(options) {
    const term = options.term;
    const token = options.token ?? term?.token;
    if (typeof token !== 'bigint') throw new ConfigError('fence token must be a bigint (the lease token), or pass the term');
    if (term !== undefined && token !== term.token) throw new ConfigError(`token ${token} is not the token of the term passed with it (${term.token})`);
    if (typeof options.resource !== 'string' || options.resource.length === 0) throw new ConfigError('fence resource must be a non-empty string');
    const same = term === undefined ? undefined : sameDatabase(term);
    const owner = ownerOf(options.lease, same?.lease.name);
    if (term?.signal.aborted) throw term.signal.reason as Error;
    const tableLabel = options.table ?? (same === undefined ? 'leasehold.fences' : `${same.schema}.fences`);
    return {
      resource: options.resource,
      token,
      owner,
      idleMs: idleBound(options.idleTimeout, term),
      term,
      lease: same?.lease,
      table: fenceTableName(tableLabel),
      tableLabel,
      schema: same?.schema,
      // Asked before the library's transaction opens (once per store; then already answered).
      cached: same === undefined ? undefined : storeFunctions(same),
      ownTable: options.table === undefined,
    };
  },

  async advance(exec, plan) {
    try {
      if (plan.idleMs !== undefined) await exec(`SELECT set_config('idle_in_transaction_session_timeout', '${plan.idleMs}', true) AS idle`, []);
      const fns = await plan.cached;
      const rows = await exec(
        advanceStatement(fns, plan.ownTable ? plan.schema : undefined, plan.table, '$1', plan.token, plan.owner === undefined ? undefined : '$2'),
        plan.owner === undefined ? [plan.resource] : [plan.resource, plan.owner],
      );
      if (rows.length > 0) return;
      const hw = await exec(`SELECT token::text AS token${plan.owner === undefined ? '' : ', lease'} FROM ${plan.table} WHERE resource = $1`, [plan.resource]);
      throw refusedMark(plan.resource, plan.token, plan.owner, hw[0]);
    } catch (err) {
      throw fenceSchemaError(err, plan.tableLabel, plan.owner);
    }
  },

  async rotate(exec, plan, req) {
    const s = `"${validateSchemaName(plan.schema!)}"`;
    const tok = req.token.toString();
    const expect = `ARRAY(SELECT jsonb_array_elements_text(($4::text)::jsonb))`;
    // The same UPDATE either way; the function's plan is kept by the connection (migration 16).
    const rows = (await plan.cached)?.rotate === true
      ? await exec(`SELECT ${s}.fence_rotate($1, $2, ${tok}, $3, ${expect}, ${req.first ? 'true' : 'false'})::int AS n`, [req.name, req.holder, req.next, JSON.stringify(req.expect)])
      : await exec(
          `WITH u AS (
             UPDATE ${s}.leases SET fence_token = ${tok}, fence_nonce = $1
              WHERE name = $2 AND holder = $3 AND token = ${tok} AND expires_at > now()
                AND CASE WHEN fence_token IS NULL OR fence_token < ${tok} THEN ${req.first ? 'true' : 'false'}
                         ELSE coalesce(fence_nonce IN (SELECT jsonb_array_elements_text(($4::text)::jsonb)), false) END
             RETURNING 1)
           SELECT count(*)::int AS n FROM u`,
          [req.next, req.name, req.holder, JSON.stringify(req.expect)],
        );
    return Number(rows[0]?.['n']) === 1;
  },

  async classify(exec, plan, req) {
    const s = `"${validateSchemaName(plan.schema!)}"`;
    const tok = req.token.toString();
    const rows = await exec(
      `WITH cur AS (
         SELECT name, holder, token, ended_by, expires_at > now() AS live,
                CASE WHEN fence_token IS NULL OR fence_token < token THEN ${req.first ? 'true' : 'false'}
                     ELSE coalesce(fence_nonce IN (SELECT jsonb_array_elements_text(($1::text)::jsonb)), false) END AS ours
           FROM ${s}.leases WHERE name = $2 FOR UPDATE),
       ended AS (
         UPDATE ${s}.leases l SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'conflict'
           FROM cur WHERE l.name = cur.name AND cur.holder = $3 AND cur.token = ${tok} AND cur.live AND NOT cur.ours
         RETURNING l.name, l.token, cur.holder),
       hist AS (
         INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
         SELECT name, 'conflict', NULL, holder, token, now(), $4 FROM ended)
       SELECT cur.holder, cur.token::text AS token, cur.ended_by AS endedby, cur.live, cur.ours, EXISTS (SELECT 1 FROM ended) AS conflict FROM cur`,
      [JSON.stringify(req.expect), req.name, req.holder, CLONE_DETAIL],
    );
    return judgeRow(rows[0], req);
  },

  async judgeInside(exec, plan, req) {
    const s = `"${validateSchemaName(plan.schema!)}"`;
    const rows = await exec(
      `SELECT holder, token::text AS token, ended_by AS endedby, expires_at > now() AS live,
              CASE WHEN fence_token IS NULL OR fence_token < token THEN ${req.first ? 'true' : 'false'}
                   ELSE coalesce(fence_nonce IN (SELECT jsonb_array_elements_text(($1::text)::jsonb)), false) END AS ours,
              false AS conflict
         FROM ${s}.leases WHERE name = $2`,
      [JSON.stringify(req.expect), req.name],
    );
    return judgeRow(rows[0], req, true);
  },

  mapError(err, plan) {
    if (plan.idleMs !== undefined && endedByServer(err)) {
      return new StoreUnavailableError(
        `PostgreSQL ended the fenced transaction on "${plan.resource}" (idleTimeout ${plan.idleMs}ms: it sat idle that long, usually because this process was frozen inside it, or the connection was lost): ` +
          'nothing of it was committed; retry with a live term',
        { cause: err },
      );
    }
    return err;
  },
};

const CLONE_DETAIL = 'two processes wrote with one term (a restored snapshot or a clone), seen by a fenced write';

/** The session ended under the transaction: 25P03, or the driver's word for a closed connection. */
function endedByServer(err: unknown): boolean {
  for (let e = err as { code?: unknown; message?: unknown; cause?: unknown } | undefined, i = 0; e != null && i < 4; e = e.cause as typeof e, i++) {
    if (e.code === '25P03' || e.code === 'CONNECTION_ENDED' || e.code === 'CONNECTION_CLOSED' || e.code === 'ECONNRESET') return true;
    // pg: "Connection terminated", "Client was closed and is not queryable"; TypeORM: "connection ... was already released".
    if (typeof e.message === 'string' && /terminat|not queryable|Connection ended|connection is closed|already released/i.test(e.message)) return true;
  }
  return false;
}

function judgeRow(row: Record<string, unknown> | undefined, req: TermFenceRequest, inside = false): TermFenceFailure {
  if (row === undefined) return { kind: 'missing' };
  const holder = (row['holder'] as string | null) ?? null;
  const token = BigInt(row['token'] as string);
  const live = row['live'] === true;
  const ours = row['ours'] === true;
  // Inside the refused transaction nothing is ended, but a live term of this holder whose nonce
  // this process never set is a clone all the same.
  const conflict = row['conflict'] === true || (inside && holder === req.holder && token === req.token && live && !ours);
  return judge({ holder, token, endedBy: (row['endedby'] as string | null) ?? null, live, ours, conflict }, req);
}

/**
 * Advances the mark to `token` unless it is higher, locking its row until the transaction ends;
 * with an owner (a SQL expression: a literal or a placeholder), also unless another lease owns
 * the mark, claiming it if unclaimed (NULL: written before schema version 9, or by writes that
 * named no lease). Returns the new token as its one row, none when refused.
 */
function advanceSql(table: string, resource: string, token: bigint, owner: string | undefined): string {
  const tok = token.toString();
  if (owner === undefined) {
    return `INSERT INTO ${table} AS f (resource, token, updated_at) VALUES (${resource}, ${tok}, now())
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
      WHERE f.token <= EXCLUDED.token
     RETURNING token`;
  }
  return `INSERT INTO ${table} AS f (resource, token, updated_at, lease) VALUES (${resource}, ${tok}, now(), ${owner})
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now(), lease = coalesce(f.lease, EXCLUDED.lease)
      WHERE f.token <= EXCLUDED.token AND (f.lease IS NULL OR f.lease = EXCLUDED.lease)
     RETURNING token`;
}

/**
 * The mark's advance as one statement, one row when the mark holds `token` after it and none when
 * refused; the one place that chooses its form, for the `pg` fence and the ORM fences alike. On
 * the store's own fences table (`ownSchema`) with migration 21 and a lease to own the mark, it is
 * `fence_advance`: the same rule, its plan kept per connection, and a lock without a write when
 * the mark already holds this token (a term writing again). Anywhere else, the upsert.
 * `resource` and `owner` are SQL expressions (literals, or placeholders).
 */
function advanceStatement(fns: FenceFunctions | undefined, ownSchema: string | undefined, table: string, resource: string, token: bigint, owner: string | undefined): string {
  if (fns?.advance === true && ownSchema !== undefined && owner !== undefined) {
    return `SELECT t::text AS token FROM "${validateSchemaName(ownSchema)}".fence_advance(${resource}, ${token.toString()}, ${owner}) AS t WHERE t IS NOT NULL`;
  }
  return `WITH a AS (${advanceSql(table, resource, token, owner)}) SELECT token::text AS token FROM a`;
}

/** Why the advance changed nothing, from the mark's row: another lease's mark, or a newer token. */
function refusedMark(resource: string, token: bigint, owner: string | undefined, row: Record<string, unknown> | undefined): Error {
  const mark = row?.['token'];
  const markOwner = row?.['lease'];
  if (owner !== undefined && typeof markOwner === 'string' && markOwner !== owner) return new FenceOwnedError(resource, owner, markOwner);
  return new FencedError(resource, token, mark == null ? null : BigInt(mark as string));
}

/** A missing fence table, or one created before the `lease` column, as a SchemaError that says what to run. */
function fenceSchemaError(err: unknown, tableLabel: string, owner: string | undefined): unknown {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (code === '42P01' || code === '3F000') {
    return new SchemaError(`fence table ${tableLabel} does not exist; run \`leasehold migrate\` or createPgFenceTable()`, { cause: err });
  }
  if (code === UNDEFINED_COLUMN && owner !== undefined) {
    return new SchemaError(
      `fence table ${tableLabel} has no \`lease\` column (it was created by an older leasehold): run \`leasehold migrate\` (the store's own table) or ` +
        `createPgFenceTable(db, ${JSON.stringify(tableLabel)}) once (a table of your own) to add it, or pass \`token\` without \`lease\` and \`term\` to fence without the owner check`,
      { cause: err },
    );
  }
  return err;
}

