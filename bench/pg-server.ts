/**
 * PostgreSQL server time, by the server's own measure (pg_stat_statements): the figure the
 * client's wall time hides on a loaded machine, where the pool, the socket and Node's event loop
 * take as long as the statement.
 *  - renewal at N leases: the execution time of one renewal call (migration 12's `renew`),
 *    against one raw `UPDATE ... FROM unnest` renewing N rows of a table of its own, and against
 *    the renewal statement schemas before version 12 run (../src/backends/postgres/renew.ts),
 *    interleaved in the same run, each on its own N rows;
 *  - closing a Leasehold that holds N leases: the release statements the server ran, counted.
 *
 * pg_stat_statements must be loaded (shared_preload_libraries), which the shared test server
 * need not do: the figure runs at LEASEHOLD_BENCH_PG_STATS_URL (a cluster of your own, started
 * with `-c shared_preload_libraries=pg_stat_statements`), else at LEASEHOLD_TEST_PG_URL when the
 * view can be read there, else on a server of its own that it starts for the figure and removes
 * after (scripts/services/pg-server.mjs on LEASEHOLD_BENCH_PORT_BASE + 20: needs the PostgreSQL server binaries), and
 * is skipped with the reason when none of those works. Everything it writes is dropped.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { newNonce } from '../src/core/identity.js';
import { Leasehold } from '../src/core/leasehold.js';
import { PostgresStore } from '../src/backends/postgres/store.js';
import { renewalStatement, RENEW_FUNCTION_MIN } from '../src/backends/postgres/renew.js';
import { TEST_PG_URL } from '../test/helpers/stores.js';
import { stat, type Recorder } from './lib.js';

const TTL_MS = 60_000;
let URL_ = process.env['LEASEHOLD_BENCH_PG_STATS_URL'] ?? TEST_PG_URL;
/** The figure's own server, when it needs one: LEASEHOLD_BENCH_PORT_BASE (bench/servers.ts) + 20. */
const OWN_PORT = Number(process.env['LEASEHOLD_BENCH_PORT_BASE'] ?? 26000) + 20;

interface Counter {
  /** Total execution ms, calls and WAL records of the top-level statements whose text matches. */
  read(like: string): Promise<{ ms: number; calls: number; wal: number }>;
  close(): Promise<void>;
}

export async function counter(): Promise<Counter | string> {
  const c = new pg.Client({ connectionString: URL_ });
  await c.connect();
  try {
    await c.query('SELECT 1 FROM pg_stat_statements LIMIT 1');
  } catch (e) {
    await c.end();
    return `pg_stat_statements cannot be read at ${URL_.replace(/\/\/[^@]*@/, '//')} (${(e as Error).message}); set LEASEHOLD_BENCH_PG_STATS_URL to a cluster started with shared_preload_libraries=pg_stat_statements`;
  }
  return {
    async read(like) {
      const r = await c.query(
        `SELECT coalesce(sum(total_exec_time + total_plan_time), 0)::float8 AS ms, coalesce(sum(calls), 0)::float8 AS calls, coalesce(sum(wal_records), 0)::float8 AS wal
           FROM pg_stat_statements WHERE toplevel AND query LIKE $1`,
        [like],
      );
      const row = r.rows[0] as { ms: number; calls: number; wal: number };
      return { ms: row.ms, calls: row.calls, wal: row.wal };
    },
    close: () => c.end(),
  };
}

/** The server's execution ms and WAL records of one call of `fn`, off the statements matching `like`. */
async function serverCost(stats: Counter, like: string, fn: () => Promise<void>): Promise<{ ms: number; wal: number }> {
  const a = await stats.read(like);
  await fn();
  const b = await stats.read(like);
  if (b.calls - a.calls < 1) throw new Error(`pg_stat_statements saw no statement like ${like}`);
  return { ms: b.ms - a.ms, wal: b.wal - a.wal };
}

/** N leases held in a schema of their own; `tick` renews them all in one call of `send`. */
async function held(n: number, send: (store: PostgresStore, schema: string, values: unknown[]) => Promise<number>) {
  const schema = `lh_bench_pgs_${randomBytes(4).toString('hex')}`;
  const store = await PostgresStore.create({ url: URL_, schema });
  await store.migrate();
  const holder = `bench-${newNonce().slice(0, 8)}`;
  const names = Array.from({ length: n }, (_, i) => `srv-${i}`);
  let nonces = names.map(() => newNonce());
  const got = await store.claim(names.map((name, i) => ({ name, holder, ttlMs: TTL_MS, expect: null, nextNonce: nonces[i]! })));
  if (got.some((g) => g.outcome !== 'acquired')) throw new Error('bench could not acquire its leases');
  return {
    schema,
    store,
    async tick() {
      const next = names.map(() => newNonce());
      const renewed = await send(store, schema, [names, names.map(() => holder), nonces, next, names.map(() => TTL_MS)]);
      if (renewed !== n) throw new Error(`${n - renewed} of ${n} renewals failed`);
      nonces = next;
    },
  };
}

/** A server of the figure's own with pg_stat_statements loaded, or why there is none. */
async function ownServer(): Promise<{ url: string; stop(): void } | string> {
  try {
    const mod = (await import(new URL('../../scripts/services/pg-server.mjs', import.meta.url).href)) as {
      startPgServer(o: { port: number; settings: Record<string, string> }): Promise<{ url: string; stop(): void }>;
    };
    const server = await mod.startPgServer({ port: OWN_PORT, settings: { shared_preload_libraries: 'pg_stat_statements' } });
    const c = new pg.Client({ connectionString: server.url });
    await c.connect();
    try {
      await c.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    } finally {
      await c.end();
    }
    return server;
  } catch (e) {
    return `a server of its own on ${OWN_PORT} did not start (${(e as Error).message.split('\n')[0]})`;
  }
}

export async function pgServer(rec: Recorder, counts: number[], samples: number): Promise<void> {
  let stats = await counter();
  let own: { url: string; stop(): void } | undefined;
  if (typeof stats === 'string' && process.env['LEASEHOLD_BENCH_PG_STATS_URL'] === undefined) {
    const started = await ownServer();
    if (typeof started === 'string') {
      rec.skip('pg-server', 'postgres', `${stats}; ${started}`);
      return;
    }
    own = started;
    URL_ = own.url;
    stats = await counter();
  }
  if (typeof stats === 'string') {
    own?.stop();
    rec.skip('pg-server', 'postgres', stats);
    return;
  }
  const admin = new pg.Pool({ connectionString: URL_, max: 2 });
  const schemas: string[] = [];
  const stores: PostgresStore[] = [];
  try {
    for (const n of counts) {
      const now = await held(n, async (store, _s, values) => (await store.claim(
        (values[0] as string[]).map((name, i) => ({ name, holder: (values[1] as string[])[i]!, expect: [(values[2] as string[])[i]!], nextNonce: (values[3] as string[])[i]!, ttlMs: TTL_MS })),
      )).filter((r) => r.outcome === 'renewed').length);
      const before = await held(n, async (_store, s, values) => {
        const r = await admin.query(renewalStatement(`"${s}"`), values);
        return r.rows.filter((row: Record<string, unknown>) => row['outcome'] === 'renewed').length;
      });
      stores.push(now.store, before.store);
      schemas.push(now.schema, before.schema);
      const table = `lh_bench_pgs_raw_${randomBytes(4).toString('hex')}`;
      await admin.query(`CREATE TABLE ${table} (name text PRIMARY KEY, holder text, nonce text, token bigint, expires_at timestamptz)`);
      const names = Array.from({ length: n }, (_, i) => `raw-${i}`);
      let rawNonces = names.map(() => newNonce());
      await admin.query(
        `INSERT INTO ${table} SELECT u.name, 'bench', u.nonce, 1, now() + $3 * interval '1 millisecond' FROM unnest($1::text[], $2::text[]) AS u(name, nonce)`,
        [names, rawNonces, TTL_MS],
      );
      const rawTick = async (): Promise<void> => {
        const next = names.map(() => newNonce());
        const r = await admin.query(
          `UPDATE ${table} AS t SET nonce = u.nxt, expires_at = now() + $4 * interval '1 millisecond'
             FROM unnest($1::text[], $2::text[], $3::text[]) AS u(name, cur, nxt)
            WHERE t.name = u.name AND t.holder = 'bench' AND t.nonce = u.cur AND t.expires_at > now() RETURNING t.name, t.token, t.expires_at`,
          [names, rawNonces, next, TTL_MS],
        );
        if (r.rowCount !== n) throw new Error(`raw renewal renewed ${r.rowCount} of ${n}`);
        rawNonces = next;
      };
      const sides = [
        // The store sends batches under RENEW_FUNCTION_MIN as the statement, larger ones to `renew`.
        { like: n >= RENEW_FUNCTION_MIN ? `SELECT * FROM "${now.schema}".renew(%` : `%WITH cur AS MATERIALIZED%"${now.schema}".leases%`, tick: () => now.tick() },
        { like: `%WITH cur AS MATERIALIZED%"${before.schema}".leases%`, tick: () => before.tick() },
        { like: `UPDATE ${table} %`, tick: rawTick },
      ];
      const reps = n >= 10_000 ? Math.max(5, Math.ceil(samples / 3)) : samples;
      const ms: number[][] = [[], [], []];
      const wal: number[][] = [[], [], []];
      for (const side of sides) await side.tick();
      // Interleaved, each round starting with another side, so none always runs on a warmer server.
      for (let i = 0; i < reps; i++) {
        for (let j = 0; j < sides.length; j++) {
          const k = (i + j) % sides.length;
          const cost = await serverCost(stats, sides[k]!.like, sides[k]!.tick);
          ms[k]!.push(cost.ms);
          wal[k]!.push(cost.wal);
        }
      }
      await admin.query(`DROP TABLE IF EXISTS ${table}`);
      const [after, old, raw] = ms.map((x) => stat(x));
      rec.add({
        figure: 'pg-server',
        store: 'postgres',
        label: `renewal ${n} lease${n === 1 ? '' : 's'}`,
        unit: 'ms',
        leasehold: after!,
        baselineName: n === 1 ? 'raw UPDATE (server)' : 'raw UPDATE..FROM unnest (server)',
        baseline: raw!,
        extra: {
          'before (schema 11 statement) ms': old!.median,
          'before ratio': old!.median / raw!.median,
          'WAL records/tick': stat(wal[0]!).median,
          'before WAL records/tick': stat(wal[1]!).median,
          'raw WAL records/tick': stat(wal[2]!).median,
        },
      });
      if (n >= 100) await closeCount(rec, stats, n);
    }
  } finally {
    for (const s of stores) await s.close().catch(() => {});
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`).catch(() => {});
    await admin.end();
    await stats.close();
    own?.stop();
  }
}

/**
 * A Leasehold holding N leases closes: the release statements the server ran (release_many per
 * batch; a `release` per lease would be N), against N, the count before releases were batched;
 * and their server time, against the same close on a schema whose `release_many` is migration
 * 7's row-by-row function (kept as `release_many_rows` since migration 13, swapped in by name).
 */
export async function closeCount(rec: Recorder, stats: Counter, n: number): Promise<void> {
  const set = await closeOnce(stats, n, false);
  const rows = await closeOnce(stats, n, true);
  rec.add({
    figure: 'pg-server',
    store: 'postgres',
    label: `close ${n} leases`,
    unit: 'statements',
    leasehold: stat([set.statements]),
    baselineName: 'one release per lease',
    baseline: stat([n]),
    extra: { 'server ms': set.ms, 'close wall ms': set.wall, 'batch size': set.batch },
  });
  rec.add({
    figure: 'pg-server',
    store: 'postgres',
    label: `close ${n} leases: release server time`,
    unit: 'ms',
    leasehold: stat([set.ms]),
    baselineName: 'row-by-row release_many (migration 7)',
    baseline: stat([rows.ms]),
    extra: { 'row-by-row statements': rows.statements, 'row-by-row close wall ms': rows.wall },
  });
}

async function closeOnce(stats: Counter, n: number, rowByRow: boolean): Promise<{ statements: number; ms: number; wall: number; batch: number }> {
  const schema = `lh_bench_pgs_${randomBytes(4).toString('hex')}`;
  const store = await PostgresStore.create({ url: URL_, schema });
  const c = new pg.Client({ connectionString: URL_ });
  await c.connect();
  try {
    await store.migrate();
    if (rowByRow) {
      await c.query(`ALTER FUNCTION "${schema}".release_many(text[], text[], text[]) RENAME TO release_many_set`);
      await c.query(`ALTER FUNCTION "${schema}".release_many_rows(text[], text[], text[]) RENAME TO release_many`);
    }
    const lh = new Leasehold({ store });
    await Promise.all(Array.from({ length: n }, (_, i) => lh.lease(`close-${i}`, { ttl: TTL_MS }).acquire()));
    const many = `%"${schema}".release_many(%`;
    const one = `%"${schema}".release(%`;
    const [m0, o0] = [await stats.read(many), await stats.read(one)];
    const t0 = performance.now();
    await lh.close();
    const wall = performance.now() - t0;
    const [m1, o1] = [await stats.read(many), await stats.read(one)];
    const left = await c.query(`SELECT count(*)::int AS n FROM "${schema}".leases WHERE holder IS NOT NULL`);
    if ((left.rows[0] as { n: number }).n !== 0) throw new Error(`close left ${(left.rows[0] as { n: number }).n} of ${n} leases held`);
    return { statements: m1.calls - m0.calls + (o1.calls - o0.calls), ms: m1.ms - m0.ms + (o1.ms - o0.ms), wall, batch: store.maxClaimBatch };
  } finally {
    await store.close().catch(() => {});
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
    await c.end();
  }
}
