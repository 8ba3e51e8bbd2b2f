/**
 * The chaos harness in `npm test` on PostgreSQL, Redis and etcd: the short profile cut to 25s
 * (about 30s a store, 4 worker processes, TTL 1s), run as the CLI a human would run, each against
 * a server of the run's own (own-servers.ts) that its nemesis restarts. Nothing here restarts a
 * shared server, so this file runs in the parallel phase (it ran alone in the last phase while the
 * nemesis restarted the machine's servers: about 95 s of npm test's wall time).
 *
 * A failing run is replayable: its seed and report directory are printed. Pin the seed with
 * LEASEHOLD_CHAOS_SEED, and point a run at a server of your own with LEASEHOLD_TEST_<STORE>_URL.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { STORES_AT_ONCE, selectedStores } from '../helpers/stores.js';
import { serverIncarnation, startOwnServer } from './own-servers.js';
import { shortProfile } from './short.js';

const stores = selectedStores().filter((k) => k === 'postgres' || k === 'redis' || k === 'etcd');

void describe('chaos: the short profile proves the fence under every fault (a server of its own)', { concurrency: STORES_AT_ONCE }, () => {
  for (const kind of stores) {
    void it(`on ${kind}: real processes, every fault kind the store supports, zero invariant violations`, { timeout: 240_000 }, async (t) => {
      const own = await startOwnServer(kind);
      if ('unsupported' in own) {
        process.stdout.write(`[chaos] skipping ${kind}: ${own.unsupported}\n`);
        t.skip(own.unsupported);
        return;
      }
      try {
        const shared = await serverIncarnation(kind);
        const mine = await serverIncarnation(kind, own.env);
        const report = await shortProfile(kind, t, { env: own.env });
        if (report === null) return; // skipped, saying why
        // The nemesis restarted the run's own server (shortProfile asserts a restart was injected),
        // and never the shared one that the files running beside this one use.
        assert.equal(await serverIncarnation(kind), shared, `the shared ${kind} server was restarted by a run that was given a server of its own`);
        assert.notEqual(await serverIncarnation(kind, own.env), mine, `the run's own ${kind} server was never restarted`);
      } finally {
        await own.stop();
      }
    });
  }
});
