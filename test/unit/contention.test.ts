// Contention as a pure machine (src/core/contention.ts): answers, failures and times in, the
// next step out. No store, no clock, no timers: every case is a few lines of numbers, including
// the ones the Lease-level tests cannot set up exactly (a handover registration across an
// identity change, a busy answer followed by a claim lost as the wait ends).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ContentionMachine, MAX_HANDOFF_NONCES, OUTAGE_LINE_EVERY_MS, followerRecheckMs, type NextStep } from '../../src/core/contention.js';
import { ConfigError, NotAcquiredError, StoreUnavailableError } from '../../src/core/errors.js';
import type { ClaimResult } from '../../src/core/port.js';

const TTL = 3000;
const RENEW = 1000;
const down = (): StoreUnavailableError => new StoreUnavailableError('connection refused');
const busy = (holder: string, expiresInMs: number, now = 0): ClaimResult & { outcome: 'busy' } => ({ name: 'job', outcome: 'busy', holder, token: 7n, expiresAtMs: now + expiresInMs, storeNowMs: now });
const acquired = (nonce?: string): ClaimResult => ({
  name: 'job',
  outcome: 'acquired',
  holder: 'me',
  token: 8n,
  expiresAtMs: TTL,
  storeNowMs: 0,
  ...(nonce === undefined ? {} : { nonce }),
});

function machine(waitUntil: number, handsOver = false, random = (): number => 0.5): ContentionMachine {
  return new ContentionMachine({ name: 'job', ttlMs: TTL, renewMs: RENEW, waitUntil, handsOver, random });
}

function sleepOf(step: NextStep): number {
  assert.equal(step.kind, 'sleep', JSON.stringify(step, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v)));
  return step.kind === 'sleep' ? step.ms : NaN;
}

void test('an outage backs off exponentially, never past one TTL, and says so once per OUTAGE_LINE_EVERY_MS', () => {
  const m = machine(Infinity);
  const sleeps: number[] = [];
  const warned: number[] = [];
  for (let now = 0, i = 0; i < 14; i++) {
    m.plan('me', `n${i}`, now);
    const v = m.failed(down(), now, false);
    assert.equal(v.kind, 'retry');
    if (v.kind === 'retry' && v.warn !== undefined) warned.push(now);
    const ms = sleepOf(m.next(undefined, false, now));
    sleeps.push(ms);
    now += ms;
  }
  // random 0.5: three quarters of min(TTL, 100 * 2^errors).
  assert.deepEqual(sleeps.slice(0, 5), [150, 300, 600, 1200, 2250]);
  assert.ok(sleeps.every((s) => s <= TTL), 'a backoff longer than a TTL');
  assert.equal(warned[0], 0, 'the first failure is reported at once');
  for (let i = 1; i < warned.length; i++) assert.ok(warned[i]! - warned[i - 1]! >= OUTAGE_LINE_EVERY_MS, `two outage lines ${warned[i]! - warned[i - 1]!}ms apart`);
  // An answer ends the outage: the next failure is a new outage, reported at once, backing off from the start.
  m.plan('me', 'n-up', 100_000);
  m.answered(busy('other', 2000, 100_000));
  m.next(busy('other', 2000, 100_000), false, 100_000);
  m.plan('me', 'n-down', 101_000);
  const again = m.failed(down(), 101_000, false);
  assert.deepEqual(again, { kind: 'retry', warn: { unreachableForMs: 0 } });
  assert.equal(sleepOf(m.next(undefined, false, 101_000)), 150);
});

void test('a busy answer sleeps until the reported expiry (never past a TTL); with the freed channel held, the long recheck', () => {
  const m = machine(Infinity, false, () => 0);
  m.plan('me', 'a', 0);
  m.answered(busy('other', 1200));
  const step = m.next(busy('other', 1200), false, 0);
  assert.equal(sleepOf(step), 1201);
  assert.deepEqual(step.kind === 'sleep' ? step.busy : undefined, { holder: 'other', remainingMs: 1200 });
  // A holder with a far longer TTL (or a clock step): still one TTL at most. Never a negative answer kept longer than it can be true.
  m.plan('me', 'b', 0);
  assert.equal(sleepOf(m.next(busy('other', 3_600_000), false, 0)), TTL + 1);
  // No expiry reported: the renew interval.
  m.plan('me', 'c', 0);
  assert.equal(sleepOf(m.next({ ...busy('other', 0), expiresAtMs: null }, false, 0)), RENEW + 1);
  // The channel was up before the claim and stayed up: a release or expiry will be notified.
  m.plan('me', 'd', 0);
  assert.equal(sleepOf(m.next(busy('other', 1200), true, 0)), followerRecheckMs(TTL));
});

void test('a notification between the claim and its answer: the caller sees the epoch move and sleeps the short way', () => {
  // The machine is told whether the channel held across the attempt; an epoch that moved means
  // it did not (a reconnect, a drop), so the answer's expiry bounds the sleep.
  const m = machine(Infinity, false, () => 0);
  m.plan('me', 'a', 0);
  assert.equal(sleepOf(m.next(busy('other', 500), false, 0)), 501);
  m.plan('me', 'b', 0);
  assert.ok(sleepOf(m.next(busy('other', 500), true, 0)) >= 60_000);
});

void test('wait: false gives up on the first busy answer with who holds it; an error is thrown as is', () => {
  const m = machine(0);
  const plan = m.plan('me', 'a', 0);
  assert.deepEqual([plan.listen, plan.waits], [false, false], 'no wait: no channel, no registration');
  const step = m.next(busy('other', 2000), false, 0);
  assert.equal(step.kind, 'give-up');
  if (step.kind === 'give-up') {
    assert.ok(step.error instanceof NotAcquiredError);
    assert.equal(step.error.holder, 'other');
    assert.equal(step.error.expiresInMs, 2000);
    assert.match(step.error.message, /another process holds it/);
  }
  const m2 = machine(0);
  m2.plan('me', 'a', 0);
  assert.deepEqual(m2.failed(down(), 0, false), { kind: 'throw' });
});

void test('wait: false refused because a term since the caller\'s time was released (unlessReleasedSince): the error says so; a plain busy one does not', () => {
  const m = machine(0);
  m.plan('me', 'a', 0);
  const released: ClaimResult = { name: 'job', outcome: 'busy', holder: null, token: 7n, expiresAtMs: null, storeNowMs: 0, releasedSince: true };
  m.answered(released);
  const step = m.next(released, false, 0);
  assert.equal(step.kind === 'give-up' && step.error.releasedSince, true);
  // Nobody holds it: no 'busy' event (leasehold cron said "following: another replica" for it, a
  // second time, for a lease that was free).
  assert.equal(step.kind === 'give-up' ? step.busy : 'not a give-up', undefined, 'a released-since refusal is not a busy lease');
  const m2 = machine(0);
  m2.plan('me', 'a', 0);
  const plain = m2.next(busy('other', 2000), false, 0);
  assert.equal(plain.kind === 'give-up' && plain.error.releasedSince, false);
});

void test('an error waiting cannot fix is thrown at once, however long the wait', () => {
  const m = machine(Infinity);
  m.plan('me', 'a', 0);
  assert.deepEqual(m.failed(new ConfigError('missing table'), 0, false), { kind: 'throw' });
});

void test('the wait runs out on a claim lost in flight after a busy answer: still "held by", not an outage; the sleep never outlasts the wait', () => {
  const m = machine(5000);
  m.plan('me', 'a', 0);
  m.answered(busy('other', 4000));
  assert.equal(sleepOf(m.next(busy('other', 4000), false, 0)), 3000 + 1 + 0.5 * 250);
  m.plan('me', 'b', 4900);
  assert.equal(sleepOf(m.next(busy('other', 4000, 4900), false, 4900)), 100, 'cut to what is left of the wait');
  const last = m.plan('me', 'c', 5000);
  assert.equal(last.lastLook, true, 'the last look after a busy answer runs to the store timeouts');
  assert.equal(m.failed(down(), 5001, true).kind, 'retry');
  const step = m.next(undefined, false, 5001);
  assert.equal(step.kind, 'give-up');
  if (step.kind === 'give-up') {
    assert.equal(step.error.holder, 'other');
    assert.match(step.error.message, /the wait ran out/);
    assert.equal((step.error as { cause?: unknown }).cause, undefined);
  }
  // Without a busy answer first, the store's error is the cause.
  const m2 = machine(100);
  m2.plan('me', 'a', 0);
  const e = down();
  m2.failed(e, 150, false);
  const s2 = m2.next(undefined, false, 150);
  assert.equal(s2.kind === 'give-up' ? (s2.error as { cause?: unknown }).cause : undefined, e);
});

void test('handover: a waiting claim that got busy registers; unanswered claims add their nonces (at most MAX_HANDOFF_NONCES); withdrawal names them', () => {
  const m = machine(Infinity, true);
  const p1 = m.plan('me', 'n1', 0);
  assert.deepEqual([p1.waits, p1.handoff], [true, []]);
  m.failed(down(), 0, false);
  m.next(undefined, false, 0);
  assert.equal(m.withdrawal(), undefined, 'an outage alone never registered us: nothing to withdraw');
  const p2 = m.plan('me', 'n2', 1000);
  assert.deepEqual(p2.handoff, ['n1'], 'the unanswered claim may have registered or acquired: it is presented');
  m.answered(busy('other', 2000));
  for (let i = 3; i <= 8; i++) {
    m.plan('me', `n${i}`, i * 1000);
    m.failed(down(), i * 1000, false);
  }
  const w = m.withdrawal();
  assert.equal(w?.holder, 'me');
  assert.equal(w?.expect.length, MAX_HANDOFF_NONCES);
  assert.deepEqual(w?.expect, ['n5', 'n6', 'n7', 'n8']);
  // A term handed over comes back under the registered nonce, not this claim's.
  m.plan('me', 'n9', 9000);
  assert.deepEqual(m.next(acquired('n2'), false, 9000), { kind: 'acquired', nonce: 'n2' });
  m.wins();
  assert.equal(m.withdrawal(), undefined, 'a contention that won withdraws nothing');
});

void test('handover: a new identity starts afresh; the old one is not withdrawn under the new name', () => {
  const m = machine(Infinity, true);
  m.plan('old', 'n1', 0);
  m.answered(busy('other', 2000));
  assert.deepEqual(m.withdrawal(), { holder: 'old', expect: ['n1'] });
  const p = m.plan('new', 'n2', 1000);
  assert.deepEqual(p.handoff, [], 'no nonce of the old identity is presented by the new one');
  assert.equal(m.withdrawal(), undefined, 'not registered under the new identity yet');
  m.answered(busy('other', 1000));
  assert.deepEqual(m.withdrawal(), { holder: 'new', expect: ['n2'] });
});

void test('a store without handover never registers, and an acquired answer is held under the claim nonce', () => {
  const m = machine(Infinity, false);
  const p = m.plan('me', 'n1', 0);
  assert.deepEqual([p.waits, p.handoff, p.listen], [false, undefined, true]);
  m.answered(busy('other', 100));
  assert.equal(m.withdrawal(), undefined);
  m.plan('me', 'n2', 200);
  assert.deepEqual(m.next(acquired(), false, 200), { kind: 'acquired', nonce: 'n2' });
});

void test('a carried registration: a one-attempt claim that re-registers and gets no answer is named in the withdrawal', () => {
  // Per-slot cron: the wait for an earlier slot kept its registration (AcquireOptions.stayRegistered),
  // and the next slot's wait:false try carries it, so it registers again under a new nonce. Its
  // answer is lost (a client-side timeout; the server committed): the withdrawal must name that
  // nonce too, or a release hands the term to it and nobody runs it.
  const m = new ContentionMachine({ name: 'job', ttlMs: TTL, renewMs: RENEW, waitUntil: 0, handsOver: true, carried: { holder: 'h', expect: ['old'] } });
  const plan = m.plan('h', 'new', 0);
  assert.equal(plan.waits, true, 'a registered contender sends its nonces');
  assert.deepEqual(plan.handoff, ['old']);
  assert.equal(m.failed(new StoreUnavailableError('timed out'), 0, false).kind, 'throw');
  assert.deepEqual(m.withdrawal(), { holder: 'h', expect: ['old', 'new'] });
});
