/**
 * A waiter whose acceptance of an offer is answered too late to use (a slow store, a paused
 * process) on the stores with one-write handover (PostgreSQL, MySQL). The accepted term holds
 * the nonce the accepting claim sent, which no later claim presents, so kept, it answered every
 * claim 'busy' for the waiter's whole TTL from the acceptance. The engine hands it back under
 * that nonce instead (the release is fenced by it: it ends that term only) and claims again.
 *
 * Real time: the answer is held back past the local deadline (the TTL less a 1 s safety margin)
 * by 300 ms, so 700 ms of the term are left in the store when it arrives; the hand-back is one
 * round trip, tens of milliseconds here.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import type { CallOptions, ClaimRequest, ClaimResult } from '../../src/backends/store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const TTL_MS = 3000;
const MARGIN_MS = 1000;
const HELD_BACK_MS = TTL_MS - MARGIN_MS + 300;
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'mysql')) {
  void describe(`an accepted offer answered too late to use, on ${kind}`, () => {
    let t: TestStore;
    const leaseholds: Leasehold[] = [];
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      for (const lh of leaseholds) await lh.close();
      await t.cleanup();
    });

    /**
     * One run of the scenario. Resolves with why it could not be run as meant (a precondition that
     * load can break), else asserts the property. On a loaded host the accepting claim itself can
     * fail in flight (its answer lost to a call deadline): its term then runs out unused and B's
     * next claim is a takeover, so the late answer is not an acceptance and the run tests nothing.
     */
    async function scenario(): Promise<string | undefined> {
      const name = uniq('late-accept');
      const a = new Leasehold({ store: await t.open(), closeStore: true, suspension: false });
      leaseholds.push(a);
      const storeB = await t.open();
      // B's store holds back its first granting answer past B's local deadline.
      let late: (ClaimResult & { outcome: 'acquired' }) | undefined;
      let lateArrived = 0;
      let busy = 0;
      const claim = storeB.claim.bind(storeB);
      storeB.claim = async (requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> => {
        const results = await claim(requests, options);
        const r = results.find((x) => x.name === name);
        if (r?.outcome === 'busy') busy++;
        if (late === undefined && r?.outcome === 'acquired') {
          late = { ...r, outcome: 'acquired' };
          await sleep(HELD_BACK_MS);
          lateArrived = performance.now();
        }
        return results;
      };
      const b = new Leasehold({ store: storeB, closeStore: true, suspension: false });
      leaseholds.push(b);
      const la = a.lease(name, { ttl: TTL_MS });
      const ta = await la.acquire();
      const lb = b.lease(name, { ttl: TTL_MS, safetyMargin: MARGIN_MS });
      const pb = lb.acquire({ wait: 10 * TTL_MS });
      for (let i = 0; i < 500 && busy === 0; i++) await sleep(10);
      assert.ok(busy > 0, 'precondition: B was told busy (and registered as the waiter)');
      await la.release();
      const tb = await pb;
      const tookMs = performance.now() - lateArrived;
      assert.ok(late !== undefined, 'precondition: B’s acceptance was granted');
      const history = await t.store.history({ name });
      const lines = history.map((h) => `${h.event} ${h.holder ?? h.previousHolder} ${h.token}`);
      const handed = history.find((h) => h.event === 'acquired' && h.holder !== null && h.token === late!.token);
      if (handed === undefined || handed.token <= ta.token) {
        await lb.release();
        return `the late answer was not the offer’s acceptance (${lines.join(', ')})`;
      }
      const released = history.find((h) => h.event === 'released' && h.token === late!.token);
      assert.ok(released !== undefined, `the late term was released (${lines.join(', ')})`);
      // Released while 700 ms of it were left (see the header): kept, it would have run to its expiry.
      assert.ok(released.atMs < late.expiresAtMs, `released ${Math.round(released.atMs - late.expiresAtMs)} ms after its expiry (${lines.join(', ')})`);
      assert.ok(tb.token > late.token, `B holds a new term: ${tb.token} > ${late.token}`);
      // Kept, the late term would have been waited out for its whole TTL (3 s) after the answer.
      assert.ok(tookMs < TTL_MS / 2, `B held a new term ${Math.round(tookMs)} ms after the late answer; its TTL is ${TTL_MS} ms`);
      await lb.release();
      return undefined;
    }

    void it('is released under its nonce at once, before it would have run out, and the waiter claims a new term', async (ctx) => {
      // A run whose precondition load broke is run again (three runs at most), and says so.
      const missed: string[] = [];
      for (let run = 0; run < 3; run++) {
        const why = await scenario();
        if (why === undefined) return;
        missed.push(why);
        ctx.diagnostic(`run ${run + 1} did not test it: ${why}`);
      }
      assert.fail(`precondition: no run of three had the late answer be the offer’s acceptance:\n${missed.join('\n')}`);
    });
  });
}
