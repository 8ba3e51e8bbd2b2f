/**
 * The slot ledger's conformance suite: what every `SlotLedgerPort` (scheduler/ledger.ts) must
 * do, against the lease store whose rows fence it. Terms are taken with the store's own claim,
 * so the suite needs nothing but the two ports:
 *
 *   runSlotLedgerConformance('mysql', async (label) => {
 *     const store = await MyStore.open(...);
 *     return { store, ledger: new MySlotLedger(store), cleanup: () => store.close() };
 *   });
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { newNonce } from '../core/identity.js';
import type { LeaseStore } from '../backends/store.js';
import type { SlotClaimRequest, SlotLedgerPort, SlotTerm } from '../scheduler/ledger.js';

/** One isolated namespace of the store under test, with its ledger. */
export interface SlotLedgerTarget {
  store: LeaseStore;
  /** Claims must be fenced by `store`'s lease rows. */
  ledger: SlotLedgerPort;
  /** Closes the ledger and the store and drops the namespace. */
  cleanup(): Promise<void>;
}

export interface SlotLedgerConformanceOptions {
  /** The shortest TTL the store honours. Default 800 ms (etcd: 2000). */
  shortTtlMs?: number;
  /** How long after its reported expiry the store may still call a term live. Default 250 ms (etcd: 1200). */
  expirySlackMs?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const LONG_TTL = 60_000;

export function runSlotLedgerConformance(label: string, factory: (label: string) => Promise<SlotLedgerTarget>, options: SlotLedgerConformanceOptions = {}): void {
  const shortTtl = options.shortTtlMs ?? 800;
  const slack = options.expirySlackMs ?? 250;

  void describe(`slot ledger conformance: ${label}`, () => {
    let t: SlotLedgerTarget;
    before(async () => {
      t = await factory(label);
    });
    after(async () => {
      await t.cleanup();
    });

    /** A term of `name` for `holder`, taken with the store's own claim (no renewals). */
    async function take(name: string, holder: string, ttlMs = LONG_TTL): Promise<SlotTerm & { nonce: string; expiresAtMs: number }> {
      const nonce = newNonce();
      const [r] = await t.store.claim([{ name, holder, ttlMs, expect: null, nextNonce: nonce }]);
      assert.ok(r !== undefined && r.outcome === 'acquired', `the store did not grant ${name} to ${holder}: ${r?.outcome}`);
      return { name, holder, token: r.token, nonce, expiresAtMs: r.expiresAtMs };
    }
    const claim = (term: SlotTerm, key: string, more: Partial<SlotClaimRequest> = {}) =>
      t.ledger.claim({ ...term, key, slotAtMs: null, onInterrupted: 'rerun', rerunFailed: false, ...more });
    const complete = (term: SlotTerm, key: string, status: 'succeeded' | 'failed' | 'interrupted' = 'succeeded') =>
      t.ledger.complete({ ...term, key, status, exitCode: status === 'succeeded' ? 0 : 1, reason: null });
    /** By key: the order of rows without a slot time is the ledger's own. */
    const rows = async (name: string) =>
      (await t.ledger.records(name)).map((r) => [r.key, r.status, r.token] as const).sort((x, y) => (x[0] < y[0] ? -1 : 1));

    void it('a claim, skip or interruptStale is fenced unless the caller holds the lease with this token: other holder, stale or unknown token', async () => {
      const name = uniq('fence');
      const a1 = await take(name, 'host-a');
      assert.equal(await t.store.release({ name, holder: 'host-a', expect: [a1.nonce] }), true);
      const a2 = await take(name, 'host-a');
      assert.ok(a2.token > a1.token);
      const refused: Array<[string, SlotTerm]> = [
        ['a stale token of the same holder', { name, holder: 'host-a', token: a1.token }],
        ['another holder with the current token', { name, holder: 'host-b', token: a2.token }],
        ['a token the store never issued', { name, holder: 'host-a', token: a2.token + 1n }],
        ['a lease that was never taken', { name: uniq('never'), holder: 'host-a', token: 1n }],
      ];
      for (const [what, who] of refused) {
        assert.equal((await claim(who, 'k')).outcome, 'fenced', `claim: ${what}`);
        assert.equal((await t.ledger.skip({ ...who, reason: 'test', slots: [{ key: 's', slotAtMs: 1000 }] })).fenced, true, `skip: ${what}`);
        assert.equal((await t.ledger.interruptStale(who)).fenced, true, `interruptStale: ${what}`);
      }
      assert.deepEqual(await rows(name), [], 'a fenced call wrote a row');
      assert.equal((await claim(a2, 'k')).outcome, 'claimed');
    });

    void it('an expired lease is fenced by the store\'s clock, though nobody took it over', async () => {
      const name = uniq('expired');
      const a = await take(name, 'host-a', shortTtl);
      assert.equal((await claim(a, 'before')).outcome, 'claimed');
      const now = await t.store.now();
      await sleep(Math.max(0, a.expiresAtMs - now) + slack + 50);
      assert.equal((await claim(a, 'after')).outcome, 'fenced');
      assert.equal((await t.ledger.skip({ ...a, reason: 'test', slots: [{ key: 's', slotAtMs: 1000 }] })).fenced, true);
      assert.equal((await t.ledger.interruptStale(a)).fenced, true);
      assert.deepEqual(await rows(name), [['before', 'claimed', a.token]]);
    });

    void it('one row per (name, slot): a claim is idempotent within a term, concurrent claims agree, another name is independent', async () => {
      const name = uniq('unique');
      const other = uniq('unique-other');
      const a = await take(name, 'host-a');
      const o = await take(other, 'host-a');
      const answers = await Promise.all([0, 1, 2, 3, 4].map(() => claim(a, 'k')));
      assert.deepEqual(answers.map((r) => r.outcome), ['claimed', 'claimed', 'claimed', 'claimed', 'claimed']);
      assert.ok(answers.every((r) => r.outcome === 'claimed' && r.rerunOf === null));
      assert.equal((await claim(o, 'k')).outcome, 'claimed', 'the same key under another name');
      assert.equal((await complete(a, 'k')).completed, true);
      const done = await claim(a, 'k');
      assert.equal(done.outcome, 'done');
      assert.equal(done.outcome === 'done' ? done.record.status : '', 'succeeded');
      assert.deepEqual(await rows(name), [['k', 'succeeded', a.token]]);
      assert.deepEqual(await rows(other), [['k', 'claimed', o.token]]);
      assert.equal((await complete(a, 'k')).completed, false, 'a second completion of a final row');
      assert.equal((await complete(a, 'nothing')).completed, false, 'a completion of a slot never claimed');
    });

    void it('a later term reruns an ended term\'s claim, and then the ended term\'s completion is refused', async () => {
      const name = uniq('rerun');
      const a = await take(name, 'host-a');
      assert.equal((await claim(a, 'k')).outcome, 'claimed');
      assert.equal(await t.store.release({ name, holder: 'host-a', expect: [a.nonce] }), true);
      const b = await take(name, 'host-b');
      const r = await claim(b, 'k');
      assert.equal(r.outcome, 'claimed');
      assert.equal(r.outcome === 'claimed' ? r.rerunOf : null, a.token);
      assert.equal((await complete(a, 'k')).completed, false, 'the ended term completed a slot a later term re-claimed');
      assert.deepEqual(await rows(name), [['k', 'claimed', b.token]]);
      assert.equal((await claim(a, 'k')).outcome, 'fenced');
      assert.equal((await complete(b, 'k', 'failed')).completed, true);
      const record = (await t.ledger.records(name))[0]!;
      assert.deepEqual([record.status, record.exitCode], ['failed', 1]);
      assert.ok(record.startedAtMs !== null && record.endedAtMs !== null && record.endedAtMs >= record.startedAtMs);
    });

    void it('a failed slot reruns only with rerunFailed; an interrupted one is recorded skipped with onInterrupted skip', async () => {
      const name = uniq('rules');
      const a = await take(name, 'host-a');
      for (const k of ['failed-1', 'failed-2', 'int']) assert.equal((await claim(a, k)).outcome, 'claimed');
      await complete(a, 'failed-1', 'failed');
      await complete(a, 'failed-2', 'failed');
      await complete(a, 'int', 'interrupted');
      assert.equal(await t.store.release({ name, holder: 'host-a', expect: [a.nonce] }), true);
      const b = await take(name, 'host-b');
      const kept = await claim(b, 'failed-1');
      assert.equal(kept.outcome, 'done', 'a failed slot of a schedule runs again');
      const rerun = await claim(b, 'failed-2', { rerunFailed: true });
      assert.equal(rerun.outcome === 'claimed' ? rerun.rerunOf : 'not claimed', a.token);
      const skipped = await claim(b, 'int', { onInterrupted: 'skip' });
      assert.equal(skipped.outcome, 'done');
      assert.equal(skipped.outcome === 'done' ? skipped.record.status : '', 'skipped');
      assert.equal(skipped.outcome === 'done' ? skipped.record.token : 0n, b.token);
      assert.deepEqual(await rows(name), [
        ['failed-1', 'failed', a.token],
        ['failed-2', 'claimed', b.token],
        ['int', 'skipped', b.token],
      ]);
    });

    void it('interruptStale marks only lower tokens\' claimed rows of this name; skip writes only slots with no row', async () => {
      const name = uniq('stale');
      const other = uniq('stale-other');
      const a = await take(name, 'host-a');
      const o = await take(other, 'host-a');
      for (const k of ['c1', 'c2', 'ok']) assert.equal((await claim(a, k)).outcome, 'claimed');
      await complete(a, 'ok');
      assert.equal((await claim(o, 'c1')).outcome, 'claimed');
      assert.equal(await t.store.release({ name, holder: 'host-a', expect: [a.nonce] }), true);
      const b = await take(name, 'host-b');
      assert.equal((await claim(b, 'mine')).outcome, 'claimed');
      const s = await t.ledger.interruptStale(b);
      assert.deepEqual([s.fenced, s.interrupted], [false, 2]);
      assert.deepEqual(await rows(name), [
        ['c1', 'interrupted', a.token],
        ['c2', 'interrupted', a.token],
        ['mine', 'claimed', b.token],
        ['ok', 'succeeded', a.token],
      ]);
      assert.deepEqual(await rows(other), [['c1', 'claimed', o.token]]);
      const rerun = await claim(b, 'c1');
      assert.equal(rerun.outcome === 'claimed' ? rerun.rerunOf : 'not claimed', a.token);
      const sk = await t.ledger.skip({ ...b, reason: 'missed (test)', slots: [{ key: 'c2', slotAtMs: null }, { key: 'new', slotAtMs: null }, { key: 'ok', slotAtMs: null }] });
      assert.deepEqual([sk.fenced, sk.skipped], [false, 1]);
      const added = (await t.ledger.records(name)).find((r) => r.key === 'new')!;
      assert.deepEqual([added.status, added.token, added.holder, added.reason], ['skipped', b.token, 'host-b', 'missed (test)']);
    });

    void it('a slot not yet due by the store\'s clock is early and writes nothing; records filters and orders by slot time', async () => {
      const name = uniq('time');
      const a = await take(name, 'host-a');
      const storeNow = await t.store.now();
      const early = await claim(a, 'future', { slotAtMs: storeNow + 60_000 });
      assert.equal(early.outcome, 'early');
      assert.ok(Math.abs(early.storeNowMs - storeNow) < 30_000, `storeNowMs ${early.storeNowMs} is not the store's time (${storeNow})`);
      const base = Math.floor(storeNow / 1000) * 1000 - 10_000;
      // Claimed out of order; records come back oldest slot first.
      for (const i of [3, 1, 2]) assert.equal((await claim(a, `s${i}`, { slotAtMs: base + i * 1000 })).outcome, 'claimed');
      assert.deepEqual((await t.ledger.records(name)).map((r) => r.key), ['s1', 's2', 's3']);
      assert.deepEqual((await t.ledger.records(name)).map((r) => r.slotAtMs), [base + 1000, base + 2000, base + 3000]);
      assert.deepEqual((await t.ledger.records(name, { sinceMs: base + 1000 })).map((r) => r.key), ['s2', 's3']);
      assert.deepEqual((await t.ledger.records(name, { sinceMs: 0, untilMs: base + 2000 })).map((r) => r.key), ['s1', 's2']);
      assert.deepEqual((await t.ledger.records(name, { limit: 2 })).map((r) => r.key), ['s2', 's3'], 'limit keeps the newest');
      assert.deepEqual(await t.ledger.records(uniq('empty')), []);
    });
  });
}
