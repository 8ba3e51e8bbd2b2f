/**
 * A stand-in for one etcd member's client in the member pool's tests (src/backends/etcd/members.ts):
 * only `kv.txn` answers, as `txn` says; every call is counted. What a real cluster does is the
 * topology tests'.
 */
import type { EtcdCallOptions, Etcd3Like, EtcdTxnRequest, EtcdTxnResponse } from '../../src/backends/etcd/client.js';

export const txnOk: EtcdTxnResponse = { header: { revision: '7' }, succeeded: true, responses: [] } as unknown as EtcdTxnResponse;

export function memberStandIn(txn: (o: EtcdCallOptions) => Promise<EtcdTxnResponse>): Etcd3Like & { calls: number } {
  const m = {
    calls: 0,
    kv: {
      txn: (_req: EtcdTxnRequest, o: EtcdCallOptions): Promise<EtcdTxnResponse> => {
        m.calls++;
        return txn(o);
      },
      range: () => Promise.reject(new Error('not used')),
      deleteRange: () => Promise.reject(new Error('not used')),
    },
    leaseClient: {
      leaseGrant: () => Promise.reject(new Error('not used')),
      leaseTimeToLive: () => Promise.reject(new Error('not used')),
    },
    watch: () => {
      throw new Error('not used');
    },
    close: () => undefined,
  };
  return m as unknown as Etcd3Like & { calls: number };
}
