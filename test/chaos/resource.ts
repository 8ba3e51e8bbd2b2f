/**
 * The protected resource: a PostgreSQL schema of its own, whatever store holds the leases.
 *
 *   fences    one high-water mark (leasehold's fence table), advanced by every fenced write
 *   log       append-only: one row per ACCEPTED write (token, worker, holder, unit, clocks)
 *   counters  how many writes were rejected by the fence, and by the idempotency key
 *
 * The log's (holder, token, seq) is unique: that is the unit's idempotency key. Two processes
 * resumed from one snapshot carry the same holder, token and unit number, so the second one's
 * copy of the unit is refused even though the fence (which accepts an equal token) lets it by.
 */
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { FencedError } from '../../src/core/errors.js';
import { createPgFenceTable, fencedTransaction } from '../../src/backends/postgres/fence.js';
import type { ResourceRow } from './types.js';

export const RESOURCE_NAME = 'chaos';

export function newResourceSchema(): string {
  return `lh_chaos_${randomBytes(5).toString('hex')}`;
}

function quoteSchema(schema: string): string {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) throw new Error(`bad resource schema name ${JSON.stringify(schema)}`);
  return `"${schema}"`;
}

export async function createResource(url: string, schema: string): Promise<void> {
  const s = quoteSchema(schema);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
    await createPgFenceTable(c, `${schema}.fences`);
    await c.query(`CREATE TABLE IF NOT EXISTS ${s}.log (
      id bigserial PRIMARY KEY,
      token bigint NOT NULL,
      worker text NOT NULL,
      pid integer NOT NULL,
      holder text NOT NULL,
      seq integer NOT NULL,
      term text NOT NULL,
      wall_ms bigint NOT NULL,
      mono_ms double precision NOT NULL,
      db_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      fenced boolean NOT NULL,
      UNIQUE (holder, token, seq))`);
    await c.query(`CREATE TABLE IF NOT EXISTS ${s}.counters (name text PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`);
    await c.query(`INSERT INTO ${s}.counters (name) VALUES ('rejected'), ('duplicate') ON CONFLICT DO NOTHING`);
  } finally {
    await c.end();
  }
}

export async function dropResource(url: string, schema: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`DROP SCHEMA IF EXISTS ${quoteSchema(schema)} CASCADE`);
  } finally {
    await c.end();
  }
}

/** A small pool for one worker's writes, with its errors handled (a restart must not crash it). */
export function resourcePool(url: string, timeoutMs: number): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 2, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs, idleTimeoutMillis: 10_000 });
  pool.on('error', () => {});
  return pool;
}

export interface UnitWrite {
  token: bigint;
  worker: string;
  pid: number;
  holder: string;
  seq: number;
  /** mono ms when the write was sent (the worker's shared clock). */
  mono: number;
  /** The fence's resource name: one high-water mark per resource. Default: the lease harness's one. */
  resource?: string;
}

export type WriteOutcome = { outcome: 'accepted' } | { outcome: 'fenced'; highWater: bigint | null } | { outcome: 'duplicate' };

/**
 * Whether to hand `fencedTransaction` the pool (it checks a client out itself) or a client we
 * checked out. Found by this harness: a pooled client checked out by `fencedTransaction` has no
 * 'error' listener, and pg emits 'error' on a client whose server goes away (a PostgreSQL
 * restart) even while a query is in flight, so the process dies of an unhandled 'error' event.
 * Until src/fence/postgres.ts listens for it, workers hold the client themselves;
 * LEASEHOLD_CHAOS_POOLED_FENCE=1 exercises the pooled path (expect `workers-healthy` to fail
 * under `--faults restart` until it is fixed).
 */
const POOLED_FENCE = process.env['LEASEHOLD_CHAOS_POOLED_FENCE'] === '1';

async function withClient<T>(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  let dead: Error | undefined;
  const onError = (err: Error): void => {
    dead = err;
  };
  c.on('error', onError);
  try {
    return await fn(c);
  } catch (err) {
    // A connection-level failure leaves the client unusable: do not return it to the pool.
    if ((err as { code?: string }).code === undefined || /^(08|57P)/.test((err as { code: string }).code)) dead ??= err as Error;
    throw err;
  } finally {
    c.off('error', onError);
    c.release(dead);
  }
}

/**
 * One unit's write. Fenced: inside leasehold's `fencedTransaction`, which advances the
 * high-water mark to `token` (refusing a lower one) and holds its row lock until commit, so the
 * log's id order is the commit order. Unfenced (the negative control): a bare INSERT.
 * @throws anything but a fence or idempotency refusal (the outcome is then unknown).
 */
/** `idleTimeoutMs`: a worker frozen mid-write frees the fence row after this (see fencedTransaction). */
export async function writeUnit(pool: pg.Pool, schema: string, w: UnitWrite, unfenced: boolean, idleTimeoutMs?: number): Promise<WriteOutcome> {
  const s = quoteSchema(schema);
  const insert = (db: { query(text: string, values?: unknown[]): Promise<unknown> }): Promise<unknown> =>
    db.query(`INSERT INTO ${s}.log (token, worker, pid, holder, seq, term, wall_ms, mono_ms, fenced) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, [
      w.token.toString(),
      w.worker,
      w.pid,
      w.holder,
      w.seq,
      `${w.worker}/${w.token}`,
      Date.now(),
      w.mono,
      !unfenced,
    ]);
  const idle = idleTimeoutMs === undefined ? {} : { idleTimeout: idleTimeoutMs };
  try {
    if (unfenced) await insert(pool);
    else if (POOLED_FENCE) await fencedTransaction(pool, { resource: w.resource ?? RESOURCE_NAME, token: w.token, table: `${schema}.fences`, ...idle }, insert);
    else {
      await withClient(pool, (c) =>
        fencedTransaction({ query: (text: string, values?: unknown[]) => c.query(text, values) }, { resource: w.resource ?? RESOURCE_NAME, token: w.token, table: `${schema}.fences`, ...idle }, insert),
      );
    }
    return { outcome: 'accepted' };
  } catch (err) {
    if (err instanceof FencedError) {
      await pool.query(`UPDATE ${s}.counters SET n = n + 1 WHERE name = 'rejected'`).catch(() => {});
      return { outcome: 'fenced', highWater: err.highWater };
    }
    if ((err as { code?: string }).code === '23505') {
      await pool.query(`UPDATE ${s}.counters SET n = n + 1 WHERE name = 'duplicate'`).catch(() => {});
      return { outcome: 'duplicate' };
    }
    throw err;
  }
}

/** Every accepted write in commit order; `t` is the database's clock converted to mono. */
export async function readLog(url: string, schema: string, wallMinusMono: number): Promise<ResourceRow[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query<{ id: string; token: string; worker: string; pid: number; holder: string; seq: number; at_ms: number; fenced: boolean }>(
      `SELECT id, token, worker, pid, holder, seq, (extract(epoch FROM db_at) * 1000)::float8 AS at_ms, fenced FROM ${quoteSchema(schema)}.log ORDER BY id`,
    );
    return r.rows.map((row) => ({
      id: Number(row.id),
      token: BigInt(row.token),
      worker: row.worker,
      pid: row.pid,
      holder: row.holder,
      seq: row.seq,
      t: Number(row.at_ms) - wallMinusMono,
      fenced: row.fenced,
    }));
  } finally {
    await c.end();
  }
}

export async function readCounters(url: string, schema: string): Promise<{ rejected: number; duplicate: number; highWater: bigint | null }> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query<{ name: string; n: string }>(`SELECT name, n FROM ${quoteSchema(schema)}.counters`);
    const get = (n: string): number => Number(r.rows.find((x) => x.name === n)?.n ?? 0);
    const hw = await c.query<{ token: string }>(`SELECT token FROM ${quoteSchema(schema)}.fences WHERE resource = $1`, [RESOURCE_NAME]);
    return { rejected: get('rejected'), duplicate: get('duplicate'), highWater: hw.rows[0] === undefined ? null : BigInt(hw.rows[0].token) };
  } finally {
    await c.end();
  }
}
