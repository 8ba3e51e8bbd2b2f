/**
 * An elector that cannot contend says so, with no logger and no listener: a missing schema or
 * an SQL error becomes a process warning (stderr by default), `lastError`, and `contend-error`
 * for whoever listens; it keeps retrying, so it recovers once the schema exists. A store that is
 * merely down stays retryable. Against real PostgreSQL and SQLite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Leasehold } from '../../src/core/leasehold.js';
import { NotAcquiredError, SchemaError, StoreError, StoreUnavailableError } from '../../src/core/errors.js';
import { openStore } from '../../src/backends/index.js';
import type { Term } from '../../src/core/lease.js';
import type { SqliteStore } from '../../src/backends/sqlite/store.js';
import { downUrl, makeTestStore, selectedStores, TEST_PG_URL, type TestStore } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

/** Collects leasehold's process warnings while `fn` runs. */
async function withWarnings<T>(fn: (warnings: Error[]) => Promise<T>): Promise<T> {
  const warnings: Error[] = [];
  const on = (w: Error): void => {
    if ((w as { code?: string }).code === 'LEASEHOLD_CANNOT_CONTEND') warnings.push(w);
  };
  process.on('warning', on);
  try {
    return await fn(warnings);
  } finally {
    process.off('warning', on);
  }
}

async function until(what: string, ms: number, check: () => boolean): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) assert.fail(`${what} did not happen within ${ms}ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const stores = selectedStores();

if (stores.includes('postgres')) {
  void describe('an elector started before `leasehold migrate` (PostgreSQL)', () => {
    const schema = `lh_t_premigrate_${randomBytes(4).toString('hex')}`;
    after(async () => {
      const c = new pg.Client({ connectionString: TEST_PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await c.end();
    });

    void it('warns on stderr with no logger and no listener, keeps the SchemaError in lastError, and leads once migrated', async () => {
      const store = await openStore(`${TEST_PG_URL}?schema=${schema}`);
      const lh = new Leasehold({ store, closeStore: true });
      try {
        await withWarnings(async (warnings) => {
          const elected: Term[] = [];
          const elector = lh.elect(uniq('premigrate'), { onElected: (t) => void elected.push(t) }, { ttl: '5s' });
          await until('a process warning', 5000, () => warnings.length > 0);
          assert.match(warnings[0]!.message, /cannot contend/);
          assert.match(warnings[0]!.message, /leasehold migrate/);
          assert.equal(warnings[0]!.name, 'LeaseholdWarning');
          assert.ok(elector.lastError instanceof SchemaError);
          assert.equal(elector.isLeader, false);
          // Retries do not repeat the warning: one line per kind of error, not one per retry.
          await new Promise((r) => setTimeout(r, 1500));
          assert.equal(warnings.length, 1);

          await store.migrate();
          await until('a term after migrate', 10_000, () => elected.length > 0);
          assert.equal(elector.isLeader, true);
          assert.equal(elector.lastError, undefined);
          await elector.stop();
        });
      } finally {
        await lh.close();
      }
    });
  });
}

for (const kind of stores.filter((k) => k === 'postgres' || k === 'sqlite')) {
  void describe(`an elector whose store answers with an error (${kind})`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      await t?.cleanup();
    });

    void it('a listener gets the StoreError (not retryable), and no process warning is raised', async () => {
      const name = uniq('forbidden');
      if (kind === 'postgres') {
        const s = new URL(t.url).searchParams.get('schema')!;
        const c = new pg.Client({ connectionString: TEST_PG_URL });
        await c.connect();
        await c.query(`ALTER TABLE "${s}".leases ADD CONSTRAINT no_forbidden CHECK (name <> '${name}')`);
        await c.end();
      } else {
        (t.store as SqliteStore).database.exec(
          `CREATE TRIGGER no_forbidden BEFORE INSERT ON leasehold_leases WHEN NEW.name = '${name}' BEGIN SELECT RAISE(ABORT, 'forbidden name'); END`,
        );
      }
      const lh = new Leasehold({ store: t.store });
      try {
        await withWarnings(async (warnings) => {
          const errors: unknown[] = [];
          const elector = lh.elect(name, { onElected: () => {} }, { ttl: '5s' });
          elector.on('contend-error', (err) => void errors.push(err));
          await until('a contend-error', 5000, () => errors.length > 0);
          assert.ok(errors[0] instanceof StoreError, `got ${String(errors[0])}`);
          assert.equal(errors[0].retryable, false);
          assert.equal(warnings.length, 0, 'the listener handles it: no process warning');
          assert.equal(elector.isLeader, false);
          await elector.stop();
        });
      } finally {
        await lh.close();
      }
    });
  });
}

for (const kind of stores.filter((k) => k === 'postgres' || k === 'redis')) {
  void it(`a ${kind} store that is down is retried, not surfaced as a StoreError`, async () => {
    const store = await openStore(downUrl(kind)!);
    const lh = new Leasehold({ store, closeStore: true });
    try {
      const err = await lh
        .lease(uniq('down'))
        .acquire({ wait: '1500ms' })
        .catch((e: unknown) => e);
      assert.ok(err instanceof NotAcquiredError, `got ${String(err)}`);
      assert.ok(err.cause instanceof StoreUnavailableError && err.cause.retryable, 'the wait ran out on a retryable outage');
    } finally {
      await lh.close();
    }
  });
}
