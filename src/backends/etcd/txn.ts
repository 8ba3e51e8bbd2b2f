import { SchemaError, StoreUnavailableError } from '../../core/errors.js';
import type { EtcdKeyValue, EtcdRangeRequest, EtcdRequestOp, EtcdResponseOp, EtcdTxnRequest, EtcdTxnResponse } from './client.js';
import { SCHEMA_VERSION, prefixEnd, type EtcdKeys } from './keys.js';

/**
 * Every transaction leasehold sends is wrapped in one that compares the schema version key,
 * so a missing or newer layout is reported as a SchemaError at no extra round trip, and the
 * token floor's mod revision, so a token is never computed with a floor that has since moved.
 */
export function guarded(keys: EtcdKeys, ops: EtcdRequestOp[], extra: EtcdTxnRequest['compare'] = []): EtcdTxnRequest {
  return {
    compare: [
      { key: keys.version, target: 'Value', result: 'Equal', value: Buffer.from(String(SCHEMA_VERSION)) },
      { key: keys.floorKey, target: 'Mod', result: 'Equal', mod_revision: keys.floorRev },
      ...extra,
    ],
    success: ops,
    failure: [{ request_range: { key: keys.version } }, { request_range: { key: keys.floorKey } }, ...extra.map((c) => ({ request_range: { key: c.key } }))],
  };
}

/**
 * Throws SchemaError when a guarded transaction failed on the version compare, and a retryable
 * StoreUnavailableError (after adopting the new floor) when the token floor moved. Returns false
 * when it failed on one of the `extra` compares instead (the caller's conflict).
 */
export function schemaOk(keys: EtcdKeys, resp: EtcdTxnResponse): boolean {
  if (resp.succeeded) return true;
  const v = first(resp.responses[0]);
  const found = v === undefined ? 0 : Number(v.value.toString());
  if (found !== SCHEMA_VERSION) throw schemaError(keys, found);
  const floor = first(resp.responses[1]);
  if (String(floor?.mod_revision ?? '0') !== keys.floorRev) {
    keys.setFloor(floor);
    throw new StoreUnavailableError(
      `etcd prefix "${keys.prefix}/" has a new token floor (${keys.floor}, set by \`leasehold migrate --min-token\`); this is retryable`,
    );
  }
  return false;
}

export function schemaError(keys: EtcdKeys, found: number): SchemaError {
  if (!Number.isFinite(found) || found === 0) {
    return new SchemaError(
      `no leasehold schema under etcd prefix "${keys.prefix}/" (key ${keys.version.toString()} is missing); ` +
        'run `leasehold migrate --store <url>`',
    );
  }
  return new SchemaError(
    found > SCHEMA_VERSION
      ? `etcd prefix "${keys.prefix}/" is at schema version ${found}, newer than this leasehold (${SCHEMA_VERSION}); upgrade leasehold`
      : `etcd prefix "${keys.prefix}/" is at schema version ${found}, older than this leasehold needs (${SCHEMA_VERSION}); run \`leasehold migrate\``,
  );
}

export function rangeOf(key: Buffer): { request_range: EtcdRangeRequest } {
  return { request_range: { key } };
}

export function rangePrefix(prefix: string | Buffer, extra: Partial<EtcdRangeRequest> = {}): { request_range: EtcdRangeRequest } {
  const key = typeof prefix === 'string' ? Buffer.from(prefix) : prefix;
  return { request_range: { key, range_end: prefixEnd(key), ...extra } };
}

/** The first key-value of a range response op, if any. */
export function first(op: EtcdResponseOp | undefined): EtcdKeyValue | undefined {
  return op?.response_range?.kvs[0];
}

export function all(op: EtcdResponseOp | undefined): EtcdKeyValue[] {
  return op?.response_range?.kvs ?? [];
}
