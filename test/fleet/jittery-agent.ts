/**
 * Fixture: one fleet agent whose event loop stalls for a random while (up to maxStallMs) at
 * random moments, so its heartbeats land late by varying amounts, as on a loaded host. Prints
 * "live" once registered; exits on SIGTERM after deregistering.
 */
import { openStore } from '../../src/backends/index.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { Agent } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';

const cfg = JSON.parse(process.argv[2]!) as { url: string; id: string; heartbeatMs: number; staleAfterMs: number; maxStallMs: number };
const store = await openStore(cfg.url);
const leasehold = new Leasehold({ store, closeStore: true });
const agent = await Agent.start(leasehold, await openFleet(store), { id: cfg.id, heartbeat: cfg.heartbeatMs, staleAfter: cfg.staleAfterMs });
process.stdout.write('live\n');
agent.on('lost', (e) => {
  process.stderr.write(`lost: ${e.message}\n`);
  process.exitCode = 76;
});
const stall = (): void => {
  const until = performance.now() + Math.random() * cfg.maxStallMs;
  while (performance.now() < until) {
    // a busy host: nothing else in this process runs, heartbeats included
  }
  timer = setTimeout(stall, Math.random() * cfg.heartbeatMs * 2);
};
let timer = setTimeout(stall, Math.random() * cfg.heartbeatMs);
process.once('SIGTERM', () => {
  clearTimeout(timer);
  void agent.stop().then(() => leasehold.close());
});
