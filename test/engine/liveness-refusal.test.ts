/**
 * Liveness 'session' is refused, with a LivenessError saying why, on every store that cannot
 * tie a term to its holder's session (issue 32): before any claim, at `leasehold.lease()`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Leasehold } from '../../src/core/leasehold.js';
import { LivenessError } from '../../src/core/errors.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const why: Record<string, RegExp> = {
  redis: /Redis scripts cannot see connections/,
  etcd: /etcd leases are TTL-only/,
};

// PostgreSQL, MySQL/MariaDB and SQLite have the mode (test/stores/*-liveness).
for (const kind of selectedStores().filter((k) => k === 'redis' || k === 'etcd')) {
  void describe(`liveness session on ${kind}`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      await t?.cleanup();
    });

    void it(`is refused with a LivenessError that says why, and nothing is claimed`, async () => {
      const lh = new Leasehold({ store: t.store });
      try {
        assert.throws(
          () => lh.lease('h32-refused', { liveness: 'session' }),
          (err: unknown) => err instanceof LivenessError && err.code === 'LIVENESS' && err.why === 'unsupported' && why[kind]!.test(err.message) && /liveness 'ttl'/.test(err.message),
        );
        assert.deepEqual(await t.store.list({ name: 'h32-refused' }), []);
        // The default stays 'ttl' and works as before.
        const term = await lh.lease('h32-refused', {}).acquire({ wait: false });
        assert.equal(term.token > 0n, true);
      } finally {
        await lh.close();
      }
    });
  });
}
