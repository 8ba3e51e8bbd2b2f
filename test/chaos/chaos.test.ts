/**
 * The chaos harness in `npm test`: the short profile cut to 25s (about 30s a store, 4 worker
 * processes, TTL 1s), run as the CLI a human would run, on every selected store whose run
 * restarts a shared server (PostgreSQL, Redis, etcd, MariaDB: the nemesis restarts the store
 * under test). The test runner runs this file in its last phase, alone. SQLite's run restarts
 * nothing and lives in sqlite-chaos.test.ts with the negative control, in the parallel phase.
 *
 * A failing run is replayable: its seed and report directory are printed. Pin the seed with
 * LEASEHOLD_CHAOS_SEED.
 */
import { describe, it } from 'node:test';
import { selectedStores } from '../helpers/stores.js';
import { negativeControl, shortProfile } from './short.js';

const stores = selectedStores().filter((k) => k !== 'sqlite');

void describe('chaos: the short profile proves the fence under every fault', () => {
  for (const kind of stores) {
    void it(`on ${kind}: real processes, every fault kind the store supports, zero invariant violations`, { timeout: 240_000 }, async (t) => {
      await shortProfile(kind, t);
    });
  }
  // The negative control runs on SQLite (sqlite-chaos.test.ts); without SQLite, on PostgreSQL here.
  if (!selectedStores().includes('sqlite') && stores.includes('postgres')) {
    void it('negative control: with the fence switched off (--unfenced) the same harness reports violations', { timeout: 180_000 }, async (t) => {
      await negativeControl('postgres', t);
    });
  }
});
