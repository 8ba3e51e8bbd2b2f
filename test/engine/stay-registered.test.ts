/**
 * AcquireOptions.stayRegistered on the real stores. A waiting contender on a store with one-write
 * handover (PostgreSQL, MySQL) is registered as the lease's waiter; when its wait runs out it
 * used to withdraw at once. On a loaded store that withdrawal can land after the holder's
 * release has already handed the registration a term: a term nobody runs, granted after the
 * moment the contender gave up, until the withdrawal ends it. Per-slot cron gives up its wait for
 * an earlier slot's term at the next slot and tries that slot at once, so such a term read as
 * the next slot's winner to every replica, and the slot was lost (CI of 2026-12-06, MySQL:
 * test/scheduler/per-slot-ran-past-stores). With stayRegistered the registration is kept and
 * the next acquire takes it over, handed term included.
 *
 * Every release and withdrawal of the contender's process lands WITHDRAWAL_LATE_MS late. On
 * stores without handover the option changes nothing, and the same outcomes hold (the release
 * frees the lease, the next try takes it).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import { NotAcquiredError } from '../../src/core/errors.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';
import { lateReleases } from '../helpers/late-releases.js';

const WITHDRAWAL_LATE_MS = 1500;
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

for (const kind of selectedStores()) {
  void describe(`stayRegistered on ${kind}`, () => {
    let t: TestStore;
    const opened: LeaseStore[] = [];
    const leaseholds: Leasehold[] = [];
    const delay = { ms: WITHDRAWAL_LATE_MS };
    before(async () => {
      t = await makeTestStore(kind);
      await t.store.migrate();
    });
    after(async () => {
      delay.ms = 0;
      for (const lh of leaseholds) await lh.close();
      for (const s of opened) await s.close();
      await t.cleanup();
    });
    /** A process on its own connection; `late`: its releases land WITHDRAWAL_LATE_MS late. */
    const processOn = async (late: boolean): Promise<Leasehold> => {
      const s = await t.open();
      opened.push(s);
      const lh = new Leasehold({ store: late ? lateReleases(s, delay) : s, suspension: false });
      leaseholds.push(lh);
      return lh;
    };

    void it('a contender that gave up staying registered takes the term a release handed it meanwhile, and keeps it past where a withdrawal would have landed', async () => {
      const name = uniq('stay');
      const a = (await processOn(false)).lease(name, { ttl: '6s' });
      const b = (await processOn(true)).lease(name, { ttl: '6s' });
      const ta = await a.acquire();
      await assert.rejects(b.acquire({ wait: '300ms', stayRegistered: true }), NotAcquiredError);
      await a.release();
      // The next try takes the registration over: the term the release handed it is its own.
      // (Without the option, the withdrawal sent as the wait ran out is still on its way, the
      // handed term reads 'busy' under this contender's own holder id, and this try fails.)
      const tb = await b.acquire({ wait: false, stayRegistered: true });
      assert.ok(tb.token > ta.token, `a new term, token ${tb.token} > ${ta.token}`);
      // Past where a withdrawal sent by the first try would land: the term is still held.
      await sleep(WITHDRAWAL_LATE_MS + 500);
      assert.equal(await b.confirm(), tb.token, 'the term survived: no withdrawal of the kept registration ended it');
      delay.ms = 0;
      await b.release();
      delay.ms = WITHDRAWAL_LATE_MS;
    });

    void it('release() withdraws a kept registration: a later release hands nothing to it', async () => {
      const name = uniq('withdraw');
      const a = (await processOn(false)).lease(name, { ttl: '6s' });
      const b = (await processOn(false)).lease(name, { ttl: '6s' });
      const c = (await processOn(false)).lease(name, { ttl: '6s' });
      await a.acquire();
      await assert.rejects(b.acquire({ wait: '300ms', stayRegistered: true }), NotAcquiredError);
      await b.release();
      await a.release();
      // Free, not handed to b's withdrawn registration: a third process takes it at once.
      const tc = await c.acquire({ wait: false });
      const history = await t.store.history({ name, limit: 10 });
      assert.ok(!history.some((h) => h.event === 'acquired' && h.holder === leaseholds.at(-2)!.holder), `nothing was handed to the withdrawn contender: ${history.map((h) => `${h.event} ${h.holder ?? '-'}`).join(', ')}`);
      await c.release();
      assert.ok(tc.token > 0n);
    });

    void it('a contender that gave up because a term granted since unlessReleasedSince holds the lease does not stay registered', async () => {
      const name = uniq('since');
      const a = (await processOn(false)).lease(name, { ttl: '6s' });
      const bh = await processOn(false);
      const b = bh.lease(name, { ttl: '6s' });
      const since = Date.now() - 60_000;
      await a.acquire();
      // The holding term was granted after `since`: the one this contender came to follow.
      const e = await b.acquire({ wait: '2s', unlessReleasedSince: since, stayRegistered: true }).then(
        () => assert.fail('acquired a held lease'),
        (err: unknown) => err,
      );
      assert.ok(e instanceof NotAcquiredError, String(e));
      await a.release();
      await sleep(200);
      const history = await t.store.history({ name, limit: 10 });
      assert.ok(!history.some((h) => h.event === 'acquired' && h.holder === bh.holder), `the release handed nothing to it: ${history.map((h) => `${h.event} ${h.holder ?? '-'}`).join(', ')}`);
    });

    void it('stopWaiting ends a wait at once as a give-up (NotAcquiredError), and a registration is withdrawn, not kept, even with stayRegistered', async () => {
      const name = uniq('stop');
      const a = (await processOn(false)).lease(name, { ttl: '6s' });
      const bh = await processOn(false);
      const b = bh.lease(name, { ttl: '6s' });
      await a.acquire();
      const stop = new AbortController();
      const started = performance.now();
      const waiting = b.acquire({ wait: '30s', stayRegistered: true, stopWaiting: stop.signal }).then(
        () => assert.fail('acquired a held lease'),
        (err: unknown) => err,
      );
      // Registered as the waiter by its first claim ('busy'), then stopped mid-sleep.
      await once(b, 'busy');
      stop.abort();
      const e = await waiting;
      const tookMs = performance.now() - started;
      assert.ok(e instanceof NotAcquiredError, `a give-up, not an abort: ${String(e)}`);
      // Far short of the 30 s wait and of the holder's 6 s TTL: the stop woke it, nothing else would.
      assert.ok(tookMs < 5000, `the wait ended at the stop, ${Math.round(tookMs)}ms after it began`);
      assert.equal(b.state, 'idle');
      await a.release();
      const history = await t.store.history({ name, limit: 10 });
      assert.ok(!history.some((h) => h.event === 'acquired' && h.holder === bh.holder), `nothing was handed to the stopped contender: ${history.map((h) => `${h.event} ${h.holder ?? '-'}`).join(', ')}`);
    });
  });
}
