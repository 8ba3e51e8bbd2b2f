/**
 * Issue 8.3 (fence part), checked by the compiler: `leasehold/fence` (src/fence/index.ts) is
 * usable the way a `pg` user writes code, and every type a caller needs to name is exported
 * from it. `npx tsc -p tsconfig.json --noEmit` fails if any of this stops type-checking; the
 * runtime test below only makes sure the file is part of the run.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import type BetterSqlite3 from 'better-sqlite3';
import type { Redis } from 'ioredis';
import * as fence from '../../src/fence/index.js';
import {
  FencedError,
  LeaseLostError,
  createPgFenceTable,
  createSqliteFenceTable,
  fencedHSet,
  fencedSet,
  fencedTransaction,
  fencedWriteSync,
  idempotencyKey,
  type CallOptions,
  type IoredisLike,
  type LeaseLostReason,
  type NodeRedisLike,
  type PgFenceOptions,
  type PgFenceTarget,
  type PgPoolLike,
  type PgQueryableLike,
  type PgResultLike,
  type RedisClientLike,
  type RedisFenceClient,
  type RedisFenceTarget,
  type RedisStore,
  type SqliteDatabaseLike,
  type SqliteFenceOptions,
  type Term,
} from '../../src/fence/index.js';

type Equal<A, B> = (<X>() => X extends A ? 1 : 2) extends <X>() => X extends B ? 1 : 2 ? true : false;
const expectType = <T extends true>(): T => true as T;

/** A pg user's code: their own Pool, PoolClient and row types. Never called; only compiled. */
export async function pgUser(pool: pg.Pool, client: pg.PoolClient, term: Term): Promise<number[]> {
  const asTarget: PgFenceTarget = pool;
  const asClient: PgFenceTarget = client;
  const asPool: PgPoolLike = pool;
  void [asTarget, asClient, asPool];
  const options: PgFenceOptions = { resource: 'invoices', token: 7n, table: 'leasehold.fences' };
  const withTerm: PgFenceOptions = { resource: 'invoices', term };
  await createPgFenceTable(pool);
  await fencedTransaction(client, withTerm, async (tx) => {
    await tx.query('UPDATE invoice_run SET last_run_at = now()');
  });
  return fencedTransaction(pool, options, async (tx: PgQueryableLike) => {
    const r: PgResultLike<{ id: number }> = await tx.query<{ id: number }>('SELECT id FROM invoices WHERE due < now()', []);
    expectType<Equal<(typeof r.rows)[number], { id: number }>>();
    const _untyped = await tx.query('SELECT 1 AS one');
    expectType<Equal<(typeof _untyped.rows)[number], Record<string, unknown>>>();
    return r.rows.map((row) => row.id);
  });
}

/** A better-sqlite3 user's code. */
export function sqliteUser(db: BetterSqlite3.Database, term: Term): number {
  const handle: SqliteDatabaseLike = db;
  createSqliteFenceTable(handle);
  const options: SqliteFenceOptions = { resource: 'invoices', token: 3n };
  fencedWriteSync(db, { resource: 'invoices', term }, (tx) => tx.prepare('DELETE FROM invoices').run());
  return fencedWriteSync(db, options, (tx) => tx.prepare('UPDATE invoices SET paid = 1').run().changes);
}

/** A Redis user's code: a fence target named by its type, an ioredis client or a RedisStore. */
export async function redisUser(client: Redis, store: RedisStore, options: CallOptions): Promise<void> {
  const target: RedisFenceTarget = { resource: 'cache', token: 9n, key: 'cache:summary', pxMs: 60_000 };
  const viaClient: RedisFenceClient = client;
  const viaStore: RedisFenceClient = store;
  const any: RedisClientLike = client;
  const io: IoredisLike = client;
  void [any, io];
  await fencedSet(viaClient, { ...target, value: 'x' }, options);
  await fencedHSet(viaStore, { ...target, fields: { a: '1' } });
}

/** Errors a caller catches and names. */
export function classify(err: unknown): string {
  if (err instanceof FencedError) return `fenced at ${String(err.highWater)}`;
  if (err instanceof LeaseLostError) {
    const reason: LeaseLostReason = err.reason;
    return reason === 'cloned' ? 'another process holds this term' : reason;
  }
  return 'other';
}

// @ts-expect-error a fenced write needs a token or a term
export const missingToken: PgFenceOptions = { resource: 'invoices' };
export type NodeRedis = NodeRedisLike;

void it('leasehold/fence exports the fences, their errors and idempotencyKey', () => {
  assert.equal(typeof fence.fencedTransaction, 'function');
  assert.equal(typeof fence.fencedWriteSync, 'function');
  assert.equal(typeof fence.fencedSet, 'function');
  assert.equal(typeof fence.fencedHSet, 'function');
  assert.equal(fence.FencedError, FencedError);
  assert.equal(fence.LeaseLostError, LeaseLostError);
  assert.equal(idempotencyKey('billing', 12n, 'email'), 'leasehold:billing:12:email');
  assert.equal(classify(new FencedError('r', 1n, 2n)), 'fenced at 2');
});
