/**
 * The etcd member pool's choice of member when one member hangs and the others answer with an
 * error for a while: a frozen etcd leader while the others elect a new one (they answer "no
 * leader" at once). Members here are stand-ins that answer as etcd3's clients do (a gRPC error
 * class, the attempt's deadline honoured as gRPC would); what a real three-member cluster does
 * under SIGSTOP of its leader is test/topologies/etcd-cluster's.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GRPCDeadlineExceededError, GRPCUnavailableError } from 'etcd3';
import { MemberPool } from '../../src/backends/etcd/members.js';
import type { Etcd3Like, EtcdTxnRequest } from '../../src/backends/etcd/client.js';
import { memberStandIn, txnOk } from '../helpers/etcd-member.js';

const req = { compare: [], success: [], failure: [] } as unknown as EtcdTxnRequest;

type Answer = 'hang' | 'no leader' | 'ok';

/**
 * A member whose txn does what `now()` says; a hang ends at the attempt's deadline, as gRPC ends
 * it, or `earlyMs` before it: a timer can fire a few ms before Date.now() reaches the time it was
 * set for (Node starts it from the event loop's cached time, which lags on a loaded host).
 */
function member(now: () => Answer, earlyMs = 0): Etcd3Like & { calls: number } {
  return memberStandIn((o) => {
    const a = now();
    if (a === 'ok') return Promise.resolve(txnOk);
    if (a === 'no leader') return Promise.reject(new GRPCUnavailableError('etcdserver: no leader'));
    const deadline = Number(o.deadline);
    return new Promise((_, reject) => setTimeout(() => reject(new GRPCDeadlineExceededError('Deadline exceeded')), Math.max(0, deadline - Date.now() - earlyMs)));
  });
}

void describe('etcd member pool: a hung member beside members that answer with an error', () => {
  void it('asks the members that said "no leader" again after an attempt on the hung one runs out, and succeeds once they elect one', async () => {
    const t0 = Date.now();
    const electedAfterMs = 300;
    const others = (): Answer => (Date.now() - t0 < electedAfterMs ? 'no leader' : 'ok');
    const frozen = member(() => 'hang');
    const [b, c] = [member(others), member(others)];
    const pool = new MemberPool([frozen, b, c], frozen, []);
    const started = Date.now();
    // A renewal's call: attempts of 100 ms inside a deadline of 3 s.
    await pool.kv.txn(req, { deadline: started + 3000, attemptMs: 100 });
    const tookMs = Date.now() - started;
    // Before: b and c, having answered "no leader" once, were never asked again in this call;
    // it waited on the frozen member alone (100, 200, 400 ms ...) and failed at its deadline.
    // Now it is answered within a few attempts of the election (each on the frozen member at
    // most one attempt's 100 ms): well before the deadline, whatever the host's load.
    assert.ok(tookMs < 3000 - 100, `the call took ${tookMs} ms: it was not answered by the members that had elected a leader`);
    assert.ok(b.calls + c.calls >= 3, `the members that answered "no leader" were asked again (${b.calls}, ${c.calls})`);
  });

  void it('a hung attempt whose deadline error comes a few ms early is still a hang, not a refusal', async () => {
    // npm test at five files at once (2026-12-07) failed the case above in 200 ms with "Deadline
    // exceeded": the frozen member's attempt ended just before its deadline by the wall clock,
    // counted as a refusal, and with the other two refusing ("no leader") the call gave up as if
    // the whole cluster were down.
    const t0 = Date.now();
    const others = (): Answer => (Date.now() - t0 < 300 ? 'no leader' : 'ok');
    const frozen = member(() => 'hang', 5);
    const pool = new MemberPool([frozen, member(others), member(others)], frozen, []);
    const started = Date.now();
    await pool.kv.txn(req, { deadline: started + 3000, attemptMs: 100 });
    assert.ok(Date.now() - started < 3000 - 100, 'answered by the members that elected a leader, before the deadline');
  });

  void it('a cluster whose every member answers with an error still fails the call at once, not at its deadline', async () => {
    const members = [member(() => 'no leader'), member(() => 'no leader'), member(() => 'no leader')];
    const pool = new MemberPool(members, members[0]!, []);
    const started = Date.now();
    await assert.rejects(pool.kv.txn(req, { deadline: started + 3000, attemptMs: 100 }), (e: unknown) => e instanceof GRPCUnavailableError);
    assert.deepEqual(
      members.map((m) => m.calls),
      [1, 1, 1],
      'each member asked once',
    );
  });

  void it('members that all hang: each round of attempts doubles its budget, inside the deadline', async () => {
    const members = [member(() => 'hang'), member(() => 'hang'), member(() => 'hang')];
    const pool = new MemberPool(members, members[0]!, []);
    const started = Date.now();
    await assert.rejects(pool.kv.txn(req, { deadline: started + 1000, attemptMs: 100 }), (e: unknown) => e instanceof GRPCDeadlineExceededError);
    // 3 x 100 ms, then 200 ms attempts until the deadline at 1 s: about 7 attempts, where 100 ms
    // ones throughout would be 10. An upper bound only: a loaded host makes fewer, never more.
    const calls = members.reduce((n, m) => n + m.calls, 0);
    assert.ok(calls <= 8, `${calls} attempts in 1 s: the budget did not double after a round of hung attempts`);
  });
});
