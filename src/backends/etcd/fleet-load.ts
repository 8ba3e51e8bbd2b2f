/**
 * The etcd fleet's load index (issue 34): one key per agent that can take work, named by its
 * owned count, so a placement range-reads the least loaded first and stops, instead of reading
 * every agent record and term key (a placement cost 302 ms at 10,000 agents, and failed on its
 * deadline in the bench under load).
 *
 *   {p}/fleet/load/{owned, 12 digits}/{id}   JSON: the agent's labels (a placement skips a
 *                                            mismatch without reading its record)
 *   {p}/fleet/load-built                     present once every agent record has its key
 *
 * An agent has its key while it is registered and not draining (`indexed`). Every Txn that
 * writes an agent record writes its load key in the same Txn (`loadOps`), and those Txns
 * compare the record's mod revision, so the key follows the record exactly. The record stays
 * the truth: a placement reads the records and term keys of the agents the index names and
 * pins its write on them, as it always did.
 *
 * A fleet whose agents registered before the index existed (or whose records were written by
 * another leasehold version) has no `load-built`: the first placement builds it (`buildLoad`).
 */
import type { Labels } from '../../fleet/port.js';
import type { EtcdKeyValue, EtcdRequestOp, EtcdTxnRequest, EtcdTxnResponse } from './client.js';
import type { AgentValue } from './fleet-rows.js';
import { parseAgent } from './fleet-rows.js';
import { json, prefixEnd } from './keys.js';
import { pages, type PageTxn } from './pages.js';

/** Digits of the owned count in a load key: key order is numeric order up to 10^12 resources an agent. */
const DIGITS = 12;
/** Keys written per Txn while building: under etcd's default --max-txn-ops (128). */
const BUILD_CHUNK = 100;

export interface LoadKeys {
  /** `{p}/fleet/agent/` */
  agentPrefix: string;
  /** `{p}/fleet/load/` */
  loadPrefix: string;
  /** `{p}/fleet/load-built` */
  built: Buffer;
}

export const loadKeysOf = (fleetPrefix: string): LoadKeys => ({
  agentPrefix: `${fleetPrefix}agent/`,
  loadPrefix: `${fleetPrefix}load/`,
  built: Buffer.from(`${fleetPrefix}load-built`),
});

/** Whether an agent with this record has a load key: registered and not draining. */
const indexed = (v: AgentValue | null): v is AgentValue => v !== null && v.deregisteredAtMs === undefined && !v.draining;

/** The load key of agent `id` (raw id; encoded here as agent keys are) at `owned`. */
function loadKey(l: LoadKeys, owned: number, id: string): Buffer {
  return Buffer.from(`${l.loadPrefix}${String(Math.max(0, owned)).padStart(DIGITS, '0')}/${encodeURIComponent(id)}`);
}

/** The agent id of a load key, or null for a key leasehold did not write. */
export function idOfLoadKey(l: LoadKeys, key: Buffer): string | null {
  const rest = key.toString().slice(l.loadPrefix.length);
  const slash = rest.indexOf('/');
  if (slash !== DIGITS) return null;
  try {
    return decodeURIComponent(rest.slice(slash + 1));
  } catch {
    return null;
  }
}

/** The labels a load key's value records (null: not one leasehold wrote, so never a match). */
export function labelsOfLoad(kv: EtcdKeyValue): Labels | null {
  try {
    const v = JSON.parse(kv.value.toString()) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Labels) : null;
  } catch {
    return null;
  }
}

/**
 * The load-key ops that go with changing agent `id`'s record from `prev` to `next` (null: no
 * record), in the Txn that writes the record. One op per key: etcd refuses a Txn that puts and
 * deletes the same key.
 */
export function loadOps(l: LoadKeys, id: string, prev: AgentValue | null, next: AgentValue | null): EtcdRequestOp[] {
  const from = indexed(prev) ? loadKey(l, prev.owned, id) : null;
  const to = indexed(next) ? loadKey(l, next.owned, id) : null;
  const ops: EtcdRequestOp[] = [];
  if (from !== null && (to === null || !from.equals(to))) ops.push({ request_delete_range: { key: from } });
  if (to !== null) ops.push({ request_put: { key: to, value: json(next!.labels) } });
  return ops;
}

/**
 * Builds the index from the agent records: each record's key put, any load key no record
 * accounts for deleted, then `load-built` put under one compare over the whole agent range,
 * that no record was written since the first page was read. A record changed meanwhile fails
 * it, and the build reads again (the caller's loop). Builders racing each other put the same
 * keys; a placement waits for `load-built`, so it never walks a half-built index.
 * @returns whether `load-built` was put
 */
export async function buildLoad(txn: PageTxn, l: LoadKeys, write: (req: EtcdTxnRequest) => Promise<EtcdTxnResponse>): Promise<boolean> {
  const from = Buffer.from(l.agentPrefix);
  let since: string | undefined;
  const want = new Map<string, EtcdRequestOp>();
  const readAt: PageTxn = async (req) => {
    const r = await txn(req);
    since ??= r.header?.revision;
    return r;
  };
  for await (const kvs of pages(readAt, from, prefixEnd(from), 'Ascend')) {
    for (const kv of kvs) {
      const value = parseAgent(kv);
      let id: string;
      try {
        id = decodeURIComponent(kv.key.subarray(from.length).toString());
      } catch {
        continue;
      }
      if (indexed(value)) want.set(loadKey(l, value.owned, id).toString(), { request_put: { key: loadKey(l, value.owned, id), value: json(value.labels) } });
    }
  }
  const stale: EtcdRequestOp[] = [];
  const loadFrom = Buffer.from(l.loadPrefix);
  for await (const kvs of pages(txn, loadFrom, prefixEnd(loadFrom), 'Ascend')) {
    for (const kv of kvs) if (!want.has(kv.key.toString())) stale.push({ request_delete_range: { key: kv.key } });
  }
  const ops = [...stale, ...want.values()];
  for (let i = 0; i < ops.length; i += BUILD_CHUNK) await txn({ compare: [], success: ops.slice(i, i + BUILD_CHUNK), failure: [] });
  const r = await write({
    compare: [{ key: from, range_end: prefixEnd(from), target: 'Mod', result: 'Less', mod_revision: (BigInt(since ?? '0') + 1n).toString() }],
    success: [{ request_put: { key: l.built, value: Buffer.from('1') } }],
    failure: [],
  });
  return r.succeeded;
}

/** A page of load keys in key order, and whether the index holds more past its last key. */
export interface LoadPage {
  kvs: EtcdKeyValue[];
  more: boolean;
}

/**
 * Where a placement's first read of the load index ends. etcd counts every key of a range for
 * its answer's `count`, limit or not, and no field of RangeRequest turns that off (keys_only,
 * count_only and limit all count; a sort reads the whole range): a first read up to the index's
 * end cost 3 ms more at 10,000 agents than at 100 for the same 32 keys. So the first read is a
 * window, [the index's start, `end`), which an earlier read placed `walk` keys in: a prefix of
 * the index in key (= owned) order, so its keys are the index's first keys, the very ones an
 * unbounded read would answer, and the least loaded agent among them is the least loaded.
 * Each placement moves its agent up and out of the window; once it holds fewer than `refill`
 * keys, one read past it fills the page and places the window again (that read counts the rest
 * of the index: about once every `walk - refill` placements). A window that grew past `walk`
 * keys (agents registered into it) narrows to the first `walk`.
 */
export class LoadWindow {
  /** Exclusive end of the next first read; undefined: the index's end. */
  private end: Buffer | undefined;
  private readonly indexEnd: Buffer;

  constructor(
    private readonly l: LoadKeys,
    private readonly walk: number,
    private readonly refill: number,
  ) {
    this.indexEnd = prefixEnd(Buffer.from(l.loadPrefix));
  }

  /** The first read, for the placement's first Txn; `bound` goes back to `page`. */
  first(): { op: EtcdRequestOp; bound: Buffer | undefined } {
    const bound = this.end;
    return { op: { request_range: { key: Buffer.from(this.l.loadPrefix), range_end: bound ?? this.indexEnd, limit: this.walk } }, bound };
  }

  /**
   * The first step's page from the first read's answer, read on past the window when it held
   * fewer than `refill` keys. `readOn(from, limit)`: one range read from `from` to the index's end.
   */
  async page(kvs: EtcdKeyValue[], more: boolean, bound: Buffer | undefined, readOn: (from: Buffer, limit: number) => Promise<LoadPage>): Promise<LoadPage> {
    if (bound !== undefined && kvs.length < this.refill) {
      // Every key before `bound` was read (fewer than the limit came back): the index goes on at `bound`.
      const on = await readOn(bound, this.walk - kvs.length);
      const all = [...kvs, ...on.kvs];
      this.end = on.more ? after(all.at(-1)!.key) : undefined;
      return { kvs: all, more: on.more };
    }
    if (more) this.end = after(kvs.at(-1)!.key);
    return { kvs, more: more || bound !== undefined };
  }
}
/** The smallest key after `key`: a range's exclusive end that still includes it. */
function after(key: Buffer): Buffer {
  return Buffer.concat([key, Buffer.from([0])]);
}
