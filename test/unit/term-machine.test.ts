// The term state machine alone: inputs with a time argument, outcomes out. No clock, no store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolveTiming } from '../../src/core/config.js';
import { MAX_UNCONFIRMED, TermMachine } from '../../src/core/term.js';
import type { ClaimRequest } from '../../src/backends/store.js';

const timing = resolveTiming({ ttl: 3000 }); // renew 1000, margin 300

function granted(sentAt = 0, now = 10): TermMachine {
  const t = TermMachine.granted(timing, { name: 'job', outcome: 'acquired', token: 7n, holder: 'h', expiresAtMs: 53_000, storeNowMs: 50_000 }, 'h', 'n0', sentAt, now);
  assert.ok(t !== undefined);
  return t;
}

void test('an acquisition answer that arrives after its own deadline starts no term', () => {
  const late = TermMachine.granted(timing, { name: 'job', outcome: 'acquired', token: 1n, holder: 'h', expiresAtMs: 3000, storeNowMs: 0 }, 'h', 'n', 0, 2700);
  assert.equal(late, undefined);
  assert.equal(granted(0, 2699).deadline, 2700);
});

void test('the retries of a failing renewal stop at the deadline instead of looping on it', () => {
  const t = granted();
  let now = 0;
  const sends: number[] = [];
  for (let i = 0; i < 100 && now < t.deadline; i++) {
    now = Math.max(now, t.renewDueAt);
    const req = t.request(now, `n${i + 1}`);
    if (req === 'deadline') break;
    assert.ok(req !== undefined);
    sends.push(now);
    t.failed(new Error('down'), now);
  }
  assert.ok(sends.length < 20, `${sends.length} sends before the deadline`);
  assert.equal(new Set(sends).size, sends.length, 'never two sends at the same instant');
  assert.ok(sends.at(-1)! < t.deadline, 'the last one before the deadline');
  assert.equal(t.request(t.deadline, 'late'), 'deadline');
});

void test('unanswered nonces are remembered, at most MAX_UNCONFIRMED of them, and a renewal clears them', () => {
  const t = granted();
  const reqs: ClaimRequest[] = [];
  for (let i = 0; i < MAX_UNCONFIRMED + 2; i++) {
    const r = t.request(100 + i, `n${i + 1}`);
    assert.ok(r !== undefined && r !== 'deadline');
    reqs.push(r);
    t.failed(new Error('lost answer'), 100 + i);
  }
  assert.equal(reqs.at(-1)!.expect!.length, 1 + MAX_UNCONFIRMED);
  assert.equal(reqs.at(-1)!.expect![0], 'n0', 'the confirmed nonce is always presented');
  const last = t.request(200, 'nz');
  assert.ok(last !== undefined && last !== 'deadline');
  const out = t.answered(last, { name: 'job', outcome: 'renewed', token: 7n, holder: 'h', expiresAtMs: 53_200, storeNowMs: 50_200 }, 200, 210);
  assert.equal(out.kind, 'renewed');
  assert.equal(t.confirmed, 'nz');
  assert.deepEqual(t.unconfirmed, []);
  assert.equal(t.deadline, 200 + 3000 - 300);
});

void test('a deadline reached while leading (no failed renewal) is a suspension; reached in jeopardy, it is not unless noticed late', () => {
  const leading = granted();
  assert.equal(leading.deadlineVerdict(leading.deadline).suspect, true);
  const jeopardy = granted();
  const req = jeopardy.request(1000, 'n1');
  assert.ok(req !== undefined && req !== 'deadline');
  assert.equal(jeopardy.failed(new Error('down'), 1000).kind, 'jeopardy');
  assert.deepEqual(
    { ...jeopardy.deadlineVerdict(jeopardy.deadline), lateMs: 0 },
    { suspect: false, lateMs: 0, reason: 'store-unreachable', detail: 'renewals kept failing until the local deadline' },
  );
  assert.equal(jeopardy.deadlineVerdict(jeopardy.deadline + 251).suspect, true, 'noticed 251ms late: the process was stopped');
});

void test('an ended machine ignores every input', () => {
  const t = granted();
  const req = t.request(1000, 'n1');
  assert.ok(req !== undefined && req !== 'deadline');
  t.end();
  assert.deepEqual(t.answered(req, { name: 'job', outcome: 'lost', reason: 'revoked', holder: null, token: 7n, expiresAtMs: null, storeNowMs: 0 }, 1000, 1001), { kind: 'none' });
  assert.deepEqual(t.failed(new Error('x'), 1002), { kind: 'none' });
  assert.equal(t.dueAt(), undefined);
  assert.equal(t.request(1003, 'n2'), undefined);
});

void test('a grant shorter than the TTL is renewed before its deadline, not after it', () => {
  // A third of the TTL (3000): what a process of the previous version read back for a term
  // handed to it as an offer on MySQL schema 10. Its first renewal was due at the renew interval,
  // 1000 ms after the send, past the 700 ms deadline.
  const t = TermMachine.granted(timing, { name: 'job', outcome: 'acquired', token: 7n, holder: 'h', expiresAtMs: 51_000, storeNowMs: 50_000 }, 'h', 'n0', 0, 10);
  assert.ok(t !== undefined);
  assert.equal(t.deadline, 700);
  assert.ok(t.renewDueAt < t.deadline, `renewal due at ${t.renewDueAt}, deadline ${t.deadline}`);
  assert.equal(t.renewDueAt, 700 - 500, 'half a renew interval before the deadline, as a renewal answer sets it');
  assert.equal(granted(0, 10).renewDueAt, 1000, 'a full-TTL grant renews at the renew interval, as before');
});
