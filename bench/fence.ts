/**
 * Fence overhead: one PostgreSQL transaction that updates an application row, fenced against
 * unfenced, interleaved on the same pool. Fenced with `term` (the lease row is in the same
 * database: the high-water mark plus the term check) and with `token` only (high-water mark).
 * And the token fence against the least any fence can do: the same transaction that also
 * locks one row (`SELECT ... FOR UPDATE`, sent with BEGIN in one round trip, as the fence is).
 * And the term fence against the least a term fence can do: that, with the idle bound set at
 * BEGIN, and one more row written in COMMIT's round trip (the lease row's nonce swap, which is
 * what refuses a clone; a plain UPDATE by primary key, checking nothing).
 */
import pg from 'pg';
import { fencedTransaction } from '../src/fence/index.js';
import { Leasehold } from '../src/core/leasehold.js';
import { makeTestStore, TEST_PG_URL } from '../test/helpers/stores.js';
import { interleave, stat, timed, uniq, type Recorder } from './lib.js';

export async function fenceOverhead(rec: Recorder, samples: number): Promise<void> {
  const t = await makeTestStore('postgres');
  const schema = new URL(t.url).searchParams.get('schema')!;
  const pool = new pg.Pool({ connectionString: TEST_PG_URL, max: 2 });
  const lh = new Leasehold({ store: t.store });
  try {
    await pool.query(
      `CREATE TABLE "${schema}".app (id int PRIMARY KEY, v bigint NOT NULL); INSERT INTO "${schema}".app VALUES (1, 0);
       CREATE TABLE "${schema}".lock_floor (id int PRIMARY KEY); INSERT INTO "${schema}".lock_floor VALUES (1);
       CREATE TABLE "${schema}".row_floor (id int PRIMARY KEY, v text); INSERT INTO "${schema}".row_floor VALUES (1, '')`,
    );
    const term = await lh.lease(uniq('fence'), { ttl: 60_000 }).acquire();
    const write = `UPDATE "${schema}".app SET v = v + 1 WHERE id = 1`;
    const unfenced = (): Promise<number> =>
      timed(async () => {
        const c = await pool.connect();
        try {
          await c.query('BEGIN');
          await c.query(write);
          await c.query('COMMIT');
        } finally {
          c.release();
        }
      });
    const fenced = (options: Parameters<typeof fencedTransaction>[1]) => (): Promise<number> =>
      timed(() => fencedTransaction(pool, options, (tx) => tx.query(write)));
    // A fenced write is well under a millisecond: 40 samples of it (the full run's) measure the
    // JIT's warm-up and the machine's noise more than the fence. Each row takes samples x 25
    // (1,000 in the full run, about a second a side), after both sides ran 200 times unmeasured.
    const n = samples * 25;
    await interleave(Math.min(200, n), fenced({ resource: 'app', term }), unfenced);
    const [a, b] = await interleave(n, fenced({ resource: 'app', term }), unfenced);
    rec.add({ figure: 'fence', store: 'postgres', label: 'fenced tx (term)', unit: 'ms', leasehold: stat(a), baselineName: 'unfenced tx', baseline: stat(b) });
    const [c, d] = await interleave(n, fenced({ resource: 'app-token', token: term.token, table: `${schema}.fences` }), unfenced);
    rec.add({ figure: 'fence', store: 'postgres', label: 'fenced tx (token)', unit: 'ms', leasehold: stat(c), baselineName: 'unfenced tx', baseline: stat(d) });
    const lockFloor = (): Promise<number> =>
      timed(async () => {
        const cl = await pool.connect();
        try {
          await cl.query(`BEGIN; SELECT id FROM "${schema}".lock_floor WHERE id = 1 FOR UPDATE`);
          await cl.query(write);
          await cl.query('COMMIT');
        } finally {
          cl.release();
        }
      });
    const [e, g] = await interleave(n, fenced({ resource: 'app-token', token: term.token, table: `${schema}.fences` }), lockFloor);
    rec.add({ figure: 'fence', store: 'postgres', label: 'token vs lock floor', unit: 'ms', leasehold: stat(e), baselineName: 'tx + one row lock', baseline: stat(g) });
    const termFloor = (): Promise<number> =>
      timed(async () => {
        const cl = await pool.connect();
        try {
          await cl.query(`BEGIN; SET LOCAL idle_in_transaction_session_timeout = 60000; SELECT id FROM "${schema}".lock_floor WHERE id = 1 FOR UPDATE`);
          await cl.query(write);
          await cl.query(`UPDATE "${schema}".row_floor SET v = '${uniq('n')}' WHERE id = 1; COMMIT`);
        } finally {
          cl.release();
        }
      });
    const [h, k] = await interleave(n, fenced({ resource: 'app', term }), termFloor);
    rec.add({ figure: 'fence', store: 'postgres', label: 'term vs its floor', unit: 'ms', leasehold: stat(h), baselineName: 'tx + row lock + row write', baseline: stat(k) });
  } finally {
    await lh.close();
    await pool.end();
    await t.cleanup();
  }
}
