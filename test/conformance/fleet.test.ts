/**
 * The exported fleet conformance suite (src/conformance/fleet.ts) against every built-in store
 * with a fleet (filter with LEASEHOLD_TEST_STORES), each in its own namespace.
 */
import { runFleetConformance, type FleetConformanceOptions } from '../../src/conformance/index.js';
import { openFleet } from '../../src/fleet/open.js';
import { makeTestStore, selectedStores, type StoreKind } from '../helpers/stores.js';

function options(kind: StoreKind): FleetConformanceOptions {
  // etcd grants whole seconds with a 2s floor, and sweeps expired leases late.
  return kind === 'etcd' ? { shortTtlMs: 2000, expirySlackMs: 1200 } : {};
}

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
    options(kind),
  );
}
