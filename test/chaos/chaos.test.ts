/**
 * The chaos harness in `npm test` on MySQL: the short profile cut to 25s (about 30s, 4 worker
 * processes, TTL 1s), run as the CLI a human would run. Its nemesis restarts the machine's shared
 * MariaDB, so the test runner runs this file in its last phase, alone. PostgreSQL, Redis and etcd
 * run on servers of their own in chaos-private.test, and SQLite (which restarts nothing) with the
 * negative control in sqlite-chaos.test, both in the parallel phase.
 *
 * A failing run is replayable: its seed and report directory are printed. Pin the seed with
 * LEASEHOLD_CHAOS_SEED.
 */
import { describe, it } from 'node:test';
import { selectedStores } from '../helpers/stores.js';
import { negativeControl, shortProfile } from './short.js';

void describe('chaos: the short profile proves the fence under every fault (a restarted shared server)', () => {
  if (selectedStores().includes('mysql')) {
    void it('on mysql: real processes, every fault kind the store supports, zero invariant violations', { timeout: 240_000 }, async (t) => {
      await shortProfile('mysql', t);
    });
  }
  // The negative control runs on SQLite (sqlite-chaos.test.ts); without SQLite, on PostgreSQL here.
  if (!selectedStores().includes('sqlite') && selectedStores().includes('postgres')) {
    void it('negative control: with the fence switched off (--unfenced) the same harness reports violations', { timeout: 180_000 }, async (t) => {
      await negativeControl('postgres', t);
    });
  }
});
