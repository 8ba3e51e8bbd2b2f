/**
 * The lease-row half of a PostgreSQL fenced write with `term` (issue 34): migration 16's
 * `fence_rotate` (src/backends/postgres/sql/016-fence-rotate.ts) is the same UPDATE as the
 * statement it replaces, planned once per connection instead of on every write. What must
 * hold either way: a term-fenced write costs the round trips of an unfenced transaction, and a
 * lease row that another process holding this term has written (a restored snapshot, a fork)
 * refuses the write in the round trip of its COMMIT, with nothing of it committed. And a schema
 * from before migration 16 (a process upgraded before `leasehold migrate`) still gets that
 * refusal, from the statement its version's clients send.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { Leasehold } from '../../src/core/leasehold.js';
import { LeaseLostError } from '../../src/core/errors.js';
import type { Term } from '../../src/core/lease.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { fencedTransaction } from '../../src/fence/index.js';
import { makeTestStore, selectedStores, TEST_PG_URL, type TestStore } from '../helpers/stores.js';
import { recording } from '../helpers/pg-recording.js';

/** Long enough that no term here ends by time while a test runs. */
const TTL_MS = 60_000;


void describe('PostgreSQL fenced write with `term`', { skip: !selectedStores().includes('postgres') }, () => {
  let t: TestStore;
  let schema: string;
  let client: pg.Client;
  const open: Leasehold[] = [];

  before(async () => {
    t = await makeTestStore('postgres');
    schema = new URL(t.url).searchParams.get('schema')!;
    client = new pg.Client({ connectionString: TEST_PG_URL });
    await client.connect();
    await client.query(`CREATE TABLE "${schema}".app (id int PRIMARY KEY)`);
  });
  after(async () => {
    for (const lh of open) await lh.close();
    await client.end();
    await t.cleanup();
  });

  async function leader(store: LeaseStore, name: string): Promise<Term> {
    const lh = new Leasehold({ store });
    open.push(lh);
    return lh.lease(name, { ttl: TTL_MS }).acquire();
  }
  const rows = async (): Promise<number[]> =>
    (await client.query(`SELECT id FROM "${schema}".app ORDER BY id`)).rows.map((r) => (r as { id: number }).id);
  /** What another process holding this term does when it commits a fenced write: the row's nonce moves to one this process never set. */
  const cloneWrites = (name: string): Promise<unknown> => client.query(`UPDATE "${schema}".leases SET fence_nonce = 'the-clone''s' WHERE name = $1`, [name]);

  void it('costs the three round trips of an unfenced transaction, its lease-row check a call of the cached fence_rotate sent with COMMIT', async () => {
    const term = await leader(t.store, 'rt');
    const { db, sent } = recording(client);
    await fencedTransaction(db, { resource: 'rt', term }, (tx) => tx.query(`INSERT INTO "${schema}".app VALUES (1)`));
    assert.equal(sent.length, 3, sent.join('\n---\n'));
    assert.match(sent[0]!, /^BEGIN;/);
    assert.match(sent[2]!, new RegExp(`SELECT 1 / "${schema}"\\.fence_rotate\\(.*\\)::int AS ours;\\s*COMMIT$`, 's'));
    assert.deepEqual(await rows(), [1]);
  });

  void it('refuses a term another process has written with, in the round trip of its COMMIT: nothing committed, the term ends as cloned', async () => {
    const term = await leader(t.store, 'clone');
    await fencedTransaction(client, { resource: 'clone', term }, (tx) => tx.query(`INSERT INTO "${schema}".app VALUES (2)`));
    await cloneWrites('clone');
    await assert.rejects(
      fencedTransaction(client, { resource: 'clone', term }, (tx) => tx.query(`INSERT INTO "${schema}".app VALUES (3)`)),
      (err: unknown) => err instanceof LeaseLostError && err.reason === 'cloned',
    );
    assert.ok(!(await rows()).includes(3), 'the refused write committed nothing');
    assert.ok(term.signal.aborted, 'the term ended in this process');
    const [row] = (await client.query(`SELECT holder, ended_by FROM "${schema}".leases WHERE name = 'clone'`)).rows as { holder: string | null; ended_by: string | null }[];
    assert.deepEqual(row, { holder: null, ended_by: 'conflict' }, 'the store ended the term for both');
  });

  void it('on a schema from before migration 16 (no fence_rotate) sends the statement, and still refuses a clone', async () => {
    // A store opened afresh: which form a schema takes is learned once per store.
    const old = await makeTestStore('postgres');
    const oldSchema = new URL(old.url).searchParams.get('schema')!;
    try {
      await client.query(`DROP FUNCTION "${oldSchema}".fence_rotate(text, text, bigint, text, text[], boolean); CREATE TABLE "${oldSchema}".app (id int PRIMARY KEY)`);
      const lh = new Leasehold({ store: old.store });
      try {
        const term = await lh.lease('old', { ttl: TTL_MS }).acquire();
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
      } finally {
        await lh.close();
      }
    } finally {
      await old.cleanup();
    }
  });
});
