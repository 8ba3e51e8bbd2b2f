/**
 * A PostgreSQL fenced write with `term` (issue 34), both halves:
 *  - the lease row: migration 16's `fence_rotate` (src/backends/postgres/sql/016-fence-rotate.ts)
 *    is the same UPDATE as the statement it replaces, planned once per connection instead of on
 *    every write. A lease row that another process holding this term has written (a restored
 *    snapshot, a fork) refuses the write in the round trip of its COMMIT, with nothing of it
 *    committed; a schema from before migration 16 (a process upgraded before `leasehold
 *    migrate`) still gets that refusal, from the statement its version's clients send.
 *  - the mark: migration 21's `fence_advance` (src/backends/postgres/sql/019-fence-advance.ts)
 *    applies the upsert's rule to the store's own fences table, and when the mark already holds
 *    the term's token it only locks the mark's row instead of writing a new version of it. Through
 *    the `pg` fence and through an ORM's (Kysely): the mark is locked for the whole transaction
 *    either way, so fenced writes on one resource still go one at a time; a higher mark is
 *    FencedError and another lease's mark FenceOwnedError, with nothing committed; a newer term
 *    moves the mark; and a schema from before migration 21 gets the upsert every earlier version
 *    sends.
 * Either way a term-fenced write costs the three round trips of an unfenced transaction.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { Leasehold } from '../../src/core/leasehold.js';
import { FenceOwnedError, FencedError, LeaseLostError } from '../../src/core/errors.js';
import type { Term } from '../../src/core/lease.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { fencedTransaction } from '../../src/fence/index.js';
import * as kyselyFence from '../../src/fence/kysely.js';
import { makeTestStore, selectedStores, TEST_PG_URL, type TestStore } from '../helpers/stores.js';
import { recording } from '../helpers/pg-recording.js';

/** Long enough that no term here ends by time while a test runs. */
const TTL_MS = 60_000;

void describe('PostgreSQL fenced write with `term`', { skip: !selectedStores().includes('postgres') }, () => {
  let t: TestStore;
  let schema: string;
  let client: pg.Client;
  let other: pg.Client;
  let pool: pg.Pool;
  let kysely: Kysely<Record<string, never>>;
  const open: Leasehold[] = [];

  before(async () => {
    t = await makeTestStore('postgres');
    schema = new URL(t.url).searchParams.get('schema')!;
    client = new pg.Client({ connectionString: TEST_PG_URL });
    other = new pg.Client({ connectionString: TEST_PG_URL });
    await client.connect();
    await other.connect();
    await client.query(`CREATE TABLE "${schema}".app (id int PRIMARY KEY)`);
    pool = new pg.Pool({ connectionString: TEST_PG_URL, max: 2 });
    kysely = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
  });
  after(async () => {
    for (const lh of open) await lh.close();
    await kysely.destroy();
    await client.end();
    await other.end();
    await t.cleanup();
  });

  async function leader(store: LeaseStore, name: string): Promise<Term> {
    const lh = new Leasehold({ store });
    open.push(lh);
    return lh.lease(name, { ttl: TTL_MS }).acquire();
  }
  const ids = async (): Promise<number[]> =>
    (await client.query(`SELECT id FROM "${schema}".app ORDER BY id`)).rows.map((r) => (r as { id: number }).id);
  const mark = async (resource: string): Promise<{ token: string; lease: string | null; version: string } | undefined> =>
    (await client.query(`SELECT token::text AS token, lease, ctid::text || ':' || xmin::text AS version FROM "${schema}".fences WHERE resource = $1`, [resource]))
      .rows[0] as { token: string; lease: string | null; version: string } | undefined;
  /** Whether another session can lock the mark's row right now (false: a transaction holds it). */
  const markFree = async (resource: string): Promise<boolean> => {
    await other.query('BEGIN');
    try {
      await other.query(`SELECT 1 FROM "${schema}".fences WHERE resource = $1 FOR UPDATE NOWAIT`, [resource]);
      return true;
    } catch (err) {
      if ((err as { code?: string }).code === '55P03') return false;
      throw err;
    } finally {
      await other.query('ROLLBACK');
    }
  };

  /** What another process holding this term does when it commits a fenced write: the row's nonce moves to one this process never set. */
  const cloneWrites = (name: string): Promise<unknown> => client.query(`UPDATE "${schema}".leases SET fence_nonce = 'the-clone''s' WHERE name = $1`, [name]);

  /**
   * A store opened afresh (which functions a schema has is learned once per store) on a schema
   * from before a migration (`drop` undoes it), a table for the writes, and a term on it.
   */
  async function onOldSchema(drop: (schema: string) => string, body: (schema: string, term: Term) => Promise<void>): Promise<void> {
    const old = await makeTestStore('postgres');
    const oldSchema = new URL(old.url).searchParams.get('schema')!;
    try {
      await client.query(`${drop(oldSchema)}; CREATE TABLE "${oldSchema}".app (id int PRIMARY KEY)`);
      const lh = new Leasehold({ store: old.store });
      try {
        await body(oldSchema, await lh.lease('old', { ttl: TTL_MS }).acquire());
      } finally {
        await lh.close();
      }
    } finally {
      await old.cleanup();
    }
  }

  void it('costs the three round trips of an unfenced transaction: the mark advanced by fence_advance with BEGIN, the lease row checked by the cached fence_rotate with COMMIT', async () => {
    const term = await leader(t.store, 'rt');
    const { db, sent } = recording(client);
    await fencedTransaction(db, { resource: 'rt', term }, (tx) => tx.query(`INSERT INTO "${schema}".app VALUES (1)`));
    assert.equal(sent.length, 3, sent.join('\n---\n'));
    assert.match(sent[0]!, new RegExp(`^BEGIN;.*"${schema}"\\.fence_advance\\(`, 's'));
    assert.match(sent[2]!, new RegExp(`SELECT 1 / "${schema}"\\.fence_rotate\\(.*\\)::int AS ours;\\s*COMMIT$`, 's'));
    const m = await mark('rt');
    assert.deepEqual([m?.token, m?.lease], [term.token.toString(), 'rt']);
    assert.deepEqual(await ids(), [1]);
  });

  void it('refuses a term another process has written with, in the round trip of its COMMIT: nothing committed, the term ends as cloned', async () => {
    const term = await leader(t.store, 'clone');
    await fencedTransaction(client, { resource: 'clone', term }, (tx) => tx.query(`INSERT INTO "${schema}".app VALUES (2)`));
    await cloneWrites('clone');
    await assert.rejects(
      fencedTransaction(client, { resource: 'clone', term }, (tx) => tx.query(`INSERT INTO "${schema}".app VALUES (3)`)),
      (err: unknown) => err instanceof LeaseLostError && err.reason === 'cloned',
    );
    assert.ok(!(await ids()).includes(3), 'the refused write committed nothing');
    assert.ok(term.signal.aborted, 'the term ended in this process');
    const [row] = (await client.query(`SELECT holder, ended_by FROM "${schema}".leases WHERE name = 'clone'`)).rows as { holder: string | null; ended_by: string | null }[];
    assert.deepEqual(row, { holder: null, ended_by: 'conflict' }, 'the store ended the term for both');
  });

  void it('on a schema from before migration 16 (no fence_rotate) sends the statement, and still refuses a clone', async () => {
    await onOldSchema(
      (schema) => `DROP FUNCTION "${schema}".fence_rotate(text, text, bigint, text, text[], boolean)`,
      async (oldSchema, term) => {
        const { db, sent } = recording(client);
        await fencedTransaction(db, { resource: 'old', term }, (tx) => tx.query(`INSERT INTO "${oldSchema}".app VALUES (1)`));
        assert.equal(sent.length, 3);
        assert.doesNotMatch(sent[2]!, /fence_rotate/);
        assert.match(sent[2]!, /COMMIT$/);
        await client.query(`UPDATE "${oldSchema}".leases SET fence_nonce = 'the-clone''s' WHERE name = 'old'`);
        await assert.rejects(
          fencedTransaction(client, { resource: 'old', term }, (tx) => tx.query(`INSERT INTO "${oldSchema}".app VALUES (2)`)),
          (err: unknown) => err instanceof LeaseLostError && err.reason === 'cloned',
        );
        assert.deepEqual((await client.query(`SELECT id FROM "${oldSchema}".app`)).rows, [{ id: 1 }]);
      },
    );
  });

  for (const via of ['pg', 'kysely'] as const) {
    const write = (term: Term, resource: string, id: number, during?: () => Promise<void>): Promise<void> =>
      via === 'pg'
        ? fencedTransaction(client, { resource, term }, async (tx) => {
            await tx.query(`INSERT INTO "${schema}".app VALUES (${id})`);
            await during?.();
          })
        : kyselyFence.fencedTransaction(kysely, { resource, term }, async (trx) => {
            await sql`INSERT INTO ${sql.table(`${schema}.app`)} VALUES (${id})`.execute(trx);
            await during?.();
          });

    void it(`${via}: a term writing again leaves the mark's row as it is, and still holds its lock until COMMIT`, async () => {
      const resource = `again-${via}`;
      const term = await leader(t.store, resource);
      const base = via === 'pg' ? 10 : 20;
      await write(term, resource, base);
      const first = await mark(resource);
      assert.equal(first?.token, term.token.toString());
      let locked: boolean | undefined;
      await write(term, resource, base + 1, async () => {
        locked = !(await markFree(resource));
      });
      assert.equal(locked, true, 'the mark was not locked while the fenced transaction ran: two writers could interleave');
      assert.equal((await mark(resource))?.version, first?.version, 'the mark was rewritten although it already held the token');
      assert.ok(await markFree(resource), 'the lock outlived the transaction');
      assert.ok((await ids()).includes(base + 1));
    });

    void it(`${via}: a higher mark is FencedError and another lease's mark FenceOwnedError; nothing of either write commits`, async () => {
      const resource = `refused-${via}`;
      const term = await leader(t.store, resource);
      const base = via === 'pg' ? 30 : 40;
      await write(term, resource, base);
      await client.query(`UPDATE "${schema}".fences SET token = token + 1 WHERE resource = $1`, [resource]);
      await assert.rejects(write(term, resource, base + 1), (err: unknown) => err instanceof FencedError);
      await client.query(`UPDATE "${schema}".fences SET token = $2, lease = 'someone-else' WHERE resource = $1`, [resource, term.token.toString()]);
      await assert.rejects(write(term, resource, base + 2), (err: unknown) => err instanceof FenceOwnedError);
      const got = await ids();
      assert.ok(got.includes(base) && !got.includes(base + 1) && !got.includes(base + 2), `rows: ${got.join(',')}`);
    });
  }

  void it('a newer term of the lease moves the mark to its token', async () => {
    const lhA = new Leasehold({ store: t.store });
    open.push(lhA);
    const lease = lhA.lease('newer', { ttl: TTL_MS });
    const first = await lease.acquire();
    await fencedTransaction(client, { resource: 'newer', term: first }, (tx) => tx.query(`INSERT INTO "${schema}".app VALUES (50)`));
    await lease.release();
    const second = await lease.acquire();
    assert.ok(second.token > first.token);
    await fencedTransaction(client, { resource: 'newer', term: second }, (tx) => tx.query(`INSERT INTO "${schema}".app VALUES (51)`));
    assert.equal((await mark('newer'))?.token, second.token.toString());
  });

  void it('on a schema from before migration 21 (no fence_advance) sends the upsert, which refuses a higher mark the same way', async () => {
    await onOldSchema(
      (schema) => `DROP FUNCTION "${schema}".fence_advance(text, bigint, text)`,
      async (oldSchema, term) => {
        const { db, sent } = recording(client);
        await fencedTransaction(db, { resource: 'old', term }, (tx) => tx.query(`INSERT INTO "${oldSchema}".app VALUES (1)`));
        assert.equal(sent.length, 3);
        assert.doesNotMatch(sent[0]!, /fence_advance/);
        assert.match(sent[0]!, /ON CONFLICT \(resource\) DO UPDATE/);
        await client.query(`UPDATE "${oldSchema}".fences SET token = token + 1 WHERE resource = 'old'`);
        await assert.rejects(
          fencedTransaction(client, { resource: 'old', term }, (tx) => tx.query(`INSERT INTO "${oldSchema}".app VALUES (2)`)),
          (err: unknown) => err instanceof FencedError,
        );
        assert.deepEqual((await client.query(`SELECT id FROM "${oldSchema}".app`)).rows, [{ id: 1 }]);
      },
    );
  });
});
