/**
 * The exported fleet conformance suite (src/conformance/fleet.ts) against every built-in store
 * (filter with LEASEHOLD_TEST_STORES), each in its own namespace. A store without a fleet must
 * be refused by openFleet with a ConfigError naming the stores that have one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError } from '../../src/core/errors.js';
import { runFleetConformance } from '../../src/conformance/index.js';
import { openFleet } from '../../src/fleet/open.js';
import { MemoryStore } from '../../src/testing/index.js';
import { makeTestStore, selectedStores } from '../helpers/stores.js';

for (const kind of selectedStores()) {
  runFleetConformance(
    kind,
    async () => {
      const t = await makeTestStore(kind);
      const fleet = await openFleet(t.store);
      return {
        store: t.store,
        fleet: fleet.port,
        openFleet: async () => (await openFleet(await t.open())).port,
        cleanup: t.cleanup,
      };
    },
    // etcd grants whole seconds with a 2s floor, reports what is left rounded down, and sweeps
    // expired leases every ~500ms.
    kind === 'etcd' ? { shortTtlMs: 2000, expirySlackMs: 1200 } : {},
  );
}

void describe('fleet on a store without one', () => {
  void it('openFleet refuses it with a ConfigError naming the stores that have a fleet', async () => {
    const store = new MemoryStore();
    await assert.rejects(openFleet(store), (e: unknown) => e instanceof ConfigError && /PostgreSQL, SQLite, Redis, etcd and MySQL/.test(e.message) && /memory/.test(e.message));
  });
});
