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
import type { SlotClaimRequest, SlotLedgerPort, SlotPruneRequest, SlotTerm } from '../scheduler/ledger.js';
import { pruneLedger } from '../scheduler/retention.js';
import type { ScheduleRecord } from '../scheduler/schedule-record.js';

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
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

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

    /** `count` skipped rows of `name`, one a second from `fromMs` (a whole second). */
    async function history(term: SlotTerm, fromMs: number, count: number): Promise<void> {
      const slots = Array.from({ length: count }, (_, i) => ({ key: new Date(fromMs + i * 1000).toISOString(), slotAtMs: fromMs + i * 1000 }));
      const r = await t.ledger.skip({ ...term, reason: 'history (test)', slots });
      assert.deepEqual([r.fenced, r.skipped], [false, count]);
    }
    const pruneAll = async (req: Omit<SlotPruneRequest, 'limit'>, limit = 1000): Promise<number[]> => {
      const batches: number[] = [];
      for (let more = true; more; ) {
        const r = await t.ledger.prune!({ ...req, limit });
        assert.ok(r.deleted <= limit, `a batch of at most ${limit} deleted ${r.deleted}`);
        batches.push(r.deleted);
        more = r.more && r.deleted > 0;
      }
      return batches;
    };

    void it('prune keeps the newest `keep` rows, every row newer than the horizon and every claimed row, in batches of at most `limit`; other names are untouched', async () => {
      assert.equal(typeof t.ledger.prune, 'function', 'the ledger has prune');
      const name = uniq('prune');
      const other = uniq('prune-other');
      const a = await take(name, 'host-a');
      const o = await take(other, 'host-a');
      const now = Math.floor((await t.store.now()) / 1000) * 1000;
      const old = now - 2 * DAY;
      await history(a, old, 150);
      await history(a, now - 60_000, 5);
      await history(o, old, 10);
      // A claim no term completed, older than everything: the next term marks it interrupted.
      const unfinished = new Date(old - 5000).toISOString();
      assert.equal((await claim(a, unfinished, { slotAtMs: old - 5000 })).outcome, 'claimed');
      const batches = await pruneAll({ name, olderThanMs: HOUR, keep: 100 }, 20);
      // 5 rows inside the horizon and the 95 newest before it make the 100 kept; 55 go.
      assert.equal(batches.reduce((x, y) => x + y, 0), 55, `batches ${batches.join(', ')}`);
      assert.ok(batches.length >= 3, `55 rows in batches of 20 took ${batches.length} calls`);
      const left = await t.ledger.records(name, { limit: 1_000_000 });
      assert.equal(left.length, 101);
      assert.deepEqual([left[0]!.key, left[0]!.status], [unfinished, 'claimed'], 'the unfinished claim stays');
      assert.equal(left[1]!.slotAtMs, old + 55 * 1000, 'the oldest row kept is the 100th newest');
      assert.equal(left.filter((r) => r.slotAtMs! >= now - 60_000).length, 5);
      assert.equal((await t.ledger.records(other)).length, 10, 'another name is not pruned');
      assert.deepEqual(await pruneAll({ name, olderThanMs: HOUR, keep: 100 }), [0], 'a second prune finds nothing');
      assert.ok((await t.ledger.names!()).includes(name) && (await t.ledger.names!()).includes(other), 'names lists both');
    });

    void it('prune never makes a schedule look new: its newest row, and the newest row before the horizon, stay whatever `keep` says', async () => {
      const HORIZON = HOUR;
      const stopped = uniq('prune-stopped');
      const running = uniq('prune-running');
      const s = await take(stopped, 'host-a');
      const r = await take(running, 'host-a');
      const now = Math.floor((await t.store.now()) / 1000) * 1000;
      await history(s, now - 2 * DAY, 20);
      await history(r, now - 2 * DAY, 20);
      await history(r, now - 30_000, 3);
      await pruneAll({ name: stopped, olderThanMs: HORIZON, keep: 1 });
      await pruneAll({ name: running, olderThanMs: HORIZON, keep: 1 });
      // A schedule stopped two days ago still has run before: a new leader's catch-up owes its window.
      assert.deepEqual((await t.ledger.records(stopped)).map((x) => x.slotAtMs), [now - 2 * DAY + 19_000]);
      // cron.ts's "older rows before the window" read: one row before the horizon stays.
      const before = await t.ledger.records(running, { sinceMs: 0, untilMs: now - HORIZON, limit: 1 });
      assert.deepEqual(before.map((x) => x.slotAtMs), [now - 2 * DAY + 19_000]);
      assert.equal((await t.ledger.records(running)).length, 4, 'the 3 rows inside the horizon and the boundary row');
    });

    void it('once-per rows are pruned only when asked, by when they ended, and never while claimed', async () => {
      const name = uniq('prune-once');
      const a = await take(name, 'host-a');
      for (const k of ['done-1', 'done-2', 'running']) assert.equal((await claim(a, k)).outcome, 'claimed');
      await complete(a, 'done-1');
      await complete(a, 'done-2', 'failed');
      assert.deepEqual(await pruneAll({ name, olderThanMs: HOUR, keep: 1 }), [0], 'once-per rows stay by default');
      // Past the ends by the store's clock (etcd's is read from a Date header, to the second).
      await sleep(1100);
      assert.deepEqual(await pruneAll({ name, olderThanMs: HOUR, keep: 1, oncePerOlderThanMs: 500 }), [2]);
      assert.deepEqual(await rows(name), [['running', 'claimed', a.token]]);
    });

    void it('pruneLedger prunes every name in batches and refuses a horizon inside the catch-up window', async () => {
      const name = uniq('prune-all');
      const a = await take(name, 'host-a');
      const now = Math.floor((await t.store.now()) / 1000) * 1000;
      await history(a, now - 40 * DAY, 30);
      await assert.rejects(pruneLedger(t.ledger, { olderThan: '30m' }), { code: 'CONFIG' });
      await assert.rejects(pruneLedger(t.ledger, { name, keep: 0 }), { code: 'CONFIG' });
      const r = await pruneLedger(t.ledger, { keep: 10, batchSize: 7 });
      assert.equal(r.byName[name], 20);
      assert.ok(r.batches >= 3, `${r.batches} batches`);
      assert.equal((await t.ledger.records(name)).length, 10);
    });

    void it("the schedule's record: written whole, read back by name, replaced by a later term's and never by an earlier one's", async () => {
      const { putSchedule, schedules } = t.ledger;
      if (putSchedule === undefined || schedules === undefined) {
        console.log(`# ${label}: no schedule records (putSchedule/schedules are optional); skipped`);
        return;
      }
      const name = uniq('record');
      const other = uniq('record-other');
      const record: ScheduleRecord = {
        name,
        description: '0 3 * * * (Europe/Berlin)',
        expression: '0 3 * * *',
        timeZone: 'Europe/Berlin',
        everyMs: null,
        mode: 'per-slot',
        catchUp: 'all',
        catchUpWindowMs: HOUR,
        catchingUp: { fromMs: 1_000, untilMs: 3_000, slots: 3 },
        holder: 'host-a',
        // Past 2^53: a token must survive the store's encoding exactly.
        token: 9_007_199_254_740_993n,
        updatedAtMs: 1_700_000_000_000,
      };
      const mine = async (): Promise<ScheduleRecord[]> => (await schedules.call(t.ledger)).filter((r) => r.name === name || r.name === other);
      await putSchedule.call(t.ledger, record);
      await putSchedule.call(t.ledger, { ...record, name: other, expression: null, timeZone: null, everyMs: 1000, description: 'every 1s', catchingUp: null, token: 1n });
      assert.deepEqual(await mine(), [
        record,
        { ...record, name: other, expression: null, timeZone: null, everyMs: 1000, description: 'every 1s', catchingUp: null, token: 1n },
      ].sort((a, b) => (a.name < b.name ? -1 : 1)));
      // An ended term's late write does not undo the newer term's record.
      await putSchedule.call(t.ledger, { ...record, catchUp: 'none', token: record.token - 1n });
      assert.equal((await mine()).find((r) => r.name === name)?.catchUp, 'all');
      // The same term (a catch-up ending) and a later term replace it.
      await putSchedule.call(t.ledger, { ...record, catchingUp: null });
      assert.equal((await mine()).find((r) => r.name === name)?.catchingUp, null);
      await putSchedule.call(t.ledger, { ...record, mode: 'leader', token: record.token + 1n });
      const last = (await mine()).find((r) => r.name === name);
      assert.equal(last?.mode, 'leader');
      assert.equal(last?.token, record.token + 1n);
    });
  });
}
