/**
 * Reading a key range that may be large (a schedule's slot rows, a fleet's ownership records)
 * in pages. gRPC refuses an answer over 4 MB (grpc-js's default receive limit, which etcd3 does
 * not raise) with RESOURCE_EXHAUSTED, which etcd3 marks recoverable: read in one answer, a
 * schedule past about 17,000 rows failed every read the same way and the engine retried it for
 * ever. So a range is read PAGE keys at a time, a page that is still too large (rows with long
 * reasons) is read again halved, and an answer too large even for one key is a StoreError.
 */
import { StoreError } from '../../core/errors.js';
import { isAnswerTooLarge } from './errors.js';
import { mapEtcdError, type EtcdKeyValue, type EtcdRangeRequest, type EtcdTxnRequest, type EtcdTxnResponse } from './client.js';

/** Keys per page: about 250 bytes each in the ledger, so well under the 4 MB answer limit. */
const PAGE = 500;

/** mapEtcdError, except an over-size answer, which is not retryable (waiting does not shrink it). */
export function mapLedgerError(err: unknown, where: string): Error {
  if (isAnswerTooLarge(err)) {
    return new StoreError(
      `etcd's answer to the ${where} was larger than gRPC's 4 MB message limit; this is not retried, it would fail the same way. ` +
        'leasehold reads large ranges in pages, so a single key is that large: report it, with the key prefix',
      { cause: err },
    );
  }
  return mapEtcdError(err, where);
}

/** A Txn sender that throws mapped errors (mapLedgerError). */
export type PageTxn = (req: EtcdTxnRequest) => Promise<EtcdTxnResponse>;

/**
 * One page: at most `size` keys of [from, to) in key order, read again halved while the answer is
 * over the size limit; `more` when the range holds keys past it, `size` the page size that fit.
 */
export async function page(txn: PageTxn, from: Buffer, to: Buffer, order: 'Ascend' | 'Descend', size = PAGE): Promise<{ kvs: EtcdKeyValue[]; more: boolean; size: number }> {
  for (let limit = size; ; ) {
    const range: EtcdRangeRequest = { key: from, range_end: to, limit, sort_order: order, sort_target: 'Key' };
    try {
      const answer = (await txn({ compare: [], success: [{ request_range: range }], failure: [] })).responses[0]?.response_range;
      return { kvs: answer?.kvs ?? [], more: answer?.more === true, size: limit };
    } catch (err) {
      if (limit > 1 && isAnswerTooLarge(err)) {
        limit = Math.max(1, Math.floor(limit / 2));
        continue;
      }
      throw err;
    }
  }
}

/**
 * The keys in [from, to) in key order, a page at a time, each page its own read (so not one
 * revision: callers pin their writes on each key's mod revision instead).
 */
export async function* pages(txn: PageTxn, from: Buffer, to: Buffer, order: 'Ascend' | 'Descend', size = PAGE): AsyncGenerator<EtcdKeyValue[]> {
  for (;;) {
    // A size that had to be halved stays halved: the next rows are likely as long.
    const { kvs, more, size: fitted } = await page(txn, from, to, order, size);
    size = fitted;
    if (kvs.length > 0) yield kvs;
    if (!more || kvs.length === 0) return;
    // Past the last key read: upwards, from just after it; downwards, up to (excluding) it.
    const last = kvs.at(-1)!.key;
    if (order === 'Ascend') from = Buffer.concat([last, Buffer.from([0])]);
    else to = last;
  }
}
