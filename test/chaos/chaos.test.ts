/**
 * The chaos harness in `npm test` on MySQL: the short profile cut to 25s (about 30s, 4 worker
 * processes, TTL 1s), run as the CLI a human would run, against a MariaDB of the run's own
 * (own-servers.ts, port 3321) that its nemesis restarts. Nothing here restarts a shared server,
 * so this file runs in the test runner's parallel phase (it ran alone in the last phase while the
 * nemesis restarted the machine's MariaDB: 28 s of npm test's wall time on 2026-12-07).
 * PostgreSQL, Redis and etcd run the same way in chaos-private.test, and SQLite (which restarts
 * nothing) with the negative control in sqlite-chaos.test.
 *
 * A failing run is replayable: its seed and report directory are printed. Pin the seed with
 * LEASEHOLD_CHAOS_SEED.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { selectedStores } from '../helpers/stores.js';
import { serverIncarnation, startOwnServer } from './own-servers.js';
import { negativeControl, shortProfile } from './short.js';

void describe('chaos: the short profile proves the fence under every fault (MySQL, a server of its own)', () => {
  if (selectedStores().includes('mysql')) {
    void it('on mysql: real processes, every fault kind the store supports, zero invariant violations', { timeout: 240_000 }, async (t) => {
      const own = await startOwnServer('mysql');
      if ('unsupported' in own) {
        process.stdout.write(`[chaos] skipping mysql: ${own.unsupported}\n`);
        t.skip(own.unsupported);
        return;
      }
      try {
        const shared = await serverIncarnation('mysql');
        const mine = await serverIncarnation('mysql', own.env);
        const report = await shortProfile('mysql', t, { env: own.env });
        if (report === null) return; // skipped, saying why
        // The nemesis restarted the run's own server (shortProfile asserts a restart was injected),
        // and never the shared one that the files running beside this one use.
        assert.equal(await serverIncarnation('mysql'), shared, 'the shared MariaDB was restarted by a run that was given a server of its own');
        assert.notEqual(await serverIncarnation('mysql', own.env), mine, "the run's own MariaDB was never restarted");
      } finally {
        await own.stop();
      }
    });
  }
  // The negative control runs on SQLite (sqlite-chaos.test.ts); without SQLite, on PostgreSQL here.
  if (!selectedStores().includes('sqlite') && selectedStores().includes('postgres')) {
    void it('negative control: with the fence switched off (--unfenced) the same harness reports violations', { timeout: 180_000 }, async (t) => {
      await negativeControl('postgres', t);
    });
  }
});
