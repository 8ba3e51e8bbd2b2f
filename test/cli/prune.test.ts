/**
 * `leasehold prune` as a subprocess, on every selected store: it deletes what the library's
 * pruneLedger would (old rows, the newest --keep and the newest row before the horizon kept),
 * prints it as JSON, prunes the fleet with --fleet, and refuses a horizon inside the catch-up
 * window or a --keep of 0 before opening the store (exit 2).
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { newNonce } from '../../src/core/identity.js';
import { openFleetPort, openSlotLedger } from '../../src/backends/index.js';
import { makeTestStore, selectedStores } from '../helpers/stores.js';
import { Sandbox } from './helpers.js';

const DAY = 86_400_000;
const cleanups: Array<() => Promise<unknown> | unknown> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

void it('prune refuses --older-than inside the catch-up window and --keep 0, before touching a store (exit 2)', async () => {
  const sb = new Sandbox('prune-usage');
  cleanups.push(() => sb.cleanup());
  const unreachable = ['--store', 'postgres://nobody@127.0.0.1:1/none'];
  const short = await sb.run(['prune', '--older-than', '30m', ...unreachable]);
  assert.equal(short.code, 2, short.stderr);
  assert.match(short.stderr, /catch-up window/);
  const keep = await sb.run(['prune', '--older-than', '30d', '--keep', '0', ...unreachable]);
  assert.equal(keep.code, 2, keep.stderr);
  const none = await sb.run(['prune', ...unreachable]);
  assert.equal(none.code, 2, none.stderr);
  assert.match(none.stderr, /--older-than/);
});

for (const kind of selectedStores()) {
  void describe(`leasehold prune on ${kind}`, () => {
    void it('deletes old slot rows of every schedule, keeping the newest --keep, and the fleet records of long-deregistered agents with --fleet', async () => {
      const ts = await makeTestStore(kind);
      cleanups.push(() => ts.cleanup());
      const ledger = await openSlotLedger(ts.store, ts.url);
      cleanups.push(() => ledger.close());
      const nonce = newNonce();
      const [term] = await ts.store.claim([{ name: 'hourly', holder: 'seed', ttlMs: 60_000, expect: null, nextNonce: nonce }]);
      assert.ok(term?.outcome === 'acquired');
      const from = Math.floor(((await ts.store.now()) - 100 * DAY) / 1000) * 1000;
      const slots = Array.from({ length: 30 }, (_, i) => from + i * 3_600_000).map((t) => ({ key: new Date(t).toISOString(), slotAtMs: t }));
      await ledger.skip({ name: 'hourly', holder: 'seed', token: term.token, reason: 'seed', slots });
      const fleet = await openFleetPort(ts.store);
      cleanups.push(() => fleet.close());
      await fleet.registerAgent('retired', {});
      await fleet.deregisterAgent('retired');

      const sb = new Sandbox('prune');
      cleanups.push(() => sb.cleanup());
      // 90 days: past the timer cap parseDuration keeps, which a horizon must not be held to.
      const r = await sb.run(['prune', '--older-than', '90d', '--keep', '10', '--json', '--store', ts.url]);
      assert.equal(r.code, 0, r.stderr);
      const out = JSON.parse(r.stdout) as { deleted: number; byName: Record<string, number>; fleet: unknown };
      assert.deepEqual([out.deleted, out.byName['hourly'], out.fleet], [20, 20, null]);
      assert.equal((await ledger.records('hourly')).length, 10);
      assert.equal((await fleet.agents()).length, 1, 'no --fleet: the agent stays');
      // The agent deregistered a moment ago: --older-than counts from then, so wait a little past it.
      await new Promise((res) => setTimeout(res, 1100));
      const f = await sb.run(['prune', '--older-than', '1s', '--catch-up-window', '1s', '--fleet', '--json', '--store', ts.url]);
      assert.equal(f.code, 0, f.stderr);
      assert.deepEqual((JSON.parse(f.stdout) as { fleet: unknown }).fleet, { ownership: 0, agents: 1 });
      assert.deepEqual(await fleet.agents(), []);
      assert.equal((await ledger.records('hourly')).length, 10, 'the newest --keep rows stay');
    });
  });
}
