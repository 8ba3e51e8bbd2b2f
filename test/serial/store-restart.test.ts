/**
 * Store restarts while leases are held: PostgreSQL restarted, Redis restarted EMPTY (no
 * persistence, the common default), etcd restarted, MariaDB shut down cleanly and started again.
 * No token may ever go backwards, and a leader must be back without anyone touching anything.
 *
 * Each store is a server of this file's own on a loopback port nobody else uses (test/chaos/own-servers.ts, on the ports below), started
 * for its case and removed after: restarting the machine's shared servers made this file run in
 * the test runner's last phase, alone (31 s of npm test's wall time on 2026-12-07), and a shared
 * server restarted is a fault for every other file that happens to be using it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Term } from '../../src/core/lease.js';
import { openStore } from '../../src/backends/index.js';
import { selectedStores, type StoreKind } from '../helpers/stores.js';
import { startOwnServer, type OwnPorts, type OwnServer } from '../chaos/own-servers.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Ports no other test uses (chaos-private keeps OWN_PORTS; the topologies 24xxx, 26050-27990 and 3307-3318). */
const PORTS: OwnPorts = { postgres: 25442, redis: 26489, etcd: 22391, mysql: 3319 };

void describe('store restarts while a lease is held', () => {
  for (const kind of selectedStores()) {
    void it(`${kind}: tokens never go backwards and a leader is back on its own`, async (t) => {
      const server = await startOwnServer(kind, PORTS);
      if ('unsupported' in server) {
        t.skip(server.unsupported);
        return;
      }
      try {
        await restartsWhileHeld(kind, server);
      } finally {
        await server.stop();
      }
    });
  }
});

/** Two electors on the server; the server restarted under the first term's holder. */
async function restartsWhileHeld(kind: StoreKind, server: OwnServer): Promise<void> {
  const first = await openStore(server.url);
  await first.migrate();
  const stores = [first, await openStore(server.url)];
  const ttl = kind === 'etcd' ? 2000 : 1000;
  const name = `restart-${randomBytes(4).toString('hex')}`;
  const clients = stores.map((store) => new Leasehold({ store }));
  const terms: { token: bigint; by: number; at: number }[] = [];
  const electors = clients.map((c, i) =>
    c.elect(name, { onElected: (term: Term) => void terms.push({ token: term.token, by: i, at: performance.now() }) }, { ttl }),
  );
  try {
    while (terms.length === 0) await sleep(20);
    await sleep(ttl); // a few renewals under the first term
    const before = terms.length;
    const restartedAt = performance.now();
    // PostgreSQL fast, MariaDB clean with 500 ms down, Redis empty, etcd on the same data.
    await server.restart(kind === 'mysql' ? 500 : 0);
    // Redis was restarted empty: the store's data (and its notion of the term) is gone.
    const deadline = performance.now() + 60_000;
    while (performance.now() < deadline && !electors.some((e) => e.isLeader && terms.length > 0)) await sleep(50);
    // Wait for the dust to settle: a leader holds, and has renewed at least once.
    await sleep(ttl * 2);
    const leaders = electors.filter((e) => e.isLeader).length;
    assert.equal(leaders, 1, `exactly one leader after the restart (have ${leaders})`);
    for (let i = 1; i < terms.length; i++) {
      assert.ok(terms[i]!.token > terms[i - 1]!.token, `term tokens strictly increase across the restart: ${terms.map((x) => x.token).join(' < ')}`);
    }
    const backAfter = (terms.length > before ? terms[terms.length - 1]!.at : performance.now()) - restartedAt;
    process.stdout.write(
      `# ${kind}: terms ${terms.map((x) => x.token).join(', ')}; leader back ${backAfter.toFixed(0)}ms after the restart began\n`,
    );
  } finally {
    await Promise.all(electors.map((e) => e.stop()));
    await Promise.all(clients.map((c) => c.close()));
    // A Leasehold given a store leaves it open: closed here, before the server goes (a Redis
    // client left open reconnects to a stopped server for ever, and holds the process open).
    await Promise.all(stores.map((s) => s.close()));
  }
}
