/**
 * The exported fleet conformance suite (src/conformance/fleet.ts) against every built-in store
 * with a fleet (filter with LEASEHOLD_TEST_STORES), each in its own namespace. etcd has no fleet
 * yet: openFleet must say so, naming the stores that have one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError } from '../../src/core/errors.js';
import { runFleetConformance } from '../../src/conformance/index.js';
import { openFleet } from '../../src/fleet/open.js';
import { makeTestStore, selectedStores } from '../helpers/stores.js';

for (const kind of selectedStores()) {
  if (kind === 'etcd') {
    void describe('fleet on etcd', () => {
      void it('openFleet refuses it with a ConfigError naming the stores that have a fleet', async () => {
        const t = await makeTestStore(kind);
        try {
          await assert.rejects(openFleet(t.store), (e: unknown) => e instanceof ConfigError && /PostgreSQL, SQLite and Redis/.test(e.message) && /etcd/.test(e.message));
        } finally {
          await t.cleanup();
        }
      });
    });
    continue;
  }
  runFleetConformance(kind, async () => {
    const t = await makeTestStore(kind);
    const fleet = await openFleet(t.store);
    return {
      store: t.store,
      fleet: fleet.port,
      openFleet: async () => (await openFleet(await t.open())).port,
      cleanup: t.cleanup,
    };
  });
}
