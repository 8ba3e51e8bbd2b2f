/**
 * An answer gRPC refuses as over its 4 MB receive limit comes back as RESOURCE_EXHAUSTED, which
 * etcd3 marks recoverable. It says nothing about the member (every member gives the same
 * answer), so the member pool must hand it back at once, as a non-retryable StoreError once
 * mapped, and keep asking the same member first: marking it down moved every later call of the
 * store to another member, and a retried read failed the same way until its deadline.
 *
 * The members are stand-ins (an over-size answer takes megabytes of keys to provoke on a real
 * etcd; test/stores/etcd-slots-pages.test.ts does that for the ledger's pages): what is checked
 * is the pool's choice of member, which is the same whatever sent the error.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GRPCResourceExhastedError, GRPCUnavailableError } from 'etcd3';
import { isRetryableError, StoreError } from '../../src/core/errors.js';
import { MemberPool } from '../../src/backends/etcd/members.js';
import { isTransient } from '../../src/backends/etcd/errors.js';
import { mapEtcdError, type Etcd3Like, type EtcdTxnRequest } from '../../src/backends/etcd/client.js';
import { memberStandIn, txnOk } from '../helpers/etcd-member.js';
import { mapLedgerError } from '../../src/backends/etcd/pages.js';

const OVERSIZE = 'Received message larger than max (5242880 vs. 4194304)';
/** A member whose txn answers with `fail()` (an error to throw) or ok, counting its calls. */
function member(fail: () => Error | undefined): Etcd3Like & { calls: number } {
  return memberStandIn(() => {
    const e = fail();
    return e === undefined ? Promise.resolve(txnOk) : Promise.reject(e);
  });
}

const req: EtcdTxnRequest = { compare: [], success: [], failure: [] };
const inAMinute = (): { deadline: number } => ({ deadline: Date.now() + 60_000 });

void describe('etcd: an over-size answer (RESOURCE_EXHAUSTED)', () => {
  void it('is not transient, maps to a non-retryable StoreError, and a busy member\'s RESOURCE_EXHAUSTED still is transient', () => {
    const big = new GRPCResourceExhastedError(OVERSIZE);
    assert.equal(isTransient(big), false);
    for (const mapped of [mapEtcdError(big, 'a read'), mapLedgerError(big, 'a read')]) {
      assert.ok(mapped instanceof StoreError, `mapped to ${mapped.constructor.name}: ${mapped.message}`);
      assert.equal(isRetryableError(mapped), false, mapped.message);
      assert.equal((mapped as StoreError).cause, big);
    }
    // etcd's own "too many requests" is RESOURCE_EXHAUSTED too: a member that is busy, worth another.
    assert.equal(isTransient(new GRPCResourceExhastedError('etcdserver: too many requests')), true);
  });

  void it('is handed back after one attempt, and the member stays first for the next call', async () => {
    let oversize = true;
    const a = member(() => (oversize ? new GRPCResourceExhastedError(OVERSIZE) : undefined));
    const b = member(() => undefined);
    const pool = new MemberPool([a, b], a, []);
    await assert.rejects(pool.kv.txn(req, inAMinute()), (e: unknown) => e instanceof GRPCResourceExhastedError);
    assert.deepEqual([a.calls, b.calls], [1, 0], 'the over-size answer was retried on another member');
    oversize = false;
    await pool.kv.txn(req, inAMinute());
    assert.deepEqual([a.calls, b.calls], [2, 0], 'the member that gave the over-size answer was marked down');
  });

  void it('an outage still moves the call to the next member (the contrast)', async () => {
    const a = member(() => new GRPCUnavailableError('connect ECONNREFUSED'));
    const b = member(() => undefined);
    const pool = new MemberPool([a, b], a, []);
    await pool.kv.txn(req, inAMinute());
    assert.deepEqual([a.calls, b.calls], [1, 1]);
  });
});
