/**
 * A handed term is an offer until its waiter accepts it (PostgreSQL migration 17, MySQL
 * migration 10), on the real stores with one-write handover. The store's side of the rule, with
 * raw claims: the release hands the waiter a term that lapses a third of the waiter's TTL later
 * unless the waiter's claim accepts it; an offer nobody accepts keeps another contender out only
 * that long, the next term's token is larger, and the waiter's late acceptance is refused.
 * The engine's side (a process SIGKILLed with its registration kept) is in
 * test/engine/dead-kept-waiter.test.ts.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { newNonce } from '../../src/core/identity.js';
import type { ClaimResult } from '../../src/core/port.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'mysql')) {
  void describe(`a handed term is an offer until its waiter accepts it, on ${kind}`, () => {
    let t: TestStore;
    let other: LeaseStore;
    before(async () => {
      t = await makeTestStore(kind);
      other = await t.open();
    });
    after(async () => {
      await t.cleanup();
    });
    const contend = async (s: LeaseStore, name: string, holder: string, ttlMs: number, handoff?: string[]): Promise<ClaimResult & { sent: string }> => {
      const sent = newNonce();
      const [r] = await s.claim([{ name, holder, ttlMs, expect: null, nextNonce: sent, ...(handoff === undefined ? {} : { handoff }) }]);
      return { ...r!, sent };
    };

    void it('an offer nobody accepts lapses a third of the waiter’s TTL after the release; the next term has a larger token and the late acceptance is refused', async () => {
      const name = uniq('lapse');
      const WAITER_TTL = 1500;
      const a = await contend(t.store, name, 'A', 30_000);
      assert.equal(a.outcome, 'acquired');
      const b = await contend(other, name, 'B', WAITER_TTL, []);
      assert.equal(b.outcome, 'busy', 'B registered as the waiter');
      assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
      const [offer] = await t.store.list({ name });
      assert.equal(offer?.holder, 'B', 'handed to B');
      const offeredMs = offer!.expiresAtMs! - offer!.storeNowMs;
      assert.ok(offeredMs > 0 && offeredMs <= WAITER_TTL / 3, `offered for at most a third of B's TTL, not ${Math.round(offeredMs)} ms`);

      // B never comes back (a process killed between its registration and the release).
      const c1 = await contend(t.store, name, 'C', 30_000);
      assert.equal(c1.outcome, 'busy', 'the offer holds while it lasts: nobody else is granted it');
      await sleep(WAITER_TTL / 3 + 100);
      const c2 = await contend(t.store, name, 'C', 30_000);
      assert.equal(c2.outcome, 'acquired', 'the unaccepted offer lapsed after a third of the TTL');
      assert.ok(c2.outcome === 'acquired' && c2.token > offer!.token, 'a larger token than the offer’s');
      const late = await contend(other, name, 'B', WAITER_TTL, [b.sent]);
      assert.equal(late.outcome, 'busy', 'B’s late acceptance is refused: C holds the lease');
      assert.equal(late.holder, 'C');
      const history = (await t.store.history({ name })).map((h) => `${h.event} ${h.holder ?? h.previousHolder}`);
      assert.deepEqual(history, ['acquired A', 'released A', 'acquired B', 'takeover C']);
    });

    void it('an accepted offer runs the waiter’s whole TTL, from its acceptance', async () => {
      const name = uniq('accept');
      const WAITER_TTL = 1500;
      const a = await contend(t.store, name, 'A', 30_000);
      const b = await contend(other, name, 'B', WAITER_TTL, []);
      assert.equal(b.outcome, 'busy');
      assert.equal(await t.store.release({ name, holder: 'A', expect: [a.sent] }), true);
      const accepted = await contend(other, name, 'B', WAITER_TTL, [b.sent]);
      assert.equal(accepted.outcome, 'acquired');
      assert.ok(accepted.outcome === 'acquired' && accepted.expiresAtMs - accepted.storeNowMs > WAITER_TTL / 3, 'the waiter’s own TTL');
      // Past where the offer would have lapsed: still B's.
      await sleep(WAITER_TTL / 3 + 100);
      const c = await contend(t.store, name, 'C', 30_000);
      assert.equal(c.outcome, 'busy');
      assert.equal(c.holder, 'B');
    });
  });
}
