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
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const ROUNDS = 20;
const REPLICAS = 3;

for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'mysql')) {
  void describe(`liveness session, contenders at once, on ${kind}`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      await t?.cleanup();
    });

    void it(`${REPLICAS} contenders claiming together, ${ROUNDS} rounds: every round's term is tied to its winner's session`, async () => {
      const untied: string[] = [];
      const logger: LoggerLike = {
        debug() {},
        info() {},
        warn(obj: object, msg?: string) {
          if (/could not tie this term/.test(msg ?? '')) untied.push(JSON.stringify(obj));
        },
        error() {},
      };
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
