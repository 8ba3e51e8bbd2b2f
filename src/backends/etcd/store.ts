import { ClosedError, ConfigError, StoreRestoredError, StoreUnavailableError } from '../../core/errors.js';
import { newNonce } from '../../core/identity.js';
import { validateMinToken } from '../min-token.js';
import { historyLimit } from '../checks.js';
import type {
  CallOptions,
  ClaimRequest,
  ClaimResult,
  FreedListener,
  HistoryEntry,
  LeaseInfo,
  LeaseStore,
  ReleaseRequest,
  RevokeResult,
  SchemaStatus,
  MigrateOptions,
  MigrateResult,
} from '../store.js';
import { claimBatch, estimateExpiry, leaseRemaining, shortestTtlMs, type Grant } from './claim.js';
import type { SeenState } from './seen.js';
import { createEtcd3Client, mapEtcdError, parseEtcdUrl, validatePrefix, type Etcd3Like, type EtcdTxnRequest, type EtcdTxnResponse } from './client.js';
import { MemberPool } from './members.js';
import { EtcdKeys, SCHEMA_VERSION, parseRenew, parseSession, parseState, parseTerm, prefixEnd, stateToken, type HistoryValue } from './keys.js';
import { all, first, guarded, rangeOf, rangePrefix, schemaError, schemaOk } from './txn.js';
import { watchTermDeletes } from './watch.js';
import { SessionBook } from './session-book.js';
import { Lanes } from './lanes.js';
import { endWrite, releaseBatch } from './release.js';
import { RestoreGuard } from './restore.js';
import { realClock, type Clock } from './time.js';

export interface EtcdStoreOptions {
  /**
   * `etcd://host:2379[,host:2379]?prefix=leasehold&timeout=5000` (`etcds://` for TLS, with
   * `cacert=`, `cert=`, `key=` PEM files as needed), or pass `client`.
   */
  url?: string;
  /** Your own `Etcd3` client; leasehold will not close it. Its fault-handling policies are yours. */
  client?: Etcd3Like;
  /** Key prefix for everything leasehold writes. Default `leasehold` (or `?prefix=` in the URL). */
  prefix?: string;
  /** Deadline for each store call (a claim's grant, txn and lookups together). Default 5000ms. */
  callTimeoutMs?: number;
  /** etcd's --max-txn-ops; batches are split to fit. Default 128 (etcd's default). */
  maxOpsPerTxn?: number;
  /** Every time the store reads (default the process's own). The times it reports are this clock's at etcd's answers. */
  clock?: Clock;
}

const DEFAULT_CALL_TIMEOUT_MS = 5000;
/**
 * Batch-release chunks with etcd at once (lanes.ts): enough to keep etcd's apply loop fed
 * while one chunk's answer travels back, few enough that none waits long inside etcd.
 */
const RELEASE_LANES = 4;
/** History ids are revision * 1000 + position within the transaction (entries written together share a revision). */
const HISTORY_ID_STRIDE = 1000n;
const MAX_CAS_ATTEMPTS = 5;

/**
 * Leases in etcd, with etcd's leases for expiry and its revisions for fencing tokens.
 *
 * "The store's clock": etcd has no clock API. A granted or renewed term reports
 * `storeNowMs` = local time at the answer and `expiresAtMs` = local send time of the lease grant
 * + the granted TTL, so `expiresAtMs - storeNowMs` is a lower bound of the time etcd will keep
 * the term (etcd starts the TTL when it receives the grant, later than we sent it). Everything
 * time-like this store reports is that remaining-TTL difference, anchored at local time.
 */
export class EtcdStore implements LeaseStore {
  readonly kind = 'etcd';
  readonly maxClaimBatch = 20_000; // a renewal tick is one session swap and one keepalive at any size (session.ts)
  /** etcd deletes a term key when its etcd lease runs out, and the watch sees that delete too. */
  readonly freedCoversExpiry = true as const;
  readonly honoursReleasedSince = true as const; // port.ts: refused from the state key's read (seen.ts, refusedSince)
  readonly description: string;
  readonly prefix: string;
  private readonly client: MemberPool;
  private readonly ownsClient: boolean;
  private readonly keys: EtcdKeys;
  private readonly callTimeoutMs: number;
  private readonly maxOpsPerTxn: number;
  private readonly seen = new Map<string, SeenState>();
  private readonly sessions: SessionBook;
  private readonly releaseLanes = new Lanes(RELEASE_LANES);
  /** Refuses grants on an etcd restored from an old backup (restore.ts). */
  private readonly restore: RestoreGuard;
  private readonly grants = new Map<number, { promise: Promise<Grant>; grant?: Grant; sentAtMs: number }>();
  private closed = false;
  private watching: { stop: () => Promise<void>; up: () => boolean } | undefined;

  private constructor(client: MemberPool, ownsClient: boolean, prefix: string, description: string, options: EtcdStoreOptions) {
    this.client = client;
    this.ownsClient = ownsClient;
    this.sessions = new SessionBook(client.clock);
    this.prefix = validatePrefix(prefix);
    this.keys = new EtcdKeys(this.prefix);
    this.restore = new RestoreGuard(this.client, this.keys);
    this.description = `${description} (prefix ${this.prefix}/)`;
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    if (!Number.isFinite(this.callTimeoutMs) || this.callTimeoutMs <= 0) {
      throw new ConfigError(`etcd callTimeoutMs must be a positive number of milliseconds, got ${options.callTimeoutMs}`);
    }
    this.maxOpsPerTxn = options.maxOpsPerTxn ?? 128;
    if (!Number.isInteger(this.maxOpsPerTxn) || this.maxOpsPerTxn < 16 || this.maxOpsPerTxn > 1000) {
      throw new ConfigError(`etcd maxOpsPerTxn must be a whole number from 16 to 1000 (etcd's --max-txn-ops), got ${options.maxOpsPerTxn}`);
    }
  }

  /** @throws {ConfigError} for a malformed URL, or when `etcd3` is not installed. */
  static async create(options: EtcdStoreOptions): Promise<EtcdStore> {
    if (options.client !== undefined) {
      return new EtcdStore(new MemberPool([options.client], options.client, [], options.clock ?? realClock), false, options.prefix ?? 'leasehold', 'etcd (your client)', options);
    }
    if (options.url === undefined) throw new ConfigError('the etcd store needs a url (etcd://host:2379) or a client');
    const parsed = parseEtcdUrl(options.url);
    const client = await createEtcd3Client(parsed, options.clock ?? realClock);
    const merged = { ...options, callTimeoutMs: options.callTimeoutMs ?? parsed.callTimeoutMs };
    try {
      return new EtcdStore(client, true, options.prefix ?? parsed.prefix ?? 'leasehold', parsed.description, merged);
    } catch (err) {
      client.close();
      throw err;
    }
  }

  private begin(options?: CallOptions): number {
    if (this.closed) throw new ClosedError('this EtcdStore is closed; open a new store');
    options?.signal?.throwIfAborted();
    return this.client.clock.wallNow() + this.callTimeoutMs;
  }

  private async txn(req: EtcdTxnRequest, deadline: number, where: string): Promise<EtcdTxnResponse> {
    try {
      return await this.client.kv.txn(req, { deadline });
    } catch (err) {
      throw mapEtcdError(err, where);
    }
  }

  /**
   * For the fleet registry (./fleet.ts), whose keys live beside these and whose liveness is these
   * term keys: the client, the key layout with the token floor loaded, and this call's deadline.
   */
  async fleetContext(options?: CallOptions): Promise<{ client: MemberPool; keys: EtcdKeys; deadline: number }> {
    const deadline = this.begin(options);
    await this.loadFloor(deadline);
    return { client: this.client, keys: this.keys, deadline };
  }

  /** Reads the token floor once per store instance; after that, every Txn compares it. */
  private async loadFloor(deadline: number): Promise<void> {
    if (this.keys.floorLoaded) return;
    let kv;
    try {
      kv = (await this.client.kv.range({ key: this.keys.floorKey }, { deadline })).kvs[0];
    } catch (err) {
      throw mapEtcdError(err, 'token floor');
    }
    this.keys.setFloor(kv);
  }

  /**
   * Raises `{p}/token-floor` (never lowers it). A term's token is its key's create revision plus
   * the floor, so a raised floor would change a live term's token under its holder: every live
   * term key is deleted in the same Txn (its holder's next renewal finds it gone and stands
   * down; followers are woken by the deletes).
   */
  private async raiseFloor(minToken: bigint, deadline: number): Promise<NonNullable<MigrateResult['tokenFloor']>> {
    for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
      this.keys.floorLoaded = false;
      await this.loadFloor(deadline);
      const before = this.keys.floor;
      if (minToken <= before) return { floor: before, raised: false, endedTerms: 0 };
      const r = await this.txn(
        {
          compare: [{ key: this.keys.floorKey, target: 'Mod', result: 'Equal', mod_revision: this.keys.floorRev }],
          success: [
            { request_put: { key: this.keys.floorKey, value: Buffer.from(minToken.toString()) } },
            { request_delete_range: { key: Buffer.from(this.keys.termPrefix), range_end: prefixEnd(Buffer.from(this.keys.termPrefix)) } },
          ],
          failure: [],
        },
        deadline,
        'migrate --min-token',
      );
      if (!r.succeeded) continue;
      // Every term key is gone: no session of this store renews any of them.
      this.sessions.clear();
      this.keys.floor = minToken;
      this.keys.floorRev = String(r.header?.revision ?? '0');
      return { floor: minToken, raised: true, endedTerms: Number(r.responses[1]?.response_delete_range?.deleted ?? 0) };
    }
    throw new StoreUnavailableError(`etcd: the token floor under "${this.keys.prefix}/" kept changing; try again`);
  }

  async nextToken(options?: CallOptions & { name?: string }): Promise<bigint> {
    const deadline = this.begin(options);
    let r;
    try {
      // Revisions are cluster-wide: whatever the name, its next term key is created above this.
      r = await this.client.kv.range({ key: this.keys.floorKey }, { deadline });
    } catch (err) {
      throw mapEtcdError(err, 'next token');
    }
    this.keys.setFloor(r.kvs[0]);
    return this.keys.token(BigInt(r.header?.revision ?? 0) + 1n);
  }

  /** Creates the version key. Idempotent, and safe from many processes: one create-if-absent. */
  async migrate(options?: MigrateOptions): Promise<MigrateResult> {
    const minToken = options?.minToken === undefined ? undefined : validateMinToken(options.minToken, 2n ** 62n, 'etcd');
    const deadline = this.begin(options);
    const r = await this.txn(
      {
        compare: [{ key: this.keys.version, target: 'Create', result: 'Equal', create_revision: 0 }],
        success: [{ request_put: { key: this.keys.version, value: Buffer.from(String(SCHEMA_VERSION)) } }],
        failure: [rangeOf(this.keys.version)],
      },
      deadline,
      'migrate',
    );
    if (!r.succeeded) {
      const found = Number(first(r.responses[0])?.value.toString());
      if (found === 1) await this.upgradeFrom1(deadline);
      else if (found !== SCHEMA_VERSION) throw schemaError(this.keys, found);
    }
    if (minToken === undefined) return { current: SCHEMA_VERSION, expected: SCHEMA_VERSION };
    const tokenFloor = await this.raiseFloor(minToken, deadline);
    await this.acknowledgeRestore(deadline);
    return { current: SCHEMA_VERSION, expected: SCHEMA_VERSION, tokenFloor };
  }

  /**
   * `migrate --min-token` is the operator's word that tokens above the floor were never issued:
   * the restore guard accepts the raft-log gap as it is now (+1: Status reads the revision a
   * moment before the applied index) and forgets any drop a process recorded (restore.ts).
   */
  private async acknowledgeRestore(deadline: number): Promise<void> {
    const gap = await this.restore.currentGap(deadline);
    const ack = gap === undefined ? [] : [{ request_put: { key: this.keys.restoreAck, value: Buffer.from(String(gap + 1n > 0n ? gap + 1n : 0n)) } }];
    await this.txn({ compare: [], success: [...ack, { request_delete_range: { key: this.keys.restoreRewound } }], failure: [] }, deadline, 'migrate --min-token');
    this.restore.acknowledged();
  }

  /** For `doctor`: whether this etcd looks restored from an older backup (restore.ts), and why. */
  async restoreCheck(options?: CallOptions): Promise<{ restored: boolean; detail: string; seenToken?: bigint }> {
    const deadline = this.begin(options);
    await this.loadFloor(deadline);
    const err = await this.restore.status(deadline);
    if (err === undefined) return { restored: false, detail: 'no sign of a restore (raft log against revisions, and no mark left by a process)' };
    return { restored: true, detail: err.message, ...(err.seenToken === undefined ? {} : { seenToken: err.seenToken }) };
  }

  /**
   * Version 1 to 2: the layout is the same; what changes is that every process deleting a term
   * key marks the delete for the term's session (session.ts). Version-1 processes do not, and
   * would revoke a term without its session ever hearing of it: from this write on, each of
   * their transactions fails its version compare and they stand down with a SchemaError
   * ("newer than this leasehold; upgrade leasehold").
   */
  private async upgradeFrom1(deadline: number): Promise<void> {
    const r = await this.txn(
      {
        compare: [{ key: this.keys.version, target: 'Value', result: 'Equal', value: Buffer.from('1') }],
        success: [{ request_put: { key: this.keys.version, value: Buffer.from(String(SCHEMA_VERSION)) } }],
        failure: [rangeOf(this.keys.version)],
      },
      deadline,
      'migrate',
    );
    if (r.succeeded) return;
    const found = Number(first(r.responses[0])?.value.toString());
    if (found !== SCHEMA_VERSION) throw schemaError(this.keys, found);
  }

  async schemaStatus(options?: CallOptions): Promise<SchemaStatus> {
    const deadline = this.begin(options);
    let kv;
    try {
      kv = (await this.client.kv.range({ key: this.keys.version }, { deadline })).kvs[0];
    } catch (err) {
      throw mapEtcdError(err, 'schema status');
    }
    const current = kv === undefined ? 0 : Number(kv.value.toString());
    return { current: Number.isFinite(current) ? current : 0, expected: SCHEMA_VERSION };
  }

  async claim(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> {
    const deadline = this.begin(options);
    await this.loadFloor(deadline);
    if (requests.length === 0) return [];
    // Only a contender can be granted a term (a renewal keeps its token): claimBatch checks for a
    // restore before granting (at most once per RECHECK_MS), and this looks at the answers after.
    const mayGrant = requests.some((r) => r.expect === null);
    try {
      // One attempt on one member: well inside the shortest renew interval (ttl/3 by default),
      // so a hung member leaves time for another to answer before the term's deadline.
      const attemptMs = Math.min(2000, Math.max(200, shortestTtlMs(requests) / 8));
      const results = await claimBatch(
        {
          client: this.client,
          keys: this.keys,
          maxOpsPerTxn: this.maxOpsPerTxn,
          seen: this.seen,
          watched: () => this.watching?.up() === true,
          leaseFor: (ttlMs, d) => this.leaseFor(ttlMs, d, attemptMs),
          call: { signal: options?.signal, attemptMs },
          sessions: this.client.canKeepAlive ? this.sessions : undefined,
          beforeGrant: (d) => this.restore.beforeGrant(d, attemptMs),
        },
        requests,
        deadline,
      );
      if (mayGrant) await this.restore.afterGrant(deadline, attemptMs);
      return results;
    } catch (err) {
      // A cached lease may be what failed (revoked by an operator, or lost with a restored etcd).
      this.grants.clear();
      // etcd may have been restarted, perhaps from a backup: the next grant checks again.
      if (!(err instanceof StoreRestoredError)) this.restore.recheck();
      throw err;
    }
  }

  /**
   * An etcd lease for a term of `ttlMs`, rounded up to whole seconds. Concurrent claims share
   * one grant, and a granted lease is reused while it still covers the whole requested TTL
   * (the slack left by rounding up). Leases are never kept alive or revoked: each is shared by
   * every term one batch put on it, and simply runs out once they have all moved on.
   */
  private leaseFor(ttlMs: number, deadline: number, attemptMs: number): Promise<Grant> {
    const ttlSec = Math.max(1, Math.ceil(ttlMs / 1000));
    const now = this.client.clock.wallNow();
    const cached = this.grants.get(ttlSec);
    if (cached !== undefined) {
      // A grant still pending after an attempt's budget is hung somewhere: a claim that joined
      // it would fail with it, so a new claim asks for its own (the old one is left to finish).
      if (cached.grant === undefined && now - cached.sentAtMs < attemptMs) return cached.promise;
      if (cached.grant !== undefined && cached.grant.sentAtMs + cached.grant.ttlSec * 1000 - now >= ttlMs) return Promise.resolve(cached.grant);
    }
    // No caller's signal: a grant is shared, and one caller giving up must not fail the others.
    const promise = this.client.leaseClient.leaseGrant({ TTL: ttlSec }, { deadline, attemptMs }).then((r): Grant => {
      if (r.error !== undefined && r.error !== '') throw new StoreUnavailableError(`etcd refused a lease grant: ${r.error}`);
      return { id: r.ID, ttlSec: Number(r.TTL), sentAtMs: now };
    });
    const entry: { promise: Promise<Grant>; grant?: Grant; sentAtMs: number } = { promise, sentAtMs: now };
    this.grants.set(ttlSec, entry);
    void promise.then(
      (g) => {
        entry.grant = g;
      },
      () => {
        if (this.grants.get(ttlSec) === entry) this.grants.delete(ttlSec);
      },
    );
    return promise;
  }

  /**
   * Deletes the term key if the caller's term is still current, in one compare-and-swap on the
   * revisions just read. The etcd lease is not revoked: it may carry the caller's other terms.
   */
  async release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    // A term its session renews keeps the nonce of the renewal that moved it there; the
    // nonces since are the session's (session.ts).
    const held = this.sessions.find(req.holder, req.name);
    const r = await this.endTerm(
      req.name,
      (term, rev) =>
        term.holder === req.holder && (req.expect.includes(term.nonce) || (held !== undefined && held.rev === rev && req.expect.includes(held.nonce))),
      'released',
      null,
      options,
    );
    return r.ended;
  }

  async revoke(name: string, reason: string, options?: CallOptions): Promise<RevokeResult> {
    const r = await this.endTerm(name, () => true, 'revoked', reason, options);
    return { revoked: r.ended, previousHolder: r.ended ? r.previousHolder : null, token: r.token };
  }

  /**
   * Many releases in two transactions per chunk (./release.ts); a lease that changed between
   * the read and the write (renewed by its session, say) is released on its own, as
   * {@link release} would.
   */
  async releaseMany(requests: readonly ReleaseRequest[], options?: CallOptions): Promise<boolean[]> {
    const deadline = this.begin(options);
    await this.loadFloor(deadline);
    return releaseBatch(
      {
        keys: this.keys,
        wallNow: () => this.client.clock.wallNow(),
        maxOpsPerTxn: this.maxOpsPerTxn,
        lanes: this.releaseLanes,
        txn: (req, what, chunkDeadline) => this.txn(req, chunkDeadline, what),
        chunkDeadline: () => this.client.clock.wallNow() + this.callTimeoutMs,
        signal: options?.signal,
        sessions: this.sessions,
        seen: this.seen,
        releaseOne: (req) => this.release(req, options),
      },
      requests,
    );
  }

  private async endTerm(
    name: string,
    mayEnd: (term: { holder: string; nonce: string }, createRevision: string) => boolean,
    how: 'released' | 'revoked',
    detail: string | null,
    options: CallOptions | undefined,
  ): Promise<{ ended: boolean; previousHolder: string | null; token: bigint | null }> {
    const deadline = this.begin(options);
    await this.loadFloor(deadline);
    const k = this.keys;
    const T = k.term(name);
    const S = k.state(name);
    // Recognises our own write if a failover retry finds it already applied.
    const endedId = newNonce();
    for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
      const read = await this.txn(guarded(k, [rangeOf(T), rangeOf(S)]), deadline, how === 'released' ? 'release' : 'revoke');
      schemaOk(k, read);
      const termKv = first(read.responses[0]);
      const stateKv = first(read.responses[1]);
      const term = parseTerm(termKv);
      const state = parseState(stateKv);
      if (termKv === undefined || term === null || !mayEnd(term, String(termKv.create_revision))) {
        const done = state?.endedId === endedId;
        return {
          ended: done,
          previousHolder: done ? (state?.holder ?? null) : null,
          token: stateKv !== undefined && state !== null ? stateToken(stateKv, state, k) : termKv === undefined ? null : k.token(termKv.create_revision!),
        };
      }
      const { token, startedAtMs, ops, compare } = endWrite(k, this.client.clock.wallNow(), name, termKv, stateKv, term, state, how, detail, endedId);
      const write = await this.txn(
        guarded(k, ops, compare),
        deadline,
        how === 'released' ? 'release' : 'revoke',
      );
      if (schemaOk(k, write)) {
        this.sessions.forget(name);
        this.seen.set(name, { rev: write.header?.revision ?? '0', holder: term.holder, ended: true, ...(how === 'released' ? { releasedStartedAtMs: startedAtMs } : {}) });
        return { ended: true, previousHolder: term.holder, token };
      }
      // Someone renewed, ended or took the term between our read and write: look again.
    }
    throw new StoreUnavailableError(`etcd: lease "${name}" kept changing while being ${how}; try again`);
  }

  async list(options?: CallOptions & { name?: string }): Promise<LeaseInfo[]> {
    const deadline = this.begin(options);
    await this.loadFloor(deadline);
    const k = this.keys;
    const one = options?.name;
    const ops =
      one === undefined
        ? [rangePrefix(k.statePrefix), rangePrefix(k.termPrefix), rangePrefix(k.renewPrefix), rangePrefix(k.sessionPrefix)]
        : [rangeOf(k.state(one)), rangeOf(k.term(one)), rangeOf(k.renew(one)), rangePrefix(k.sessionPrefix)];
    const r = await this.txn(guarded(k, ops), deadline, 'list');
    schemaOk(k, r);
    const byName = <T>(kvs: ReturnType<typeof all>, prefix: string, f: (kv: ReturnType<typeof all>[number]) => T): Map<string, T> => {
      const m = new Map<string, T>();
      for (const kv of kvs) {
        const n = k.nameIn(kv.key, prefix);
        if (n !== null) m.set(n, f(kv));
      }
      return m;
    };
    const states = byName(all(r.responses[0]), k.statePrefix, (kv) => ({ kv, v: parseState(kv) }));
    const terms = byName(all(r.responses[1]), k.termPrefix, (kv) => ({ kv, v: parseTerm(kv) }));
    const renews = byName(all(r.responses[2]), k.renewPrefix, (kv) => parseRenew(kv));
    // A session's tick renews every term on its lease without writing the term's renew key.
    const sessionAt = byName(all(r.responses[3]), k.sessionPrefix, (kv) => parseSession(kv)?.at ?? null);
    const leases = [...new Set([...terms.values()].map((t) => t.kv.lease))];
    const ttl = await leaseRemaining(this.client, leases, deadline);
    const storeNowMs = this.client.clock.wallNow();
    const out: LeaseInfo[] = [];
    for (const [name, s] of states) {
      if (s.v === null) continue;
      const t = terms.get(name);
      const renew = renews.get(name) ?? null;
      const ticked = t === undefined ? null : (sessionAt.get(t.kv.lease) ?? null);
      const renewedAtMs = ticked !== null && renew !== null ? Math.max(ticked, renew.renewedAtMs) : (ticked ?? renew?.renewedAtMs ?? null);
      const base = { name, termStartedAtMs: s.v.startedAtMs, renewedAtMs };
      if (t !== undefined) {
        const remaining = ttl.get(t.kv.lease);
        const recorded = renew !== null && renew.nonce === t.v?.nonce ? renew.expiresAtMs : null;
        const expiresAtMs = remaining === undefined ? recorded : estimateExpiry(remaining, recorded);
        out.push({ ...base, holder: t.v?.holder ?? null, token: k.token(t.kv.create_revision!), state: 'held', expiresAtMs, storeNowMs });
      } else if (s.v.endedBy !== undefined) {
        out.push({ ...base, holder: null, token: stateToken(s.kv, s.v, k), state: 'free', expiresAtMs: s.v.endedAtMs ?? null, storeNowMs });
      } else {
        // etcd deleted the term key when its lease ran out; nobody has claimed the name since.
        out.push({ ...base, holder: s.v.holder, token: stateToken(s.kv, s.v, k), state: 'expired', expiresAtMs: renew?.expiresAtMs ?? null, storeNowMs });
      }
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async history(options?: CallOptions & { name?: string; limit?: number }): Promise<HistoryEntry[]> {
    // Checked before any round trip; 0 must not reach etcd, whose range limit 0 means "all".
    const limit = historyLimit(options?.limit);
    if (limit === 0) return [];
    const deadline = this.begin(options);
    await this.loadFloor(deadline);
    const r = await this.txn(
      guarded(this.keys, [rangePrefix(this.keys.historyOf(options?.name), { sort_order: 'Descend', sort_target: 'Create', limit })]),
      deadline,
      'history',
    );
    schemaOk(this.keys, r);
    const entries: HistoryEntry[] = [];
    for (const kv of all(r.responses[0])) {
      let v: HistoryValue;
      try {
        v = JSON.parse(kv.value.toString()) as HistoryValue;
      } catch {
        continue;
      }
      const rev = BigInt(kv.create_revision);
      entries.push({
        id: rev * HISTORY_ID_STRIDE + BigInt(v.seq ?? 0),
        name: v.name,
        event: v.event,
        holder: v.holder ?? null,
        previousHolder: v.previousHolder ?? null,
        token: v.token === undefined ? this.keys.token(rev) : BigInt(v.token),
        atMs: v.atMs,
        detail: v.detail ?? null,
      });
    }
    return entries.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /**
   * etcd has no clock: this is the local time once etcd has answered a read, so it also tells
   * you that etcd is reachable.
   */
  async now(options?: CallOptions): Promise<number> {
    const deadline = this.begin(options);
    try {
      await this.client.kv.range({ key: this.keys.version, count_only: true }, { deadline });
    } catch (err) {
      throw mapEtcdError(err, 'now');
    }
    return this.client.clock.wallNow();
  }

  /**
   * One etcd watch per store instance on the term-key prefix: a delete (release, revoke, a
   * clone conflict, or etcd expiring the lease) means the name may be free. Resolves once the watch is
   * established, or after the call timeout if etcd is unreachable (the watch keeps trying, and
   * `onReconnect` fires when it gets through, since deletes may have been missed meanwhile).
   * `onDown` fires whenever the watch stops being established.
   *
   * While it is established, a contender this store last saw the lease busy for claims with one
   * read-only Txn (claim.ts, "quiet"): the delete that frees the name reaches it here first.
   */
  async watchFreed(listener: FreedListener, onReconnect?: () => void, onDown?: () => void): Promise<() => Promise<void>> {
    this.begin();
    if (this.watching !== undefined) throw new ConfigError('watchFreed is already active on this store; stop the first listener (or open a second store) before starting another');
    const freed = (name: string): void => {
      const s = this.seen.get(name);
      if (s?.termHeld === true) this.seen.set(name, { ...s, termHeld: false });
      listener(name);
    };
    const dropped = (): void => {
      // Deletes may be missed from now on: no claim may take the quiet path on what we saw.
      for (const [name, s] of this.seen) if (s.termHeld === true) this.seen.set(name, { ...s, termHeld: false });
      // etcd may be coming back from a backup: the next grant checks for a restore first.
      this.restore.recheck();
      onDown?.();
    };
    const handle = await watchTermDeletes(this.client, this.keys, freed, onReconnect, this.callTimeoutMs, dropped);
    const stop = async (): Promise<void> => {
      if (this.watching?.stop === stop) this.watching = undefined;
      await handle.stop();
    };
    this.watching = { stop, up: () => handle.up() };
    return stop;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.watching?.stop();
    this.seen.clear();
    this.grants.clear();
    // Session leases are left to run out, like every term this store did not release.
    this.sessions.clear();
    if (this.ownsClient) this.client.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
