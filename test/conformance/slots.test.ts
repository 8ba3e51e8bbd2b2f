/**
 * The exported slot ledger conformance suite (src/conformance/slots.ts) against every built-in
 * ledger, on the real servers (filter with LEASEHOLD_TEST_STORES); each run gets its own
 * namespace (schema, file or key prefix).
 */
import { runSlotLedgerConformance, type SlotLedgerConformanceOptions } from '../../src/conformance/index.js';
import { openSlotLedger } from '../../src/backends/index.js';
import { makeTestStore, selectedStores, type StoreKind } from '../helpers/stores.js';

const LEDGERS: StoreKind[] = ['postgres', 'sqlite', 'redis', 'etcd', 'mysql'];
const OPTIONS: Partial<Record<StoreKind, SlotLedgerConformanceOptions>> = { etcd: { shortTtlMs: 2000, expirySlackMs: 1200 } };

for (const kind of selectedStores().filter((k) => LEDGERS.includes(k))) {
  runSlotLedgerConformance(
    kind,
    async () => {
      const ts = await makeTestStore(kind);
      const ledger = await openSlotLedger(ts.store, ts.url);
      return {
        store: ts.store,
        ledger,
        async cleanup() {
          await ledger.close();
          await ts.cleanup();
        },
      };
    },
    OPTIONS[kind],
  );
}
