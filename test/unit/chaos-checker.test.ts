/**
 * The chaos checker's failover rule for a pause that froze a process inside a SQLite
 * transaction: the file's write lock stays with the frozen process, so everyone else waits for
 * the SIGCONT. That is SQLite's single-writer design, and the failover is measured from the heal;
 * a pause that did not land inside a store call is still measured from the SIGSTOP.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { check, type CheckInput } from '../chaos/checker.js';
import type { FaultRecord, ResourceRow, WorkerEvent, WorkerInfo } from '../chaos/types.js';

type Ev = Record<string, unknown> & { ev: string; t: number };

const timing = { ttlMs: 1000, storeTtlMs: 1000, renewMs: 333, workMinMs: 100, workMaxMs: 300 };

function worker(id: string, events: Ev[]): WorkerInfo {
  return {
    id,
    pid: 1,
    origin: 'initial',
    mode: 'elector',
    spawnedAt: 0,
    exitedAt: null,
    exit: 'running',
    askedToStop: false,
    stopped: [],
    events: events.map((e) => ({ wall: e.t, w: id, pid: 1, ...e }) as unknown as WorkerEvent),
  };
}

function row(id: number, worker: string, token: bigint, t: number): ResourceRow {
  return { id, token, worker, pid: 1, holder: `${worker}-h`, seq: id, t, fenced: true };
}

/** w1 leads with token 1 and is paused at 1000ms for 3000ms; w2 takes over and writes at 4700ms. */
function input(w1Events: Ev[], inProcessLocks: boolean): CheckInput {
  const pause: FaultRecord = { n: 1, kind: 'pause', targets: ['w1'], role: 'leader', start: 1000, heal: 4000, ref: 1000, params: {}, spawned: [], note: '' };
  const grant1 = { ev: 'claim', kind: 'acquire', sent: 5, outcome: 'acquired', holder: 'w1-h', token: '1', t: 10 };
  const grant2 = { ev: 'claim', kind: 'acquire', sent: 4100, outcome: 'acquired', holder: 'w2-h', token: '2', t: 4110 };
  return {
    timing,
    unfenced: false,
    runStart: 0,
    runEnd: 6000,
    writes: [row(1, 'w1', 1n, 500), row(2, 'w2', 2n, 4700)],
    counters: { rejected: 0, duplicate: 0 },
    workers: [worker('w1', [grant1, ...w1Events]), worker('w2', [grant2])],
    history: [],
    faults: [pause],
    slack: { processMs: 1000, storeMs: 3000 },
    inProcessLocks,
  };
}

const frozenInClaim = [{ ev: 'claim', kind: 'renew', sent: 999, outcome: 'renewed', holder: 'w1-h', token: '1', t: 4001 }];
const idleWhenFrozen = [{ ev: 'claim', kind: 'renew', sent: 900, outcome: 'renewed', holder: 'w1-h', token: '1', t: 902 }];

void test('chaos checker: a pause that froze the leader inside a SQLite claim is measured from the heal', () => {
  const r = check(input(frozenInClaim, true));
  const f = r.failovers[0]!;
  assert.equal(f.ms, 700);
  assert.match(f.from ?? '', /frozen inside a store transaction/);
  assert.equal(r.verdicts.find((v) => v.name === 'failover-bounded')?.ok, true);
});

void test('chaos checker: a pause outside any store call is measured from the SIGSTOP, and fails past the bound', () => {
  const r = check(input(idleWhenFrozen, true));
  const f = r.failovers[0]!;
  assert.equal(f.ms, 3700);
  assert.equal(f.from, undefined);
  assert.equal(r.verdicts.find((v) => v.name === 'failover-bounded')?.ok, false);
});

void test('chaos checker: on a store whose locks live on the server, a claim in flight does not move the reference', () => {
  const r = check(input(frozenInClaim, false));
  assert.equal(r.failovers[0]!.ms, 3700);
  assert.equal(r.verdicts.find((v) => v.name === 'failover-bounded')?.ok, false);
});

/** w1 leads with token 1; its clock jumps at 1000ms (landing by 2000ms); nobody else ever writes. */
function jumped(w1Events: Ev[]): CheckInput {
  const jump: FaultRecord = { n: 1, kind: 'clock-jump', targets: ['w1'], role: 'leader', start: 1000, heal: 2500, ref: 2000, params: {}, spawned: [], note: '' };
  const grant1 = { ev: 'claim', kind: 'acquire', sent: 5, outcome: 'acquired', holder: 'w1-h', token: '1', t: 10 };
  return {
    ...input([], false),
    writes: [row(1, 'w1', 1n, 500), row(2, 'w1', 1n, 2300), row(3, 'w1', 1n, 2600)],
    workers: [worker('w1', [grant1, ...w1Events])],
    faults: [jump],
  };
}

void test('chaos checker: a leader whose term the store renewed after its clock jumped never left; its next write is the leader back', () => {
  const r = check(jumped([{ ev: 'claim', kind: 'renew', sent: 2100, outcome: 'renewed', holder: 'w1-h', token: '1', t: 2110 }]));
  assert.equal(r.failovers[0]!.ms, 300);
  assert.equal(r.verdicts.find((v) => v.name === 'failover-bounded')?.ok, true);
});

void test('chaos checker: without a renewal after the jump landed, the jumped leader\'s writes do not show a leader is back', () => {
  const r = check(jumped([{ ev: 'claim', kind: 'renew', sent: 1500, outcome: 'renewed', holder: 'w1-h', token: '1', t: 1510 }]));
  assert.equal(r.failovers[0]!.ms, null);
  assert.equal(r.verdicts.find((v) => v.name === 'failover-bounded')?.ok, false);
});
