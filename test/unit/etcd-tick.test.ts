// An etcd session's tick as a pure plan (src/backends/etcd/tick.ts): its state, the time on a
// fake clock and the store's answers in; the next state and what to send out. No etcd, no I/O.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  afterKeepalive,
  afterSwap,
  openedState,
  planTick,
  swapSent,
  type MarkerRead,
  type SessionState,
  type SessionTerm,
  type TickPlan,
  type TickView,
} from '../../src/backends/etcd/tick.js';
import { FakeClock } from './fake-clock.js';

const TTL_SEC = 3;
const now = (c: FakeClock): { mono: number; wall: number } => ({ mono: c.monoNow(), wall: c.wallNow() });
const value = (s: string): Buffer => Buffer.from(s);

function term(rev: string | undefined, renewedAt: number): SessionTerm {
  return { rev, moved: value(`moved-${rev ?? '?'}`), moveNonce: 'm', nonce: 'n', renewedAt, seq: 1 };
}

function view(c: FakeClock, over: Partial<TickView> = {}): TickView {
  return { ttlSec: TTL_SEC, floorMoved: false, deadline: c.wallNow() + 5000, terms: new Map(), renewing: new Set(), moving: new Map(), maxOpsPerTxn: 128, ...over };
}

function opened(c: FakeClock): SessionState {
  return openedState(value('v0'), c.wallNow() + TTL_SEC * 1000, c.monoNow());
}

function keepalive(p: TickPlan): Extract<TickPlan, { kind: 'keepalive' }> {
  assert.equal(p.kind, 'keepalive');
  return p as Extract<TickPlan, { kind: 'keepalive' }>;
}

/** A tick whose swap is answered: the state after it, ready for the keepalive. */
function swapped(state: SessionState, c: FakeClock, v: TickView, next: string): SessionState {
  const plan = keepalive(planTick(state, v, now(c)));
  const out = afterSwap(swapSent(plan.state, value(next)), { kind: 'swapped', markersRead: [] }, { holder: 'h', sent: value(next), plan, terms: v.terms, moving: v.moving });
  assert.equal(out.kind, 'swapped');
  return out.state;
}

void test('deadline: a tick planned at or past its call deadline gives up and sends nothing; just before it, it swaps and keeps alive', async () => {
  const c = new FakeClock();
  const state = opened(c);
  const v = view(c);
  await c.advance(4999);
  assert.equal(planTick(state, v, now(c)).kind, 'keepalive');
  await c.advance(1);
  assert.deepEqual(planTick(state, v, now(c)), { kind: 'give-up' }, 'given up: the session lives on, the renewal is retryable');
  // The deadline is wall time (what gRPC takes): a wall clock stepped past it gives up too.
  const d = new FakeClock();
  const vd = view(d);
  d.stepWall(6000);
  assert.equal(planTick(opened(d), vd, now(d)).kind, 'give-up');
});

void test('unknown is not yes: a keepalive whose answer was not seen is a loss, and the session expiry stays where the last seen answer put it', async () => {
  const c = new FakeClock();
  let state = swapped(opened(c), c, view(c), 'v1');
  const before = state.expiresAtMs;
  await c.advance(1000);
  const sentAt = c.wallNow();
  await c.advance(40);
  const error = new Error('14 UNAVAILABLE: no answer to the keepalive');
  const out = afterKeepalive(state, TTL_SEC, sentAt, { kind: 'unseen', error }, now(c));
  assert.equal(out.kind, 'lost');
  assert.equal(out.kind === 'lost' && out.error, error, 'the tick fails with the error, retryable, rather than answering renewed');
  assert.equal(out.state.expiresAtMs, before, 'no answer seen: the expiry did not move');
  assert.equal(out.state.over, undefined, 'not over either: the next tick tries again');
  state = out.state;
  // The swap landed and was seen, so its value is the one the next tick compares.
  assert.deepEqual(state.value, value('v1'));
  assert.deepEqual(state.pending, []);
});

void test('jeopardy: past its last seen expiry the session still plans a keepalive; only etcd stands it down (TTL 0), and an answer renews it from the send time', async () => {
  const c = new FakeClock();
  let state = swapped(opened(c), c, view(c), 'v1');
  // Two keepalives in a row go unseen, and the lower bound of the lease's expiry passes.
  for (let i = 0; i < 2; i++) {
    await c.advance(1000);
    state = afterKeepalive(state, TTL_SEC, c.wallNow(), { kind: 'unseen', error: new Error('timeout') }, now(c)).state;
  }
  await c.advance(1500);
  assert.ok(c.wallNow() > state.expiresAtMs, 'past the session expiry as last seen');
  // A lower bound passing is not the store's word (etcd starts the TTL later than we sent it
  // and may keep the lease longer): the tick asks, and the terms' own deadlines run on meanwhile.
  state = swapped(state, c, view(c), 'v2');
  const sentAt = c.wallNow();
  await c.advance(30);
  const gone = afterKeepalive(state, TTL_SEC, sentAt, { kind: 'answered', ttlSec: 0 }, now(c));
  assert.deepEqual([gone.kind, gone.state.over], ['over', { kind: 'gone' }], 'TTL 0: the lease is gone, every term stands down');
  assert.equal(planTick(gone.state, view(c), now(c)).kind, 'stand-down', 'and nothing renews on it again');
  const back = afterKeepalive(state, TTL_SEC, sentAt, { kind: 'answered', ttlSec: TTL_SEC }, now(c));
  assert.equal(back.kind, 'alive');
  assert.equal(back.kind === 'alive' && back.expiresAtMs, sentAt + TTL_SEC * 1000, 'counted from the send, not the answer');
  assert.equal(back.kind === 'alive' && back.storeNowMs, c.wallNow(), 'the store time is the wall clock at the answer');
  // etcd raising the TTL to its minimum does not lengthen what the session counts on.
  const more = afterKeepalive(state, TTL_SEC, sentAt, { kind: 'answered', ttlSec: 60 }, now(c));
  assert.equal(more.kind === 'alive' && more.expiresAtMs, sentAt + TTL_SEC * 1000);
});

void test('an over session stands every term down without sending; a raised token floor ends a live one as gone', () => {
  const c = new FakeClock();
  const state = opened(c);
  const floor = planTick(state, view(c, { floorMoved: true }), now(c));
  assert.deepEqual(floor.kind === 'stand-down' && [floor.result, floor.state.over], [{ kind: 'gone' }, { kind: 'gone' }]);
  const cloned = { kind: 'cloned' as const, terms: new Map<string, SessionTerm>() };
  const over = planTick({ ...state, over: cloned }, view(c), now(c));
  assert.deepEqual(over.kind === 'stand-down' && over.result, cloned, 'an over session stays over, even past its deadline');
  assert.equal(state.over, undefined, 'the record planned from is never edited');
});

void test('orphans: a term neither renewed nor moving for a whole TTL is swept, at most once per quarter TTL, on the monotonic clock', async () => {
  const c = new FakeClock();
  const t0 = c.monoNow();
  const terms = new Map([
    ['idle', term('10', t0)],
    ['renewed', term('11', t0)],
    ['moving', term(undefined, t0)],
    ['fresh', term('12', t0 + 2500)],
  ]);
  const v = (): TickView => view(c, { terms, renewing: new Set(['renewed']), moving: new Map([['moving', 1]]) });
  let state = opened(c);
  // A wall-clock step sweeps nothing: the term's holder still believes in it.
  c.stepWall(10 * TTL_SEC * 1000);
  let plan = keepalive(planTick(state, v(), now(c)));
  assert.deepEqual(plan.orphans, []);
  state = plan.state;
  await c.advance(TTL_SEC * 1000 + 1);
  plan = keepalive(planTick(state, v(), now(c)));
  assert.deepEqual(plan.orphans.map(([n]) => n), ['idle'], 'only the one nobody renews or moves');
  assert.equal(plan.state.sweptAt, c.monoNow());
  // The next look is a quarter TTL later, not at every tick.
  await c.advance(TTL_SEC * 250 - 1);
  assert.deepEqual(keepalive(planTick(plan.state, v(), now(c))).orphans, []);
  await c.advance(1);
  assert.deepEqual(keepalive(planTick(plan.state, v(), now(c))).orphans.map(([n]) => n), ['idle']);
});

void test('the sweep asks whether a name is renewed only of a term unrenewed for a whole TTL (the renewed names need not be hashed each tick)', async () => {
  const c = new FakeClock();
  const t0 = c.monoNow();
  const terms = new Map(Array.from({ length: 50 }, (_, i): [string, SessionTerm] => [`t${i}`, term(String(100 + i), i < 2 ? t0 : t0 + 2500)]));
  const asked: string[] = [];
  const renewing = { has: (name: string): boolean => (asked.push(name), name === 't0') };
  await c.advance(TTL_SEC * 1000 + 1);
  const plan = keepalive(planTick(opened(c), view(c, { terms, renewing }), now(c)));
  assert.deepEqual(plan.orphans.map(([n]) => n), ['t1'], 't0 is renewed by this tick; t1 is not');
  assert.deepEqual(asked, ['t0', 't1']);
});

void test('one Txn holds what fits etcd\'s --max-txn-ops: at most half the room for markers, the rest for orphans', async () => {
  const c = new FakeClock();
  const terms = new Map(Array.from({ length: 20 }, (_, i): [string, SessionTerm] => [`t${i}`, term(String(100 + i), c.monoNow())]));
  const markers = new Map(Array.from({ length: 20 }, (_, i): [string, Buffer] => [`m${i}`, value(`m${i}`)]));
  await c.advance(TTL_SEC * 1000 + 1);
  const plan = keepalive(planTick({ ...opened(c), markers }, view(c, { terms, maxOpsPerTxn: 16 }), now(c)));
  assert.equal(plan.markers.length, 6, '(16 - 4) / 2');
  assert.equal(plan.orphans.length, 6, 'the rest of the 12');
});

void test('a swap whose answer was lost is adopted when the store shows it; our holder id on a value we never wrote is a clone; none, or another holder, is gone', () => {
  const c = new FakeClock();
  const v = view(c, { terms: new Map([['job', term('7', c.monoNow())]]) });
  const plan = keepalive(planTick(opened(c), v, now(c)));
  // Tick 1's value landed unseen; tick 2 compares the old value and is refused.
  const lost = swapSent(plan.state, value('v1'));
  const state = swapSent(lost, value('v2'));
  const ctx = { holder: 'h', sent: value('v2'), plan, terms: v.terms, moving: v.moving };
  const again = afterSwap(state, { kind: 'refused', stored: value('v1'), storedHolder: 'h' }, ctx);
  assert.equal(again.kind, 'again');
  assert.deepEqual([again.state.value, again.state.pending], [value('v1'), []], 'adopted, and the next round swaps again');
  const clone = afterSwap(state, { kind: 'refused', stored: value('x'), storedHolder: 'h' }, ctx);
  assert.equal(clone.kind === 'over' && clone.result.kind, 'cloned');
  assert.deepEqual(clone.kind === 'over' && clone.result.kind === 'cloned' && [...clone.result.terms.keys()], ['job'], 'every term ends as a clone conflict');
  assert.deepEqual(afterSwap(state, { kind: 'refused', stored: undefined, storedHolder: undefined }, ctx).state.over, { kind: 'gone' });
  assert.deepEqual(afterSwap(state, { kind: 'refused', stored: value('y'), storedHolder: 'other' }, ctx).state.over, { kind: 'gone' });
  assert.equal(state.over, undefined, 'the state planned from is left as it was');
});

void test('markers: one ends the term whose create revision it names, not a newer term of that name; a moving term\'s marker is kept, a deleted one forgotten', () => {
  const c = new FakeClock();
  const terms = new Map([
    ['revoked', term('20', c.monoNow())],
    ['again', term('31', c.monoNow())],
    ['moving', term('40', c.monoNow())],
  ]);
  const moving = new Map([['moving', 1]]);
  const old = value('old');
  const state: SessionState = { ...opened(c), markers: new Map([['old', old]]) };
  const plan = keepalive(planTick(state, view(c, { terms, moving }), now(c)));
  assert.deepEqual(plan.markers, [old], 'a marker read by an earlier tick is deleted by this one');
  const read = (name: string, rev: string): MarkerRead => ({ id: `m/${name}`, key: value(`m/${name}`), name, rev });
  const markersRead = [read('revoked', '20'), read('again', '30'), read('moving', '40'), { id: 'old', key: old, name: 'gone', rev: '1' }];
  const out = afterSwap(swapSent(plan.state, value('v1')), { kind: 'swapped', markersRead }, { holder: 'h', sent: value('v1'), plan, terms, moving });
  assert.equal(out.kind, 'swapped');
  if (out.kind !== 'swapped') return;
  assert.deepEqual([...out.ended].sort(), ['moving', 'revoked'], 'revision 30 was an earlier term of "again"');
  assert.deepEqual(out.remove.sort(), ['moving', 'revoked']);
  assert.deepEqual([...out.state.markers.keys()].sort(), ['m/again', 'm/revoked'], 'the moving term\'s stays for the tick after it settles; the deleted one is forgotten');
  assert.deepEqual([out.state.value, out.state.pending], [value('v1'), []]);
});
