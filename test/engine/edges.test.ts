/**
 * Edge cases found in review, each against a real store. Where a fault is needed (an answer
 * lost after the store applied it, a slow answer), a thin wrapper around the real store
 * injects it; the store itself is never simulated.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Leasehold } from '../../src/core/leasehold.js';
import { LeaseLostError, StoreUnavailableError } from '../../src/core/errors.js';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { fencedTransaction } from '../../src/backends/postgres/fence.js';
import type { ClaimRequest, LeaseStore } from '../../src/backends/store.js';
import { makeTestStore, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
async function until(pred: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !pred(); i++) await sleep(10);
  assert.ok(pred(), 'condition not reached in 5s');
}
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

/** A real store whose renewals (claims with `expect`) go through `fault` first. */
function withRenewalFault(inner: LeaseStore, fault: (reqs: readonly ClaimRequest[], call: () => ReturnType<LeaseStore['claim']>) => ReturnType<LeaseStore['claim']>): LeaseStore {
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'claim') {
        return (reqs: readonly ClaimRequest[], opts?: { signal?: AbortSignal }) => {
          const call = (): ReturnType<LeaseStore['claim']> => target.claim(reqs, opts);
          return reqs.some((r) => r.expect !== null) ? fault(reqs, call) : call();
        };
      }
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

for (const kind of ['sqlite', 'postgres'] as const) {
  void describe(`edge cases on ${kind}`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      await t?.cleanup();
    });

    void it('an elector stopped at once never leads, and a lease closed while acquiring holds nothing', async () => {
      const lh = new Leasehold({ store: t.store });
      try {
        const name = uniq('stop-now');
        let elected = 0;
        const e = lh.elect(name, { onElected: () => void elected++ }, { ttl: 1000 });
        await e.stop();
        await sleep(300);
        assert.equal(e.isLeader, false);
        const [row] = await t.store.list({ name });
        assert.ok(row === undefined || row.state !== 'held', `the lease is not held after stop(): ${JSON.stringify(row?.state)}`);

        const other = uniq('close-now');
        const lease = lh.lease(other, { ttl: 1000 });
        const p = lease.acquire().catch((err: unknown) => err);
        await lease.close();
        await p;
        assert.equal(lease.state, 'closed');
        assert.equal(lease.isLeader, false);
        const [row2] = await t.store.list({ name: other });
        assert.ok(row2 === undefined || row2.state !== 'held');

        const ac = new AbortController();
        ac.abort();
        const never = lh.elect(uniq('pre-aborted'), { onElected: () => void elected++ }, { ttl: 1000, signal: ac.signal });
        await sleep(300);
        assert.equal(never.isLeader, false);
        assert.equal(elected, 0, 'onElected never ran');
      } finally {
        await lh.close();
      }
    });

    void it('renewals whose answers were lost do not make a healthy leader look like a clone', async () => {
      let n = 0;
      // 1st renewal: lands, answer lost. 2nd and 3rd: fail before reaching the store. Then normal.
      const store = withRenewalFault(t.store, async (_reqs, call) => {
        n++;
        if (n === 1) {
          await call();
          throw new StoreUnavailableError('injected: the answer was lost');
        }
        if (n <= 3) throw new StoreUnavailableError('injected: connection refused');
        return call();
      });
      const lh = new Leasehold({ store });
      try {
        const lease = lh.lease(uniq('lost-answers'), { ttl: 3000 });
        const term = await lease.acquire();
        const recovered = new Promise<void>((r) => lease.once('recovered', () => r()));
        await recovered;
        assert.equal(term.signal.aborted, false, `the term survived: ${String((term.signal.reason as Error | undefined)?.message)}`);
        assert.equal(lease.token, term.token);
        assert.ok(n >= 4);
      } finally {
        await lh.close();
      }
    });

    void it('one slow renewal answer is not mistaken for a suspension', async () => {
      let n = 0;
      const store = withRenewalFault(t.store, async (_reqs, call) => {
        n++;
        if (n === 1) await sleep(600); // slow, within the 2s ttl
        return call();
      });
      const lh = new Leasehold({ store });
      let suspected = false;
      lh.on('suspected', () => (suspected = true));
      try {
        const lease = lh.lease(uniq('slow'), { ttl: 2000 });
        const term = await lease.acquire();
        while (n < 3) await sleep(50);
        await sleep(100);
        assert.equal(suspected, false);
        assert.equal(term.signal.aborted, false);
      } finally {
        await lh.close();
      }
    });

    void it('a renewal answer that arrives after its term ended does not touch the next term', async () => {
      let n = 0;
      // The first renewal reaches the store at once, but its answer is held back 1.5s: longer
      // than the scheduler waits (one renew interval), so the term goes on without it.
      const store = withRenewalFault(t.store, async (_reqs, call) => {
        n++;
        const answer = call();
        if (n === 1) await sleep(1500);
        return answer;
      });
      const lh = new Leasehold({ store });
      try {
        const name = uniq('late-answer');
        const lease = lh.lease(name, { ttl: 3000 });
        const first = await lease.acquire();
        while (n < 1) await sleep(20);
        await t.store.revoke(name, 'end term one while its renewal answer is in the air');
        await new Promise<void>((r) => first.signal.addEventListener('abort', () => r(), { once: true }));
        const second = await lease.acquire();
        assert.ok(second.token > first.token);
        await sleep(1800); // the held-back answer (for term one) has arrived by now
        assert.equal(second.signal.aborted, false, `term two survived: ${String((second.signal.reason as Error | undefined)?.message)}`);
        assert.equal(lease.token, second.token);
      } finally {
        await lh.close();
      }
    });

    void it('an elector whose onElected throws gives the lease up so another replica can lead', async () => {
      const name = uniq('bad-start');
      const a = new Leasehold({ store: t.store });
      const b = new Leasehold({ store: await t.open() });
      try {
        const broken = a.elect(name, { onElected: () => Promise.reject(new Error('cannot start')) }, { ttl: 1000 });
        await sleep(200);
        let bLed = false;
        const healthy = b.elect(name, { onElected: () => void (bLed = true) }, { ttl: 1000 });
        for (let i = 0; i < 60 && !bLed; i++) await sleep(50);
        assert.equal(bLed, true, 'the healthy replica led');
        await broken.stop();
        await healthy.stop();
      } finally {
        await a.close();
        await b.close();
      }
    });
  });
}

void describe('edge cases on postgres only', () => {
  void it('an elector started before the schema exists keeps trying and leads once it is migrated', async () => {
    const schema = uniq('lh_late').replace(/-/g, '_');
    const store = await PostgresStore.create({ url: TEST_PG_URL, schema });
    const lh = new Leasehold({ store, closeStore: true });
    const errors: unknown[] = [];
    let led = false;
    try {
      const e = lh.elect('late', { onElected: () => void (led = true) }, { ttl: 1000 });
      e.on('contend-error', (err) => errors.push(err));
      while (errors.length === 0) await sleep(20);
      await store.migrate();
      for (let i = 0; i < 100 && !led; i++) await sleep(50);
      assert.equal(led, true);
      assert.match(String((errors[0] as Error).message), /leasehold migrate/);
      await e.stop();
    } finally {
      await lh.close();
      const c = new pg.Client({ connectionString: TEST_PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await c.end();
    }
  });

  void it('fencedTransaction takes a client you already hold as well as a pool', async () => {
    const t = await makeTestStore('postgres');
    const schema = new URL(t.url).searchParams.get('schema')!;
    const client = new pg.Client({ connectionString: TEST_PG_URL });
    await client.connect();
    try {
      await client.query(`CREATE TABLE "${schema}".w (token bigint)`);
      await fencedTransaction(client, { resource: 'r', token: 7n, table: `${schema}.fences` }, (tx) => tx.query(`INSERT INTO "${schema}".w VALUES (7)`));
      await assert.rejects(
        fencedTransaction(client, { resource: 'r', token: 6n, table: `${schema}.fences` }, (tx) => tx.query(`INSERT INTO "${schema}".w VALUES (6)`)),
        (e: unknown) => e instanceof Error && e.name === 'FencedError',
      );
      const r = await client.query(`SELECT token FROM "${schema}".w`);
      assert.deepEqual(
        r.rows.map((x: { token: string }) => x.token),
        ['7'],
      );
    } finally {
      await client.end();
      await t.cleanup();
    }
  });

  void it("fencedTransaction's idleTimeout frees the fence row from a writer frozen mid-transaction; without it the newer term waits", async () => {
    const t = await makeTestStore('postgres');
    const schema = new URL(t.url).searchParams.get('schema')!;
    const pool = new pg.Pool({ connectionString: TEST_PG_URL, max: 4 });
    const order: string[] = [];
    // From the server's side a frozen process is a session idle in its transaction: the old
    // term has advanced the fence row (locking it) and then does nothing until `thaw`.
    const frozenWriter = (token: bigint, thaw: Promise<void>, idleTimeout?: number): Promise<void> =>
      fencedTransaction(pool, { resource: 'r', token, table: `${schema}.fences`, ...(idleTimeout === undefined ? {} : { idleTimeout }) }, async (tx) => {
        order.push(`frozen ${token} locked`);
        await thaw;
        await tx.query(`INSERT INTO "${schema}".w VALUES ($1)`, [token.toString()]);
      }).then(() => void order.push(`frozen ${token} committed`));
    const newerWriter = (token: bigint): Promise<void> =>
      fencedTransaction(pool, { resource: 'r', token, table: `${schema}.fences` }, (tx) => tx.query(`INSERT INTO "${schema}".w VALUES ($1)`, [token.toString()])).then(
        () => void order.push(`newer ${token} committed`),
      );
    try {
      await pool.query(`CREATE TABLE "${schema}".w (token bigint)`);
      // Bounded: the frozen transaction is ended after 300ms and the newer term commits while
      // the old process is still frozen; on thawing, it learns nothing was committed.
      let thaw!: () => void;
      const frozen = frozenWriter(1n, new Promise<void>((r) => (thaw = r)), 300);
      await until(() => order.includes('frozen 1 locked'));
      const newer = newerWriter(2n);
      await Promise.race([newer, sleep(5000)]); // bounded, so a build without the bound fails instead of hanging
      order.push('thaw');
      thaw();
      await newer;
      await assert.rejects(frozen, (e: unknown) => e instanceof StoreUnavailableError && /idleTimeout/.test(e.message) && /nothing was committed/.test(e.message));
      assert.deepEqual(order, ['frozen 1 locked', 'newer 2 committed', 'thaw']);
      // Unbounded (token only, no idleTimeout): the newer term waits for the thaw.
      order.length = 0;
      let thaw2!: () => void;
      const frozen2 = frozenWriter(3n, new Promise<void>((r) => (thaw2 = r)));
      await until(() => order.includes('frozen 3 locked'));
      const newer2 = newerWriter(4n);
      await sleep(600);
      order.push('thaw');
      thaw2();
      await Promise.all([frozen2, newer2]);
      assert.deepEqual(order, ['frozen 3 locked', 'thaw', 'frozen 3 committed', 'newer 4 committed']);
      const rows = await pool.query(`SELECT token FROM "${schema}".w ORDER BY token`);
      assert.deepEqual(
        rows.rows.map((x: { token: string }) => x.token),
        ['2', '3', '4'],
      );
    } finally {
      await pool.end();
      await t.cleanup();
    }
  });

  void it('a term lost to an injected deadline is reported with a typed reason', async () => {
    // Renewals that hang forever: the scheduler stops waiting, retries, and the deadline ends it.
    const t = await makeTestStore('postgres');
    const store = withRenewalFault(t.store, () => new Promise(() => {}));
    const lh = new Leasehold({ store });
    try {
      const lease = lh.lease(uniq('hang'), { ttl: 1200 });
      const term = await lease.acquire();
      await new Promise<void>((r) => term.signal.addEventListener('abort', () => r(), { once: true }));
      const reason = term.signal.reason as LeaseLostError;
      assert.ok(reason instanceof LeaseLostError);
      assert.equal(reason.reason, 'store-unreachable');
    } finally {
      await lh.close();
      await t.cleanup();
    }
  });
});
