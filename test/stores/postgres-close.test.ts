/**
 * A PostgresStore closed while its LISTEN connection is still being set up (a follower started
 * waiting just before the process shut down) leaves no connection behind. It once did: close()
 * found no listener to stop (the listener was registered only once its set-up ended), the set-up
 * then finished and kept its connection, checked out and listening for ever, or, when close() had
 * already ended the store's own pool under the set-up's probe, kept a connection whose socket
 * held the process open (npm test of 2026-12-07: a test file that never exited).
 *
 * Real PostgreSQL. The close is made to land inside the set-up by the caller's pool: the set-up's
 * probe sends its NOTIFY through the store's pool, and this pool calls close() as it does.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { PostgresStore, type PgPoolLike } from '../../src/backends/postgres/store.js';
import { makeTestStore, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

void describe('PostgresStore.close() during the LISTEN connection set-up', () => {
  let t: TestStore;
  let admin: pg.Client;
  before(async () => {
    t = await makeTestStore('postgres');
    admin = new pg.Client({ connectionString: TEST_PG_URL });
    await admin.connect();
  });
  after(async () => {
    await admin?.end();
    await t?.cleanup();
  });

  /** Connections that named themselves `app` (the LISTEN connection's application_name). */
  const connectionsOf = async (app: string): Promise<number> =>
    Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1', [app])).rows[0]?.n);

  void it('leaves no LISTEN connection open, and close() and watchFreed() both settle', async () => {
    const app = `lh-close-${randomBytes(4).toString('hex')}`;
    const real = new pg.Pool({ connectionString: TEST_PG_URL, max: 2 });
    let store: PostgresStore | undefined;
    let closing: Promise<void> | undefined;
    // The caller's pool: passes everything through, and closes the store as the probe's NOTIFY goes out.
    const pool = new Proxy(real, {
      get(target, prop) {
        if (prop === 'query') {
          return (text: string, values?: unknown[]) => {
            if (closing === undefined && /pg_notify/.test(text)) closing = store!.close();
            return target.query(text, values);
          };
        }
        const v = Reflect.get(target, prop) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    }) as unknown as PgPoolLike;
    const schema = new URL(t.url).searchParams.get('schema')!;
    const notifyUrl = `${TEST_PG_URL}${TEST_PG_URL.includes('?') ? '&' : '?'}application_name=${app}`;
    try {
      store = await PostgresStore.create({ pool, schema, notifyUrl });
      const watching = store.watchFreed(() => undefined);
      const outcome = await watching.then(
        () => 'resolved',
        (err: unknown) => `rejected: ${String(err)}`,
      );
      assert.ok(closing !== undefined, 'the probe never sent its NOTIFY through the pool: the close did not land inside the set-up');
      await closing;
      // Settled either way (a stop function, or a ClosedError): what matters is what is left open.
      assert.match(outcome, /^(resolved|rejected: ClosedError)/);
      // The set-up's connection is its own (notify_url), so nothing in the caller's pool stays checked out either.
      assert.equal(await connectionsOf(app), 0, 'a LISTEN connection of the closed store is still open');
      assert.equal(real.totalCount - real.idleCount, 0, "a client of the caller's pool is still checked out");
    } finally {
      await real.end();
    }
  });
});
