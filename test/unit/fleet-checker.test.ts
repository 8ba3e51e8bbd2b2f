/**
 * The fleet checker's placement-on-live-agent rule and its one allowance: an agent stopped or
 * killed between sending a renewal and logging the answer may have been renewed without anyone
 * seeing it. Such a placement is unverified, never a violation; but only while that renewal is
 * recent enough to matter, and only for a claim whose answer was never logged.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkFleet, type ClientEvent } from '../chaos/fleet-checker.js';
import type { AgentEvent } from '../chaos/fleet-agent.js';

const STALE = 1500;
const base = { p: 'p1', id: 'a1', pid: 10 };

/** A confirmed heartbeat sent at `sent` (mono), its expiry on the store's clock (= mono + 1e6 here). */
function confirmed(sent: number): AgentEvent[] {
  return [
    { ...base, t: sent, ev: 'claim-sent', sent },
    { ...base, t: sent + 1, ev: 'claim', sent, outcome: 'renewed', token: '1', storeNow: 1e6 + sent, expiresAt: 1e6 + sent + STALE },
  ];
}

/** A placement on a1 answered at mono `got`, placed at store time 1e6 + got. */
function placement(got: number): ClientEvent {
  return { c: 'c1', r: 'r1', sent: got - 1, got, ev: 'place', outcome: 'placed', agent: 'a1', gen: '1', placedAt: 1e6 + got };
}

function run(agents: AgentEvent[], got: number) {
  const r = checkFleet({ clients: [placement(got)], agents, writes: [], finalGens: new Map([['r1', 1n]]), staleAfterMs: STALE });
  return { v: r.verdicts.find((x) => x.name === 'placement-on-live-agent')!, counts: r.counts };
}

void test('fleet checker: a placement after the last confirmed expiry is a violation', () => {
  const { v } = run(confirmed(0), 2000);
  assert.equal(v.ok, false, v.detail);
});

void test('fleet checker: a renewal sent just before, whose answer was never logged, makes the placement unverified, not a violation', () => {
  const agents = [...confirmed(0), { ...base, t: 1000, ev: 'claim-sent' as const, sent: 1000 }];
  const { v, counts } = run(agents, 2000);
  assert.equal(v.ok, true, v.detail);
  assert.equal(counts['unverifiedByUnansweredRenewal'], 1);
});

void test('fleet checker: an unanswered renewal older than the TTL and a second does not excuse a placement', () => {
  const agents = [...confirmed(0), { ...base, t: 100, ev: 'claim-sent' as const, sent: 100 }];
  const { v, counts } = run(agents, 100 + STALE + 1000 + 1);
  assert.equal(v.ok, false, v.detail);
  assert.equal(counts['unverifiedByUnansweredRenewal'], 0);
});

void test('fleet checker: a renewal whose answer was logged (lost) excuses nothing', () => {
  const agents = [
    ...confirmed(0),
    { ...base, t: 1000, ev: 'claim-sent' as const, sent: 1000 },
    { ...base, t: 1001, ev: 'claim' as const, sent: 1000, outcome: 'lost:superseded', storeNow: 1e6 + 1000 },
  ];
  const { v } = run(agents, 2000);
  assert.equal(v.ok, false, v.detail);
});

void test('fleet checker: a renewal that failed with an error may have been applied: the placement is unverified, not a violation', () => {
  const agents = [
    ...confirmed(0),
    { ...base, t: 1000, ev: 'claim-sent' as const, sent: 1000 },
    { ...base, t: 2600, ev: 'claim' as const, sent: 1000, outcome: 'error' },
  ];
  const { v, counts } = run(agents, 2000);
  assert.equal(v.ok, true, v.detail);
  assert.equal(counts['unverifiedByUnansweredRenewal'], 1);
});

void test('fleet checker: a "dead" answer between a restarted agent\'s acquisition and its registration is no false dead; after it, it is', () => {
  // a1's last process deregistered; a new one acquires agent/a1 at 100 (answer at 110) and logs
  // 'live' at 130, once registered. The store says "dead" until then, rightly.
  const agents: AgentEvent[] = [
    { ...base, t: 100, ev: 'claim-sent', sent: 100 },
    { ...base, t: 110, ev: 'claim', sent: 100, outcome: 'acquired', token: '2', storeNow: 1e6 + 100, expiresAt: 1e6 + 100 + STALE },
    { ...base, t: 130, ev: 'live', token: '2' },
  ];
  const lookup = (sent: number): ClientEvent => ({ c: 'c1', r: 'r1', sent, got: sent + 2, ev: 'lookup', via: 'store', hit: false, answer: 'dead', agent: 'a1', gen: '1' });
  const verdict = (sent: number) =>
    checkFleet({ clients: [lookup(sent)], agents, writes: [], finalGens: new Map(), staleAfterMs: STALE }).verdicts.find((x) => x.name === 'store-never-false-dead')!;
  assert.equal(verdict(114).ok, true, 'between the claim and the registration');
  assert.equal(verdict(200).ok, false, 'registered and fresh: a false dead');
});
