import { ClosedError, ConfigError, SchemaError } from '../../core/errors.js';
import { leaseState } from '../../core/claim-rule.js';
import { checkClaimBatch, historyLimit } from '../checks.js';
import { validateMinToken } from '../min-token.js';
import type {
  CallOptions,
  ClaimRequest,
  ClaimResult,
  FreedListener,
  HistoryEntry,
  LeaseInfo,
  LeaseStore,
  LostReason,
  ReleaseRequest,
  RevokeResult,
  SchemaStatus,
  StoreSettingCheck,
  MigrateOptions,
  MigrateResult,
} from '../store.js';
import { DEFAULT_PREFIX, createOwnedDriver, parseRedisUrl, validatePrefix } from './connect.js';
import { driverFor, type RedisClientLike, type RedisDriver, type SubscriberHandle } from './driver.js';
import { keysFor, type RedisKeys } from './keys.js';
import { evictionCheck } from './eviction.js';
import { ScriptRunner } from './runner.js';
import {
  CLAIM,
  NEXT_TOKEN,
  RAISE_FLOOR,
  LAYOUT_STATUS,
  LAYOUT_VERSION,
  LIST_NAMES,
  MIGRATE,
  NOW,
  READ_HISTORY,
  READ_LEASES,
  RELEASE,
  RELEASE_MANY,
  REVOKE,
  toStrings,
} from './scripts.js';

export interface RedisStoreOptions {
  /**
   * `redis://[user:password@]host:6379/0?prefix=leasehold` or `rediss://...`; behind Sentinel,
   * `redis+sentinel://[user:password@]s1:26379,s2:26379/mymaster[/0]` (ioredis only); or pass `client`.
   */
  url?: string;
  /**
   * Your own ioredis or node-redis client; leasehold will not close it. Every call is bounded by
   * `commandTimeoutMs` even if the client queues commands while disconnected; for pub/sub the
   * store opens one `duplicate()` of it.
   */
  client?: RedisClientLike;
  /** Namespace for every key and the pub/sub channel. Default `leasehold` (or `?prefix=`). */
  prefix?: string;
  /** Give up on a call after this long (StoreUnavailableError, outcome unknown). Default 5000. */
  commandTimeoutMs?: number;
  /** For clients leasehold creates: give up on a connection attempt after this long. Default 5000. */
  connectTimeoutMs?: number;
  /** For a `url`: which client package to load. Default `ioredis` if installed, else `redis`. */
  clientPackage?: 'ioredis' | 'redis';
  /**
   * How long Redis keeps a lease's record and history after its last term ended (Redis then
   * deletes them with PEXPIREAT). Tokens stay increasing after that (see ./README.md, "Fencing tokens"). Default 7 days.
   */
  retainMs?: number;
  /** Approximate cap of the global history stream (XADD MAXLEN ~). Default 10000. */
  historyMaxLen?: number;
  /** Approximate cap of each lease's own history stream. Default 100. */
  leaseHistoryMaxLen?: number;
  /**
   * The longest one claim script should hold Redis's single thread, in milliseconds: a batch
   * (the renewals of one tick) is sent as as many scripts, one after another, as keep each
   * under it, sized by the time the previous scripts took by Redis's clock. Other clients'
   * commands run between them. Default 10.
   */
  maxScriptMs?: number;
}

/** A claim script's cost per lease (µs) before any was measured: high, so the first scripts are small. */
const INITIAL_US_PER_LEASE = 50;
const LEARN_FROM = 32;
/** How many renewal batches' costs the store remembers (see RedisStore.renewalUs). */
const RENEWAL_WINDOW = 16;
/**
 * The script measures itself from its first line to its last; Redis also spends time on the
 * command around it (reading the arguments in, writing the reply out: SLOWLOG reads 1.15-1.3x
 * the script's own figure here), and the next slice's leases may cost more than the last one's.
 * Aim the script at this share of the bound so that the command as a whole stays under it.
 */
const SCRIPT_SHARE = 0.5;

const DAY_MS = 86_400_000;

/**
 * A {@link LeaseStore} on one Redis (or one primary with replicas). One hash per lease, one Lua
 * script per operation, expiry judged by Redis' own clock.
 *
 * Fencing tokens are max(previous token + 1, Redis TIME in microseconds), so a Redis that
 * restarted empty, or a replica promoted before it received the last writes, still issues
 * tokens larger than any issued before. Residual assumption: across such a loss of data, the
 * clock of the Redis that issues the next token must not be behind the clock of the one that
 * issued the last token by more than the time that passed between the two (in practice: the
 * server clock must not step back by more than the restart or failover took, and a replica's
 * clock must not lag its primary's by more than the failover takes). Tokens are around 1.8e15
 * (microseconds since 1970) and stay below 2^53 until the year 2255.
 */
export class RedisStore implements LeaseStore, AsyncDisposable {
  readonly kind = 'redis';
  readonly honoursReleasedSince = true as const; // port.ts: refused in the claim script (scripts.ts)
  readonly description: string;
  readonly prefix: string;
  /** Runs leasehold's scripts on this store's connection (also used by `fence/redis`). */
  readonly scripts: ScriptRunner;
  private readonly driver: RedisDriver;
  private readonly keys: RedisKeys;
  private readonly retainMs: number;
  private readonly historyMaxLen: number;
  private readonly leaseHistoryMaxLen: number;
  private closed = false;
  private watch: FreedWatch | undefined;
  private readonly maxScriptUs: number;
  /**
   * What one lease costs a claim script, in µs of Redis's time: the latest measurement when it
   * is higher (a batch of acquisitions writes history and costs more than renewals), else a
   * slow decay towards it, so one cheap batch never sizes the next batch of costlier ones.
   */
  private usPerLease = INITIAL_US_PER_LEASE;
  /**
   * The same for batches of renewals only, the lowest of the last few: a renewal costs Redis the
   * same every tick (one HMGET, one HSET), so a higher figure is time the server was not running
   * at all (descheduled on a loaded host), which no smaller script avoids. Sized by the highest
   * instead, one preempted script shrank every later slice tenfold and a 1,000-lease tick became
   * forty round trips.
   */
  private readonly renewalUs: number[] = [];

  private constructor(driver: RedisDriver, prefix: string, where: string, description: string, options: RedisStoreOptions) {
    this.driver = driver;
    this.prefix = validatePrefix(prefix);
    this.keys = keysFor(this.prefix);
    this.description = description;
    this.retainMs = positiveInt(options.retainMs ?? 7 * DAY_MS, 'retainMs', true);
    this.historyMaxLen = positiveInt(options.historyMaxLen ?? 10_000, 'historyMaxLen');
    this.leaseHistoryMaxLen = positiveInt(options.leaseHistoryMaxLen ?? 100, 'leaseHistoryMaxLen');
    this.maxScriptUs = positiveInt(options.maxScriptMs ?? 10, 'maxScriptMs') * 1000;
    this.scripts = new ScriptRunner(
      driver,
      { where, prefix: this.prefix, lastConnectionError: () => driver.lastConnectionError?.() },
      positiveInt(options.commandTimeoutMs ?? 5000, 'commandTimeoutMs'),
    );
  }

  /** @throws {ConfigError} for a malformed URL or options, or when no Redis client package is installed. */
  static async create(options: RedisStoreOptions): Promise<RedisStore> {
    if (options.client !== undefined) {
      if (options.url !== undefined) throw new ConfigError('give the Redis store a url or a client, not both');
      const driver = driverFor(options.client, false);
      const prefix = validatePrefix(options.prefix ?? DEFAULT_PREFIX);
      return new RedisStore(driver, prefix, `your ${driver.label} client`, `redis (prefix ${prefix}, your ${driver.label} client)`, options);
    }
    if (options.url === undefined) throw new ConfigError('the Redis store needs a url (redis://host:6379/0) or a client');
    const parsed = parseRedisUrl(options.url);
    const prefix = validatePrefix(options.prefix ?? parsed.prefix ?? DEFAULT_PREFIX);
    // Validate every option before a connection exists, so a bad option leaks no socket.
    const commandTimeoutMs = positiveInt(options.commandTimeoutMs ?? 5000, 'commandTimeoutMs');
    const connectTimeoutMs = positiveInt(options.connectTimeoutMs ?? 5000, 'connectTimeoutMs');
    positiveInt(options.retainMs ?? 0, 'retainMs', true);
    positiveInt(options.historyMaxLen ?? 1, 'historyMaxLen');
    positiveInt(options.leaseHistoryMaxLen ?? 1, 'leaseHistoryMaxLen');
    positiveInt(options.maxScriptMs ?? 1, 'maxScriptMs');
    if (options.clientPackage !== undefined && options.clientPackage !== 'ioredis' && options.clientPackage !== 'redis') {
      throw new ConfigError(`clientPackage must be "ioredis" or "redis", got ${JSON.stringify(options.clientPackage)}`);
    }
    const driver = await createOwnedDriver(parsed.url, { commandTimeoutMs, connectTimeoutMs, clientPackage: options.clientPackage });
    return new RedisStore(driver, prefix, parsed.redacted, `redis ${parsed.redacted} (prefix ${prefix}, ${driver.label})`, options);
  }

  private async run(script: Parameters<ScriptRunner['run']>[0], keys: string[], args: string[], options?: CallOptions): Promise<string[]> {
    if (this.closed) throw new ClosedError('this RedisStore is closed; open a new store');
    const reply = await this.scripts.run(script, keys, args, options?.signal);
    return toStrings(reply);
  }

  /**
   * Redis has no schema: keys are created by the first claim. This records the key layout
   * version (`{prefix}:layout`) so a future leasehold that changes the layout can tell, and
   * fails if the keys were written by a newer leasehold than this one.
   *
   * @throws {SchemaError} when the layout is newer than this build understands.
   */
  async migrate(options?: MigrateOptions): Promise<MigrateResult> {
    // Lua numbers are doubles: the floor and the token above it must stay below 2^53.
    const minToken = options?.minToken === undefined ? undefined : validateMinToken(options.minToken, 2n ** 53n - 2n, 'Redis');
    const [v] = await this.run(MIGRATE, [this.keys.layout], [String(LAYOUT_VERSION)], options);
    const current = Number(v);
    if (current > LAYOUT_VERSION) {
      throw new SchemaError(
        `keys under prefix "${this.prefix}" use layout ${current}, newer than this leasehold (${LAYOUT_VERSION}); upgrade leasehold`,
      );
    }
    if (minToken === undefined) return { current, expected: LAYOUT_VERSION };
    // Live terms keep their tokens here: they are time-based, so a term below the floor is one
    // acquired before it, which the resource's fence already refuses once a newer term wrote.
    const [floor, raised] = await this.run(RAISE_FLOOR, [this.keys.floor, this.keys.floorAt], [minToken.toString()], options);
    return { current, expected: LAYOUT_VERSION, tokenFloor: { floor: BigInt(floor!), raised: raised === '1', endedTerms: 0 } };
  }

  /** `leasehold doctor`'s `eviction` check, also logged by the client (eviction.ts): only noeviction keeps every lease record. */
  async checkSettings(options?: CallOptions): Promise<StoreSettingCheck[]> {
    return [await evictionCheck(this.scripts, this.keys.layout, options?.signal)];
  }

  async nextToken(options?: CallOptions & { name?: string }): Promise<bigint> {
    const keys = options?.name === undefined ? [this.keys.floor, this.keys.floorAt] : [this.keys.floor, this.keys.floorAt, this.keys.lease(options.name)];
    const [tok] = await this.run(NEXT_TOKEN, keys, [], options);
    return BigInt(tok!);
  }

  /** A missing layout key reads as current: there is nothing to migrate before the first claim. */
  async schemaStatus(options?: CallOptions): Promise<SchemaStatus> {
    const [v] = await this.run(LAYOUT_STATUS, [this.keys.layout], [], options);
    return { current: v === undefined || v === '' ? LAYOUT_VERSION : Number(v), expected: LAYOUT_VERSION };
  }

  /**
   * One script per slice of the batch, sized to stay under maxScriptMs by the last measured cost
   * per lease, sent one after another so that Redis serves other clients between them. Each
   * slice is atomic on its own; leases never depend on each other. A failure part-way fails the
   * call (the outcome of every lease unknown, as for one lost reply): the engine's next claim
   * expects either nonce, so a slice that did land is recognised.
   */
  async claim(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> {
    checkClaimBatch(requests);
    if (requests.length === 0) return [];
    const renewals = requests.every((r) => r.expect !== null);
    const size = (): number => this.sliceSize(renewals);
    if (requests.length <= size()) return this.claimScript(requests, options);
    const results: ClaimResult[] = [];
    for (let at = 0; at < requests.length; ) {
      // Sliced batches take turns (the scheduler sends a tick's batches at once): two slices
      // sent together on one connection would run back to back, twice the bound.
      const slice = await this.oneSliceAtATime(async () => {
        const part = requests.slice(at, at + size());
        results.push(...(await this.claimScript(part, options)));
        return part.length;
      });
      at += slice;
    }
    return results;
  }

  /**
   * Leases per script: what fits SCRIPT_SHARE of the bound at the measured cost per lease, of
   * renewals (once measured) for a batch of renewals, else of any claim.
   */
  private sliceSize(renewals: boolean): number {
    const us = renewals && this.renewalUs.length > 0 ? Math.min(...this.renewalUs) : this.usPerLease;
    return Math.max(1, Math.floor((this.maxScriptUs * SCRIPT_SHARE) / us));
  }

  private sliceTurn: Promise<unknown> = Promise.resolve();

  private oneSliceAtATime<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.sliceTurn.then(() => fn());
    this.sliceTurn = run.catch(() => undefined);
    return run;
  }

  private async claimScript(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> {
    const keys = [this.keys.history, this.keys.names, this.keys.layout];
    const args = [
      String(this.retainMs),
      String(this.historyMaxLen),
      String(this.leaseHistoryMaxLen),
      String(LAYOUT_VERSION),
      this.keys.channel,
    ];
    // checkClaimBatch keeps '' (the scripts' "none") out of holders and nonces, and commas out
    // of nonces: the expected ones travel comma-joined.
    for (const r of requests) {
      const ttlMs = Math.ceil(r.ttlMs);
      keys.push(this.keys.lease(r.name), this.keys.leaseHistory(r.name));
      const since = r.expect === null && r.unlessReleasedSince !== undefined ? String(Math.floor(r.unlessReleasedSince)) : '';
      args.push(r.name, r.holder, r.expect === null ? '' : r.expect.join(','), r.nextNonce, String(ttlMs), r.expect === null ? '1' : '0', since);
    }
    keys.push(this.keys.floor, this.keys.floorAt);
    const out = await this.run(CLAIM, keys, args, options);
    const storeNowMs = Number(out[0]);
    const ranUs = Number(out[1 + requests.length * 6]);
    // A few leases say little per lease (the script's fixed work dominates): learn from batches.
    const renewals = requests.every((r) => r.expect !== null);
    // A full slice teaches too: learning only from LEARN_FROM leases up, an estimate once above
    // (maxScriptUs * SCRIPT_SHARE) / LEARN_FROM made every later slice too small to correct it.
    if (Number.isFinite(ranUs) && ranUs >= 0 && requests.length >= Math.min(LEARN_FROM, this.sliceSize(renewals))) {
      const measured = Math.max(1, ranUs) / requests.length;
      if (renewals) {
        this.renewalUs.push(measured);
        if (this.renewalUs.length > RENEWAL_WINDOW) this.renewalUs.shift();
      } else {
        this.usPerLease = measured >= this.usPerLease ? measured : this.usPerLease * 0.8 + measured * 0.2;
      }
    }
    const results: ClaimResult[] = [];
    for (let i = 0; i < requests.length; i++) {
      const name = requests[i]!.name;
      const [outcome, reason, token, holder, exp, start] = out.slice(1 + i * 6, 7 + i * 6);
      if (outcome === 'acquired' || outcome === 'renewed') {
        results.push({ name, outcome, token: BigInt(token!), holder: holder!, expiresAtMs: Number(exp), storeNowMs });
      } else if (outcome === 'lost') {
        results.push({
          name,
          outcome,
          reason: reason as LostReason,
          holder: orNull(holder),
          token: bigOrNull(token),
          expiresAtMs: numOrNull(exp),
          storeNowMs,
        });
      } else if (outcome === 'busy' && reason === 'released-since') {
        results.push({ name, outcome, holder: null, token: bigOrNull(token), expiresAtMs: null, storeNowMs, releasedSince: true });
      } else if (outcome === 'busy') {
        const grantedAtMs = numOrNull(start);
        results.push({ name, outcome, holder: orNull(holder), token: bigOrNull(token), expiresAtMs: numOrNull(exp), storeNowMs, ...(grantedAtMs === null ? {} : { grantedAtMs }) });
      } else {
        throw new SchemaError(`the claim script answered ${JSON.stringify(outcome)} for lease "${name}"; reinstall leasehold`);
      }
    }
    return results;
  }

  async release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    if (req.expect.length === 0) return false;
    const [ok] = await this.run(
      RELEASE,
      [this.keys.lease(req.name), this.keys.history, this.keys.leaseHistory(req.name)],
      [
        req.name,
        req.holder,
        String(this.retainMs),
        String(this.historyMaxLen),
        String(this.leaseHistoryMaxLen),
        this.keys.channel,
        ...req.expect,
      ],
      options,
    );
    return ok === '1';
  }

  /**
   * Many releases in one script per slice (each row as {@link release} answers it), sliced as
   * claims are so that no script holds Redis past its bound: a release writes history as an
   * acquisition does, so a slice is sized by the cost of claims in general.
   */
  async releaseMany(requests: readonly ReleaseRequest[], options?: CallOptions): Promise<boolean[]> {
    const answers: boolean[] = [];
    for (let at = 0; at < requests.length; ) {
      const part = requests.slice(at, at + this.sliceSize(false));
      at += part.length;
      const keys = [this.keys.history];
      const args = [String(this.retainMs), String(this.historyMaxLen), String(this.leaseHistoryMaxLen), this.keys.channel];
      for (const r of part) {
        keys.push(this.keys.lease(r.name), this.keys.leaseHistory(r.name));
        // A nonce with a comma could not travel comma-joined; claims never issue one (checkClaimBatch).
        args.push(r.name, r.holder, r.expect.some((x) => x.includes(',')) ? '' : r.expect.join(','));
      }
      const out = await this.run(RELEASE_MANY, keys, args, options);
      if (out.length !== part.length) throw new SchemaError(`the release script answered ${out.length} rows for ${part.length} releases; reinstall leasehold`);
      for (const x of out) answers.push(x === '1');
    }
    return answers;
  }

  async revoke(name: string, reason: string, options?: CallOptions): Promise<RevokeResult> {
    const [revoked, previous, token] = await this.run(
      REVOKE,
      [this.keys.lease(name), this.keys.history, this.keys.leaseHistory(name)],
      [name, reason, String(this.retainMs), String(this.historyMaxLen), String(this.leaseHistoryMaxLen), this.keys.channel],
      options,
    );
    return { revoked: revoked === '1', previousHolder: orNull(previous), token: bigOrNull(token) };
  }

  async list(options?: CallOptions & { name?: string }): Promise<LeaseInfo[]> {
    const names = options?.name !== undefined ? [options.name] : await this.run(LIST_NAMES, [this.keys.names], [], options);
    if (names.length === 0) return [];
    const out = await this.run(READ_LEASES, [this.keys.names, ...names.map((n) => this.keys.lease(n))], names, options);
    const storeNowMs = Number(out[0]);
    const infos: LeaseInfo[] = [];
    names.forEach((name, i) => {
      const [found, holder, token, exp, start, renewed] = out.slice(1 + i * 6, 7 + i * 6);
      if (found !== '1') return;
      const h = orNull(holder);
      const expiresAtMs = numOrNull(exp);
      infos.push({
        name,
        holder: h,
        token: BigInt(token!),
        state: leaseState(h, expiresAtMs, storeNowMs),
        expiresAtMs,
        storeNowMs,
        termStartedAtMs: numOrNull(start),
        renewedAtMs: numOrNull(renewed),
      });
    });
    return infos.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async history(options?: CallOptions & { name?: string; limit?: number }): Promise<HistoryEntry[]> {
    const limit = historyLimit(options?.limit);
    if (limit === 0) return [];
    const stream = options?.name !== undefined ? this.keys.leaseHistory(options.name) : this.keys.history;
    const out = await this.run(READ_HISTORY, [stream], [String(limit)], options);
    const entries: HistoryEntry[] = [];
    for (let i = 0; i + 8 <= out.length; i += 8) {
      const [id, name, event, holder, prev, token, at, detail] = out.slice(i, i + 8);
      entries.push({
        id: streamIdToBigint(id!),
        name: name!,
        event: event as HistoryEntry['event'],
        holder: orNull(holder),
        previousHolder: orNull(prev),
        token: BigInt(token!),
        atMs: Number(at),
        detail: orNull(detail),
      });
    }
    return entries.reverse();
  }

  async now(options?: CallOptions): Promise<number> {
    const [s, us] = await this.run(NOW, [], [], options);
    return Number(s) * 1000 + Number(us) / 1000;
  }

  /**
   * One subscriber connection per store instance, shared by every listener. Releases,
   * revocations and clone conflicts PUBLISH the lease name; expiry publishes nothing (waiters sleep until the
   * expiry they were told). `onReconnect` fires whenever the subscription comes back after
   * being down (including when Redis was down at the first attempt), since messages published
   * meanwhile are gone: Redis pub/sub is fire-and-forget.
   */
  async watchFreed(listener: FreedListener, onReconnect?: () => void): Promise<() => Promise<void>> {
    if (this.closed) throw new ClosedError('this RedisStore is closed; open a new store');
    this.watch ??= new FreedWatch(this.driver, this.keys.channel);
    const watch = this.watch;
    const entry = { listener, onReconnect };
    await watch.add(entry);
    let stopped = false;
    return async () => {
      if (stopped) return;
      stopped = true;
      if (watch.remove(entry)) {
        if (this.watch === watch) this.watch = undefined;
        await watch.close();
      }
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const watch = this.watch;
    this.watch = undefined;
    await watch?.close();
    await this.driver.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Shorthand for {@link RedisStore.create}. */
export function createRedisStore(options: RedisStoreOptions): Promise<RedisStore> {
  return RedisStore.create(options);
}

interface WatchEntry {
  listener: FreedListener;
  onReconnect: (() => void) | undefined;
}

/**
 * The subscriber connection behind `watchFreed`. The driver reconnects by itself; if it gives
 * up (a caller's client with a finite retry strategy), a new connection is opened with backoff.
 */
class FreedWatch {
  private readonly entries = new Set<WatchEntry>();
  private handle: SubscriberHandle | undefined;
  private starting: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private attempt = 0;
  private closed = false;
  /** Until the first start() returns, a subscription is the first one, not a reconnect. */
  private initial = true;

  constructor(
    private readonly driver: RedisDriver,
    private readonly channel: string,
  ) {}

  async add(entry: WatchEntry): Promise<void> {
    this.entries.add(entry);
    this.starting ??= this.open();
    await this.starting;
  }

  /** True when it was the last entry (the caller then closes the watch). */
  remove(entry: WatchEntry): boolean {
    this.entries.delete(entry);
    return this.entries.size === 0;
  }

  private async open(): Promise<void> {
    if (this.closed) return;
    const handle = this.driver.openSubscriber(this.channel, `${this.channel}:subscriber`, {
      message: (name) => {
        for (const e of [...this.entries]) {
          try {
            e.listener(name);
          } catch {
            // A throwing listener must not starve the others, nor escape into the driver.
          }
        }
      },
      subscribed: () => {
        this.attempt = 0;
        if (this.initial) return;
        for (const e of [...this.entries]) {
          try {
            e.onReconnect?.();
          } catch {
            // as above
          }
        }
      },
      ended: () => {
        if (this.handle !== handle) return;
        this.handle = undefined;
        void handle.close();
        this.scheduleReopen();
      },
    });
    this.handle = handle;
    await handle.start();
    this.initial = false;
  }

  private scheduleReopen(): void {
    if (this.closed || this.timer !== undefined) return;
    this.attempt++;
    const delay = Math.min(30_000, 250 * 2 ** Math.min(this.attempt, 7)) * (0.5 + Math.random() / 2);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.open().catch(() => this.scheduleReopen());
    }, delay);
    this.timer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.starting?.catch(() => {});
    const handle = this.handle;
    this.handle = undefined;
    await handle?.close();
  }
}

function orNull(s: string | undefined): string | null {
  return s === undefined || s === '' ? null : s;
}

function bigOrNull(s: string | undefined): bigint | null {
  return s === undefined || s === '' ? null : BigInt(s);
}

function numOrNull(s: string | undefined): number | null {
  return s === undefined || s === '' ? null : Number(s);
}

/**
 * Stream ids are `<ms>-<seq>`, increasing; as one bigint: ms * 2^24 + seq (seq counts the entries
 * added within one millisecond, far below 2^24 even for a claim batch of 10,000 leases).
 */
function streamIdToBigint(id: string): bigint {
  const [ms, seq] = id.split('-');
  return (BigInt(ms ?? '0') << 24n) + BigInt(seq ?? '0');
}

function positiveInt(value: number, what: string, allowZero = false): number {
  if (!Number.isInteger(value) || value < (allowZero ? 0 : 1)) {
    throw new ConfigError(`${what} must be a ${allowZero ? 'non-negative' : 'positive'} whole number, got ${value}`);
  }
  return value;
}
