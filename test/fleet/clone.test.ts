/**
 * A restored snapshot of an agent (a VM restored from a snapshot, or a fork heartbeating under
 * the parent's instance id) presents the same holder id with a nonce the store has moved past.
 * The lease rules cannot tell the two apart, so the liveness term ends for both: each stands
 * down (`lost`, reason `cloned`), the agent never shows up live twice, its resources read as
 * owner-dead, and one restarted agent is the one live agent again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { makeTestStore, type TestStore } from '../helpers/stores.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Lease } from '../../src/core/lease.js';
import { LeaseLostError } from '../../src/core/errors.js';
import { OwnerDeadError } from '../../src/fleet/errors.js';
import { snapshotLease, resumeLease } from '../../src/testing/index.js';
import { Agent } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';
import { AGENT_LEASE_OPTIONS } from '../../src/fleet/port.js';
import { cli } from './helpers.js';

const HEARTBEAT = 100;
const STALE = 600;

/** `fleet ls --json`: the agents as the CLI reports them. */
async function ls(url: string): Promise<{ id: string; live: boolean }[]> {
  const r = await cli(['fleet', 'ls', '--json', '--store', url]);
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as { id: string; live: boolean }[];
}

void describe('a cloned agent is detected (sqlite)', () => {
  let ts: TestStore;
  const closers: (() => Promise<void>)[] = [];
  before(async () => {
    ts = await makeTestStore('sqlite');
  });
  after(async () => {
    for (const c of closers.reverse()) await c().catch(() => undefined);
    await ts.cleanup();
  });

  void it('a restored snapshot heartbeating beside the original: both stand down, never two live; a restart is the one live agent', async () => {
    const fleet = await openFleet(ts.store);
    const s1 = await ts.open();
    const lh1 = new Leasehold({ store: s1 });
    closers.push(() => lh1.close());
    const original = await Agent.start(lh1, await openFleet(s1), { id: 'twin', labels: { pool: 'twin' }, heartbeat: HEARTBEAT, staleAfter: STALE });
    closers.push(() => original.stop());
    const placed = await fleet.place('twin-job', { labels: { pool: 'twin' } });
    assert.equal(placed.agent, 'twin');
    const originalLost = new Promise<LeaseLostError>((resolve) => original.once('lost', resolve));

    // The snapshot: what the agent's memory holds of its liveness term, restored in another
    // "process" (its own Leasehold and connection) under the same holder id.
    const snap = snapshotLease((original as unknown as { lease: Lease }).lease);
    assert.ok(snap !== undefined, 'the agent holds its liveness lease');
    const s2 = await ts.open();
    const lh2 = new Leasehold({ store: s2 });
    closers.push(() => lh2.close());
    const copyOptions = { ttl: STALE, renewInterval: HEARTBEAT };
    AGENT_LEASE_OPTIONS.add(copyOptions); // the restored copy is the agent's own lease, as in its process
    const copy = resumeLease(lh2.lease('agent/twin', copyOptions), snap);
    const copyLost = new Promise<unknown>((resolve) => copy.signal.addEventListener('abort', () => resolve(copy.signal.reason), { once: true }));

    // Meanwhile, never two live agents named twin, and never "live" after both stood down.
    let polls = 0;
    const watch = (async () => {
      while (!(original.signal.aborted && copy.signal.aborted)) {
        const rows = (await fleet.agents()).filter((a) => a.id === 'twin');
        assert.equal(rows.length, 1);
        polls++;
        await sleep(20);
      }
    })();

    const [a, b] = await Promise.all([originalLost, copyLost]);
    await watch;
    assert.ok(polls > 0);
    // The first to find the other's renewal is told "cloned"; the other may be told its term
    // was superseded by the same holder id. Either way the message names the cause.
    for (const [who, e] of [['the original', a], ['the restored copy', b]] as const) {
      assert.ok(e instanceof LeaseLostError && (e.reason === 'cloned' || e.reason === 'superseded'), `${who}: ${String(e)}`);
      assert.match(e.message, /snapshot|fork|clone|two processes/, `${who}: ${e.message}`);
    }
    assert.ok(original.signal.aborted, 'the original stood down');

    // Both stood down: nobody heartbeats agent/twin, so it is not live, and what it owns reads
    // as owned by a dead agent (never "no owner", never silently moved).
    await sleep(HEARTBEAT * 2);
    assert.deepEqual((await ls(ts.url)).map((r) => [r.id, r.live]), [['twin', false]]);
    const dead = await fleet.owner('twin-job').catch((e: unknown) => e);
    assert.ok(dead instanceof OwnerDeadError && dead.owner === 'twin', String(dead));
    assert.equal((await ts.store.history({ name: 'agent/twin' })).filter((h) => h.event === 'conflict').length, 1, 'the store recorded one clone conflict');

    // One process started again is the one live agent, and owns what twin owned.
    const s3 = await ts.open();
    const lh3 = new Leasehold({ store: s3 });
    closers.push(() => lh3.close());
    const restarted = await Agent.start(lh3, await openFleet(s3), { id: 'twin', labels: { pool: 'twin' }, heartbeat: HEARTBEAT, staleAfter: STALE, wait: false });
    closers.push(() => restarted.stop());
    assert.ok(restarted.token > BigInt(snap.token), 'a new life of the id has a larger token');
    assert.deepEqual((await ls(ts.url)).map((r) => [r.id, r.live]), [['twin', true]]);
    assert.equal((await fleet.owner('twin-job')).agent, 'twin');
  });
});
