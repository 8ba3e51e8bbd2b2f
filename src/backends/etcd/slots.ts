/**
 * The slot ledger on etcd. A slot's row is the key `{p}/slots/{name}/{key}` (both URI-encoded),
 * JSON. Each call reads what it needs in one read-only Txn (one revision), decides with the rule
 * in src/scheduler/ledger.ts, and writes in a Txn that compares:
 *  - the term key `{p}/term/{name}`'s create revision: the key exists only while etcd keeps the
 *    term's etcd lease alive, and its create revision (plus the floor) IS the fencing token,
 *    so this compare is "the lease is held with this token, unexpired by etcd" in one;
 *  - the slot key's mod revision as read (0: absent), so nothing changed it in between;
 *  - the schema version and the token floor, as every leasehold Txn does (txn.ts).
 * When a compare fails the call reads again and decides again (optimistic, a few attempts).
 *
 * Time: etcd's gRPC API has no clock, so the "store's time" here (slot due, missed, started,
 * ended) comes from `options.clock`: with fromUrl (the CLI), etcd's own clock read from the
 * Date header of its HTTP answers (clock.ts), a lower bound, so a leader whose clock runs ahead
 * neither records future slots as missed nor claims them early. Without one it is this
 * process's clock, and a leader whose clock runs ahead records the slots it is ahead by as
 * missed. Expiry, the property fencing rests on, is etcd's alone either way.
 */
import { AbortedError, SchemaError, StoreUnavailableError } from '../../core/errors.js';
import {
  decideSlotClaim,
  slotKey,
  type SlotClaimRequest,
  type SlotClaimResult,
  type SlotCompletion,
  type SlotLedgerPort,
  type SlotPruneRequest,
  type SlotPruneResult,
  type SlotRecord,
  type SlotSkipRequest,
  type SlotStatus,
  type SlotTerm,
} from '../../scheduler/ledger.js';
import { decodeSchedule, encodeSchedule, type ScheduleRecord } from '../../scheduler/schedule-record.js';
import { createEtcd3Client, parseEtcdUrl, validatePrefix, type Etcd3Like, type EtcdKeyValue, type EtcdRequestOp, type EtcdTxnRequest, type EtcdTxnResponse } from './client.js';
import { etcdClockOf, type StoreClock } from './clock.js';
import { EtcdKeys, SCHEMA_VERSION, prefixEnd } from './keys.js';
import { mapLedgerError, pages } from './pages.js';
import { first, guarded, rangeOf, schemaError, schemaOk } from './txn.js';

/** All the ledger calls: a Txn with a deadline (an etcd3 client, or the store's member pool). */
interface TxnClient {
  kv: { txn(req: EtcdTxnRequest, options: { deadline: number }): Promise<EtcdTxnResponse> };
}

export interface EtcdSlotLedgerOptions {
  /** A client of the lease store's etcd cluster. */
  client: Etcd3Like;
  /** The lease store's prefix. Default `leasehold`. */
  prefix?: string;
  /** Per call. Default 5000 ms. */
  callTimeoutMs?: number;
  /**
   * The store's time for "due" and "missed": `etcdClock({ hosts })` reads etcd's own clock.
   * Default: this process's clock, which a leader whose clock runs ahead trusts wrongly.
   */
  clock?: StoreClock;
}

interface Row {
  slotAtMs: number | null;
  status: SlotStatus;
  token: string;
  holder: string | null;
  startedAtMs: number | null;
  endedAtMs: number | null;
  exitCode: number | null;
  reason: string | null;
}

const ATTEMPTS = 8;
/** Slots per Txn: well under etcd's default --max-txn-ops (128), with the guard's compares. */
const CHUNK = 50;

export class EtcdSlotLedger implements SlotLedgerPort {
  readonly kind = 'etcd';
  private readonly client: TxnClient;
  private readonly keys: EtcdKeys;
  private readonly timeoutMs: number;
  private readonly end: (() => void) | undefined;
  private readonly now: StoreClock;

  constructor(options: Omit<EtcdSlotLedgerOptions, 'client'> & { client: TxnClient }, end?: () => void) {
    this.client = options.client;
    this.now = options.clock ?? (() => Promise.resolve(Date.now()));
    this.keys = new EtcdKeys(validatePrefix(options.prefix ?? 'leasehold'));
    this.timeoutMs = options.callTimeoutMs ?? 5000;
    this.end = end;
  }

  /** A ledger with a client of its own, for the store at `url` (what the CLI uses). */
  static async fromUrl(url: string, prefix?: string): Promise<EtcdSlotLedger> {
    const parsed = parseEtcdUrl(url);
    const client = await createEtcd3Client(parsed);
    return new EtcdSlotLedger(
      { client, prefix: prefix ?? parsed.prefix ?? 'leasehold', clock: etcdClockOf(parsed), ...(parsed.callTimeoutMs === undefined ? {} : { callTimeoutMs: parsed.callTimeoutMs }) },
      () => client.close(),
    );
  }

  private slot(name: string, key: string): Buffer {
    return Buffer.from(`${this.slotsOf(name)}${encodeURIComponent(key)}`);
  }

  private slotsOf(name: string): string {
    return `${this.keys.slotsPrefix}${encodeURIComponent(name)}/`;
  }

  private async txn(req: EtcdTxnRequest, what: string): Promise<EtcdTxnResponse> {
    try {
      return await this.client.kv.txn(req, { deadline: Date.now() + this.timeoutMs });
    } catch (err) {
      throw mapLedgerError(err, `slot ledger ${what}`);
    }
  }

  /**
   * Reads, in one revision, the schema version, the floor, the term key of `name` and `ops`.
   * Resolves with the term's create revision when `term` holds it (else null), and the rest.
   */
  private async read(term: SlotTerm, ops: EtcdRequestOp[], what: string): Promise<{ termRev: string | null; responses: EtcdTxnResponse['responses']; nowMs: number }> {
    const r = await this.txn({ compare: [], success: [rangeOf(this.keys.version), rangeOf(this.keys.floorKey), rangeOf(this.keys.term(term.name)), ...ops], failure: [] }, what);
    // After the answer: a bound of etcd's time at a moment after the term key was read.
    const nowMs = await this.now();
    const v = first(r.responses[0]);
    const found = v === undefined ? 0 : Number(v.value.toString());
    if (found !== SCHEMA_VERSION) throw schemaError(this.keys, found);
    this.keys.setFloor(first(r.responses[1]));
    const t = first(r.responses[2]);
    let holder: unknown;
    try {
      holder = t === undefined ? undefined : (JSON.parse(t.value.toString()) as unknown[])[0];
    } catch {
      holder = undefined;
    }
    const held = t !== undefined && holder === term.holder && this.keys.token(t.create_revision) === term.token;
    return { termRev: held ? String(t.create_revision) : null, responses: r.responses.slice(3), nowMs };
  }

  /** Writes `ops` if the term still holds the lease and every `unchanged` key has the mod revision read. */
  private async write(name: string, termRev: string, unchanged: Array<{ key: Buffer; mod: string }>, ops: EtcdRequestOp[], what: string): Promise<boolean> {
    const compares: EtcdTxnRequest['compare'] = [
      { key: this.keys.term(name), target: 'Create', result: 'Equal', create_revision: termRev },
      ...unchanged.map((u) => ({ key: u.key, target: 'Mod' as const, result: 'Equal' as const, mod_revision: u.mod })),
    ];
    return schemaOk(this.keys, await this.txn(guarded(this.keys, ops, compares), what));
  }

  async claim(req: SlotClaimRequest): Promise<SlotClaimResult> {
    const key = this.slot(req.name, req.key);
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      if (req.signal?.aborted === true) throw new AbortedError('slot ledger claim aborted; it has not landed');
      const { termRev, responses, nowMs } = await this.read(req, [rangeOf(key)], 'claim');
      const kv = first(responses[0]);
      const cur = kv === undefined ? undefined : toRecord(req.name, req.key, kv);
      const d = decideSlotClaim(cur, req, termRev !== null, nowMs);
      const w = d.write;
      let record = cur;
      if (w.kind !== 'none') {
        const row: Row = {
          slotAtMs: req.slotAtMs,
          status: w.status,
          token: req.token.toString(),
          holder: req.holder,
          startedAtMs: nowMs,
          endedAtMs: w.status === 'skipped' ? nowMs : null,
          exitCode: null,
          reason: w.reason,
        };
        if (!(await this.write(req.name, termRev!, [{ key, mod: kv?.mod_revision ?? '0' }], [{ request_put: { key, value: Buffer.from(JSON.stringify(row)) } }], 'claim'))) continue;
        record = fromRow(req.name, req.key, row);
      }
      if (d.outcome === 'done') return { outcome: 'done', storeNowMs: nowMs, record: record! };
      if (d.outcome === 'claimed') return { outcome: 'claimed', storeNowMs: nowMs, rerunOf: d.rerunOf };
      return { outcome: d.outcome, storeNowMs: nowMs };
    }
    throw contended('claim');
  }

  async skip(req: SlotSkipRequest): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }> {
    let skipped = 0;
    let storeNowMs = 0;
    for (let i = 0; i < req.slots.length || i === 0; i += CHUNK) {
      const chunk = req.slots.slice(i, i + CHUNK);
      const done = await this.skipChunk(req, chunk);
      if (done.fenced) return { fenced: true, skipped, storeNowMs: done.storeNowMs };
      skipped += done.skipped;
      storeNowMs = done.storeNowMs;
    }
    return { fenced: false, skipped, storeNowMs };
  }

  private async skipChunk(req: SlotSkipRequest, slots: SlotSkipRequest['slots']): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }> {
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const { termRev, nowMs } = await this.read(req, [], 'skip');
      if (termRev === null) return { fenced: true, skipped: 0, storeNowMs: nowMs };
      if (slots.length === 0) return { fenced: false, skipped: 0, storeNowMs: nowMs };
      // One inner Txn per slot: written only where no row exists (create revision 0).
      const ops: EtcdRequestOp[] = slots.map((s) => {
        const key = this.slot(req.name, s.key);
        const row: Row = { slotAtMs: s.slotAtMs, status: 'skipped', token: req.token.toString(), holder: req.holder, startedAtMs: nowMs, endedAtMs: nowMs, exitCode: null, reason: req.reason };
        return { request_txn: { compare: [{ key, target: 'Create', result: 'Equal', create_revision: 0 }], success: [{ request_put: { key, value: Buffer.from(JSON.stringify(row)) } }], failure: [] } };
      });
      const r = await this.txn(
        guarded(this.keys, ops, [{ key: this.keys.term(req.name), target: 'Create', result: 'Equal', create_revision: termRev }]),
        'skip',
      );
      if (!schemaOk(this.keys, r)) continue;
      return { fenced: false, skipped: r.responses.filter((x) => x.response_txn?.succeeded === true).length, storeNowMs: nowMs };
    }
    throw contended('skip');
  }

  async complete(req: SlotCompletion): Promise<{ completed: boolean; storeNowMs: number }> {
    const key = this.slot(req.name, req.key);
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const r = await this.txn({ compare: [], success: [rangeOf(key)], failure: [] }, 'complete');
      const nowMs = await this.now();
      const kv = first(r.responses[0]);
      if (kv === undefined) return { completed: false, storeNowMs: nowMs };
      const row = JSON.parse(kv.value.toString()) as Row;
      if (row.token !== req.token.toString() || row.status !== 'claimed') return { completed: false, storeNowMs: nowMs };
      const next: Row = { ...row, status: req.status, endedAtMs: nowMs, exitCode: req.exitCode, reason: req.reason ?? row.reason };
      // Not fenced by the lease (a term completes after it ended): by the row's token alone.
      const w = await this.txn(
        { compare: [{ key, target: 'Mod', result: 'Equal', mod_revision: kv.mod_revision }], success: [{ request_put: { key, value: Buffer.from(JSON.stringify(next)) } }], failure: [] },
        'complete',
      );
      if (w.succeeded) return { completed: true, storeNowMs: nowMs };
    }
    throw contended('complete');
  }

  /**
   * The term is checked first, then the name's rows are read in pages (never in one answer: see
   * pages.ts) and the stale ones rewritten CHUNK per Txn, each Txn pinned on the term key and on
   * every row's mod revision. No stale row can appear meanwhile (only an older term writes one,
   * and its writes compare the term key this term now holds), so one clean pass is the end; a
   * conflict (the term ended, a row changed) checks the term again and reads again.
   */
  async interruptStale(term: SlotTerm): Promise<{ fenced: boolean; interrupted: number; storeNowMs: number }> {
    let interrupted = 0;
    const prefix = Buffer.from(this.slotsOf(term.name));
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const { termRev, nowMs } = await this.read(term, [], 'interruptStale');
      if (termRev === null) return { fenced: true, interrupted, storeNowMs: nowMs };
      const stale: Array<{ kv: EtcdKeyValue; row: Row }> = [];
      for await (const kvs of this.pages(prefix, prefixEnd(prefix), 'Ascend', 'interruptStale')) {
        for (const kv of kvs) {
          const row = parseRow(kv);
          if (row.status === 'claimed' && BigInt(row.token) < term.token) stale.push({ kv, row });
        }
      }
      const reason = `its term ended before it completed (seen by term ${term.token})`;
      let conflicted = false;
      for (let i = 0; i < stale.length && !conflicted; i += CHUNK) {
        const chunk = stale.slice(i, i + CHUNK);
        const ops = chunk.map(({ kv, row }) => ({ request_put: { key: kv.key, value: Buffer.from(JSON.stringify({ ...row, status: 'interrupted', endedAtMs: nowMs, reason })) } }));
        if (await this.write(term.name, termRev, chunk.map(({ kv }) => ({ key: kv.key, mod: kv.mod_revision })), ops, 'interruptStale')) interrupted += chunk.length;
        else conflicted = true;
      }
      if (!conflicted) return { fenced: false, interrupted, storeNowMs: nowMs };
    }
    throw contended('interruptStale');
  }

  /**
   * In pages (never the name's whole range in one answer: past about 17,000 rows it exceeds
   * gRPC's 4 MB limit). Every page is read, since a key need not sort as its slot does (once-per
   * keys, a caller's own keys); only the rows the filter keeps are held.
   */
  async records(name: string, options: { sinceMs?: number; untilMs?: number; limit?: number } = {}): Promise<SlotRecord[]> {
    const prefix = this.slotsOf(name);
    const from = Buffer.from(prefix);
    const scheduled = options.sinceMs !== undefined || options.untilMs !== undefined;
    const at = (x: SlotRecord): number => x.slotAtMs ?? x.startedAtMs ?? 0;
    const rows: SlotRecord[] = [];
    for await (const kvs of this.pages(from, prefixEnd(from), 'Ascend', 'records')) {
      for (const kv of kvs) {
        const x = toRecord(name, decodeURIComponent(kv.key.toString().slice(prefix.length)), kv);
        if (scheduled && x.slotAtMs === null) continue;
        if (options.sinceMs !== undefined && !(x.slotAtMs! > options.sinceMs)) continue;
        if (options.untilMs !== undefined && !(x.slotAtMs! <= options.untilMs)) continue;
        rows.push(x);
      }
    }
    rows.sort((a, b) => at(a) - at(b) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    return rows.slice(Math.max(0, rows.length - (options.limit ?? 1000)));
  }

  /**
   * A prune batch in pages, never the name's whole prefix in one answer (an every-second
   * schedule's rows pass gRPC's 4 MB answer limit within hours). Keys are read in key order,
   * which is slot order for the keys a schedule writes (ISO 8601 times); every decision is on the
   * row's own slotAtMs. slotPruneCutoff's rule (ledger.ts): the keep-th newest scheduled row,
   * read downwards from the top, and the newest before the horizon, read downwards from it; then
   * the rows below the cutoff, upwards. Each is deleted only if its mod revision is still the one
   * read (a row claimed or rewritten since stays), CHUNK per Txn. Not fenced by a term: it
   * deletes no row a term reads.
   */
  async prune(req: SlotPruneRequest): Promise<SlotPruneResult> {
    const prefix = Buffer.from(this.slotsOf(req.name));
    const end = prefixEnd(prefix);
    const nowMs = await this.now();
    const at = (ms: number): Buffer => this.slot(req.name, slotKey(ms));
    const parse = (kv: EtcdKeyValue): Row => JSON.parse(kv.value.toString()) as Row;
    /** The n-th scheduled row below `hi` (exclusive), downwards, whose slot is below `below`. */
    const nth = async (hi: Buffer, n: number, below: number): Promise<number | null> => {
      let seen = 0;
      for await (const kvs of this.pages(prefix, hi, 'Descend', 'prune')) {
        for (const kv of kvs) {
          const t = parse(kv).slotAtMs;
          if (t !== null && t < below && ++seen === n) return t;
        }
      }
      return null;
    };
    const kept = await nth(end, Math.max(1, req.keep), Infinity);
    const boundary = kept === null ? null : await nth(at(nowMs - req.olderThanMs), 1, nowMs - req.olderThanMs);
    const cutoff = kept === null || boundary === null ? null : Math.min(kept, boundary);
    const once = req.oncePerOlderThanMs === undefined ? undefined : nowMs - req.oncePerOlderThanMs;
    const victims: EtcdKeyValue[] = [];
    /** Upwards from `lo` to `hi`, the rows `take` accepts, until the batch is full. */
    const collect = async (lo: Buffer, hi: Buffer, take: (row: Row) => boolean): Promise<void> => {
      for await (const kvs of this.pages(lo, hi, 'Ascend', 'prune')) {
        for (const kv of kvs) if (victims.length < req.limit && take(parse(kv))) victims.push(kv);
        if (victims.length >= req.limit) return;
      }
    };
    if (cutoff !== null) await collect(prefix, at(cutoff), (row) => row.status !== 'claimed' && row.slotAtMs !== null && row.slotAtMs < cutoff);
    // Once-per keys sort anywhere among the slot times: only this reads the whole prefix, in pages.
    if (once !== undefined) await collect(prefix, end, (row) => row.status !== 'claimed' && row.slotAtMs === null && row.endedAtMs !== null && row.endedAtMs < once);
    let deleted = 0;
    for (let i = 0; i < victims.length; i += CHUNK) {
      const ops: EtcdRequestOp[] = victims.slice(i, i + CHUNK).map((kv) => ({
        request_txn: {
          compare: [{ key: kv.key, target: 'Mod', result: 'Equal', mod_revision: kv.mod_revision }],
          success: [{ request_delete_range: { key: kv.key } }],
          failure: [],
        },
      }));
      const w = await this.txn({ compare: [], success: ops, failure: [] }, 'prune');
      deleted += w.responses.filter((x) => x.response_txn?.succeeded === true).length;
    }
    return { deleted, more: victims.length >= req.limit, storeNowMs: nowMs };
  }

  private pages(from: Buffer, to: Buffer, order: 'Ascend' | 'Descend', what: string, size?: number): AsyncGenerator<EtcdKeyValue[]> {
    return pages((req) => this.txn(req, what), from, to, order, size);
  }

  /** One range per name: each answer's one key names a schedule, and the next read starts past its keys. */
  async names(): Promise<string[]> {
    const names: string[] = [];
    const prefix = Buffer.from(this.keys.slotsPrefix);
    const end = prefixEnd(prefix);
    for (let from: Buffer = prefix; ; ) {
      let kv: EtcdKeyValue | undefined;
      for await (const kvs of this.pages(from, end, 'Ascend', 'names', 1)) {
        kv = kvs[0];
        break;
      }
      if (kv === undefined) return names;
      const rest = kv.key.toString().slice(this.keys.slotsPrefix.length);
      const encoded = rest.slice(0, rest.indexOf('/'));
      names.push(decodeURIComponent(encoded));
      from = prefixEnd(Buffer.from(`${this.keys.slotsPrefix}${encoded}/`));
    }
  }

  private schedulesPrefix(): string {
    return `${this.keys.prefix}/schedules/`;
  }

  /** Read, then written only if the key still has the mod revision read (0: absent) and no later term's record is there. */
  async putSchedule(record: ScheduleRecord): Promise<void> {
    const key = Buffer.from(`${this.schedulesPrefix()}${encodeURIComponent(record.name)}`);
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const kv = first((await this.txn({ compare: [], success: [rangeOf(key)], failure: [] }, 'putSchedule')).responses[0]);
      if (kv !== undefined && decodeSchedule(kv.value.toString()).token > record.token) return;
      const w = await this.txn(
        { compare: [{ key, target: 'Mod', result: 'Equal', mod_revision: kv?.mod_revision ?? '0' }], success: [{ request_put: { key, value: Buffer.from(encodeSchedule(record)) } }], failure: [] },
        'putSchedule',
      );
      if (w.succeeded) return;
    }
    throw contended('putSchedule');
  }

  async schedules(): Promise<ScheduleRecord[]> {
    const from = Buffer.from(this.schedulesPrefix());
    const out: ScheduleRecord[] = [];
    for await (const kvs of this.pages(from, prefixEnd(from), 'Ascend', 'schedules')) for (const kv of kvs) out.push(decodeSchedule(kv.value.toString()));
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  close(): Promise<void> {
    this.end?.();
    return Promise.resolve();
  }
}

function contended(what: string): StoreUnavailableError {
  return new StoreUnavailableError(`etcd: the slot ledger's ${what} kept meeting concurrent changes; this is retryable`);
}

function parseRow(kv: EtcdKeyValue): Row {
  try {
    return JSON.parse(kv.value.toString()) as Row;
  } catch (err) {
    throw new SchemaError(`etcd key ${kv.key.toString()} is not a slot ledger row; was it written by something else?`, { cause: err });
  }
}

function toRecord(name: string, key: string, kv: EtcdKeyValue): SlotRecord {
  return fromRow(name, key, parseRow(kv));
}

function fromRow(name: string, key: string, r: Row): SlotRecord {
  return {
    name,
    key,
    slotAtMs: r.slotAtMs,
    status: r.status,
    token: BigInt(r.token),
    holder: r.holder,
    startedAtMs: r.startedAtMs,
    endedAtMs: r.endedAtMs,
    exitCode: r.exitCode,
    reason: r.reason,
  };
}

