/**
 * Liveness 'session' with contenders that start at once (issue 33 item 5): what per-slot cron
 * does at every slot, every replica opening its session and claiming together. Each round's
 * winner must hold a term tied to its own session, or its death would be noticed only at its
 * TTL. Before migration 14 (PostgreSQL) and the rival check of mysql/claim.ts, the session lock
 * went to one contender and the term to another in many rounds ("could not tie this term").
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import { NotAcquiredError } from '../../src/core/errors.js';
import type { LoggerLike } from '../../src/core/logger.js';
import type { Term } from '../../src/core/lease.js';
import { createRequire } from 'node:module';
import pg from 'pg';
import { makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';

/** A logger that keeps the engine's "could not tie this term" warnings: each is an untied term. */
function untiedLogger(): { untied: string[]; logger: LoggerLike } {
  const untied: string[] = [];
  const logger: LoggerLike = {
    debug() {},
    info() {},
    warn(obj: object, msg?: string) {
      if (/could not tie this term/.test(msg ?? '')) untied.push(JSON.stringify(obj));
    },
    error() {},
  };
  return { untied, logger };
}

const ROUNDS = 20;
const REPLICAS = 3;

/** Resolves once the server has no session `id` any more (its locks gone with it): a closed client's backend exits on its own time. */
async function sessionGone(kind: StoreKind, url: string, id: string): Promise<void> {
  let alive: () => Promise<boolean>;
  let end: () => Promise<void>;
  if (kind === 'postgres') {
    const c = new pg.Client({ connectionString: url.replace(/[?&]schema=[^&]*/, '') });
    await c.connect();
    alive = async () => (await c.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [Number(id)])).rowCount !== 0;
    end = () => c.end();
  } else {
    type Conn = { query(sql: string, values?: unknown[]): Promise<[unknown[], unknown]>; end(): Promise<void> };
    const mysql = createRequire(import.meta.url)('mysql2/promise') as { createConnection(uri: string): Promise<Conn> };
    const c = await mysql.createConnection(url.replace(/^mariadb:/, 'mysql:'));
    alive = async () => (await c.query('SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = ?', [Number(id)]))[0].length !== 0;
    end = () => c.end();
  }
  try {
    while (await alive()) await new Promise((r) => setTimeout(r, 10));
  } finally {
    await end();
  }
}

for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'mysql')) {
  void describe(`liveness session, contenders at once, on ${kind}`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      await t?.cleanup();
    });

    void it("a contender whose session missed the lock, claiming after the lock's holder came and went, holds a tied term", async () => {
      // Per-slot cron on a loaded host: replica B opens its session while replica A's holds the
      // lock, A claims, runs its short job and releases, and only then does B's claim land, on a
      // free lease and a free lock. Before sql/015 (and the free-lock rule of mysql/claim.ts) it
      // was granted a term tied to nothing ("could not tie this term").
      const { untied, logger } = untiedLogger();
      const store = await t.open();
      const client = new Leasehold({ store, logger });
      const name = `late-${randomBytes(4).toString('hex')}`;
      const first = await store.openSession!(name, 30_000);
      const late = await store.openSession!(name, 30_000);
      try {
        assert.equal(first.holdsLock, true, 'the first session takes the free lock as it opens');
        assert.equal(late.holdsLock, false, 'the second misses it');
        await first.close();
        await sessionGone(kind, t.url, first.id);
        const lease = client.lease(name, { ttl: 30_000, liveness: 'session' });
        const term = await lease.acquire({ wait: false, session: late });
        assert.ok(term.token > 0n);
        assert.deepEqual(untied, [], 'the term was granted tied to nothing');
        assert.equal(late.holdsLock, true, "the term's session holds the lock");
        await lease.release();
      } finally {
        await first.close();
        await late.close();
        await client.close();
      }
    });

    // The release over the session is BEGIN, the release, the unlock, COMMIT (postgres/session.ts).
    // A claim that read the row before that COMMIT saw a live term, skipped the session checks,
    // waited for the row in claim() and was granted it untied (before the unlock: the row's own
    // session looked alive, so nothing locked the row first; after it: the lock was free). The
    // holder's release is held here at that statement until the claim waits on the row.
    for (const gateAt of kind === 'postgres' ? ['SELECT pg_advisory_unlock_all()', 'COMMIT'] : []) {
      void it(`a claim landing while the holder's release over its session is in flight (held at ${gateAt}) holds a tied term`, async () => {
        const { untied, logger } = untiedLogger();
        const [a, b] = await Promise.all([t.open(), t.open()]);
        const holder = new Leasehold({ store: a, logger });
        const contender = new Leasehold({ store: b, logger });
        const name = `releasing-${randomBytes(4).toString('hex')}`;
        const held = await a.openSession!(name, 30_000);
        const late = await b.openSession!(name, 30_000);
        const watcher = new pg.Client({ connectionString: t.url.replace(/[?&]schema=[^&]*/, '') });
        await watcher.connect();
        try {
          assert.equal(late.holdsLock, false);
          const lease = holder.lease(name, { ttl: 30_000, liveness: 'session' });
          await lease.acquire({ wait: false, session: held });
          assert.deepEqual(untied, []);
          const c = (held as unknown as { client: { query: (...a: unknown[]) => Promise<unknown> } }).client;
          const query = c.query.bind(c);
          let open!: () => void;
          const gate = new Promise<void>((r) => (open = r));
          let atCommit!: () => void;
          const reached = new Promise<void>((r) => (atCommit = r));
          c.query = async (...args: unknown[]) => {
            if (args[0] === gateAt) {
              atCommit();
              await gate;
            }
            return query(...args);
          };
          const releasing = lease.release();
          await reached;
          const claim = contender.lease(name, { ttl: 30_000, liveness: 'session' }).acquire({ wait: false, session: late });
          // The claim waits on the row the release holds.
          for (;;) {
            const w = await watcher.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%claim_session%' AND pid <> pg_backend_pid()`);
            if (w.rowCount !== 0) break;
            await new Promise((r) => setTimeout(r, 5));
          }
          open();
          assert.equal(await releasing, true);
          const term = await claim;
          assert.ok(term.token > 0n);
          assert.deepEqual(untied, [], 'the term was granted tied to nothing');
          assert.equal(late.holdsLock, true);
        } finally {
          await watcher.end();
          await held.close();
          await late.close();
          await Promise.all([holder.close(), contender.close()]);
        }
      });
    }

    void it(`${REPLICAS} contenders claiming together, ${ROUNDS} rounds: every round's term is tied to its winner's session`, async () => {
      const { untied, logger } = untiedLogger();
      const clients = await Promise.all(Array.from({ length: REPLICAS }, async () => new Leasehold({ store: await t.open(), logger })));
      const name = `tie-${randomBytes(4).toString('hex')}`;
      const leases = clients.map((c) => c.lease(name, { ttl: 30_000, liveness: 'session' }));
      try {
        let won = 0;
        for (let round = 0; round < ROUNDS; round++) {
          const results = await Promise.all(
            leases.map((l) =>
              l.acquire({ wait: false }).then(
                (term): Term | undefined => term,
                (e: unknown) => {
                  if (e instanceof NotAcquiredError) return undefined;
                  throw e;
                },
              ),
            ),
          );
          const winners = results.filter((r) => r !== undefined);
          // Refused claims (a rival about to claim) answer 'busy'; a round may then have no
          // winner only if the rival's own claim lost to a term of this round: at most one term.
          assert.ok(winners.length <= 1, `round ${round}: ${winners.length} terms at once`);
          won += winners.length;
          for (const l of leases) await l.release();
        }
        // A round with no winner would be a slot that waits for a retry: the lock holder's own
        // claim always follows, so every round has one.
        assert.equal(won, ROUNDS, `only ${won} of ${ROUNDS} rounds had a winner`);
        assert.deepEqual(untied, [], `${untied.length} of ${ROUNDS} terms were not tied to their winner's session`);
      } finally {
        await Promise.all(clients.map((c) => c.close()));
      }
    });
  });
}
