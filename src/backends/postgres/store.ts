import { ClosedError, ConfigError, SchemaError } from '../../core/errors.js';
import type {
  CallOptions,
  ClaimRequest,
  ClaimResult,
  FreedListener,
  HistoryEntry,
  LeaseInfo,
  LeaseStore,
  LeaseSession,
  MigrateOptions,
  MigrateResult,
  ReleaseRequest,
  RevokeResult,
  SchemaStatus,
} from '../store.js';
import { SCHEMA_VERSION, channelFor, migrations, validateSchemaName } from './schema.js';
import { MAX_SQL_FLOOR, validateMinToken } from '../min-token.js';
import { checkClaimBatch, historyLimit } from '../checks.js';
import { leaseState } from '../../core/claim-rule.js';
import { renewalStatement, renewCall, RENEW_FUNCTION_MIN } from './renew.js';
import { releaseStatement } from './release.js';
import { createPool, cutConnecting, loadPg } from './driver.js';
import { mapPgError } from './errors.js';
import { parseNotifyUrl, parsePostgresUrl } from './url.js';
import { connectFirst, type PgTarget } from './multi-host.js';
import { claimBatchStatement, claimOneStatement, toClaimResult } from './claim.js';
import { PgLeaseSession } from './session.js';
import { listenForFreed } from './listen.js';

/** The subset of a `pg` query result leasehold reads. `R` is the row type, as in pg's `QueryResult<R>`. */
export interface PgResultLike<R = Record<string, unknown>> {
  rows: R[];
  rowCount: number | null;
}

/**
 * Anything with `query(text, values)`: a `pg.Pool`, a `pg.Client`, or a pool from another
 * library. Generic like pg's own, so `tx.query<{ id: number }>('SELECT id ...')` types its rows.
 */
export interface PgQueryableLike {
  // `any` as in pg's own QueryResultRow: an interface type (no index signature) must fit `R`.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  query<R extends Record<string, any> = Record<string, unknown>>(text: string, values?: unknown[]): Promise<PgResultLike<R>>;
}

/** A client checked out of a pool (or a standalone client) that can LISTEN. */
export interface PgListenClientLike extends PgQueryableLike {
  on(event: 'notification', listener: (msg: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (err?: Error) => void): unknown;
  removeAllListeners?(event?: string): unknown;
  release?(err?: Error | boolean): void;
  end?(): Promise<void>;
}

/** The subset of `pg.Pool` leasehold needs. Pass your own to share connections with your app. */
export interface PgPoolLike extends PgQueryableLike {
  connect(): Promise<PgListenClientLike & { release(err?: Error | boolean): void }>;
  end?(): Promise<void>;
}

export interface PostgresStoreOptions {
  /**
   * `postgres://user@host:5432/db?schema=leasehold` (TLS: `sslmode=verify-full&sslrootcert=ca.pem`;
   * through PgBouncer: `notify_url=`, see below), or pass `pool`.
   */
  url?: string;
  /** Your own pool; leasehold will not end it on close(). */
  pool?: PgPoolLike;
  /** Schema holding leasehold's tables. Default `leasehold` (or `?schema=` in the URL). */
  schema?: string;
  /** For pools leasehold creates: give up on a query after this long. Default 10s. */
  queryTimeoutMs?: number;
  /** For pools leasehold creates: give up connecting after this long. Default 5s. */
  connectTimeoutMs?: number;
  /**
   * Where followers LISTEN for releases, when `url` or `pool` goes through a pooler that cannot
   * carry LISTEN (PgBouncer in transaction or statement mode): a direct postgres:// URL of the
   * same primary, or `'none'` to not listen (followers then take a freed lease when its last
   * term would have expired). Default: `?notify_url=` in the URL, else the store's own connection.
   */
  notifyUrl?: string;
}

/** What the store listens on: its own connection, another URL (one host or several), or nothing. */
type NotifyVia = { target: PgTarget } | 'own' | 'none';

export class PostgresStore implements LeaseStore {
  readonly kind = 'postgres';
  /**
   * A renewal batch is one statement (./renew.ts) that takes about 10 ms per 1,000 leases, so a
   * process holding 20,000 renews them in one round trip per tick.
   */
  readonly maxClaimBatch = 20_000;
  /** A release hands the term to the registered waiter in its one statement (sql/006-handover.ts). */
  readonly handover = true as const;
  readonly description: string;
  readonly schema: string;
  private readonly pool: PgPoolLike;
  private readonly ownsPool: boolean;
  private readonly notify: NotifyVia;
  private readonly s: string;
  private closed = false;
  /**
   * Set when a probe showed notifications do not arrive: later watchFreed calls say so at once
   * for a minute (the engine asks again every few seconds), then probe again, so one slow
   * probe on a direct connection does not cost prompt handover for the life of the process.
   */
  private notifyBroken: ConfigError | undefined;
  private notifyBrokenAt = 0;
  private listen: { stop: () => Promise<void> } | undefined;

  /** Where liveness sessions connect: the store URL's hosts (undefined for a pool of the caller's: its own connections). */
  private sessionTarget: PgTarget | undefined;

  private constructor(pool: PgPoolLike, ownsPool: boolean, schema: string, description: string, notify: NotifyVia) {
    this.pool = pool;
    this.ownsPool = ownsPool;
    this.schema = validateSchemaName(schema);
    this.s = `"${this.schema}"`;
    this.description = description;
    this.notify = notify;
  }

  /** @throws {ConfigError} for a malformed URL, or when `pg` is not installed. */
  static async create(options: PostgresStoreOptions): Promise<PostgresStore> {
    const notifyOption = options.notifyUrl === undefined ? undefined : parseNotifyUrl(options.notifyUrl);
    if (options.pool !== undefined) {
      const notify = notifyOption === undefined ? 'own' : notifyOption === 'none' ? 'none' : { target: notifyOption.target };
      return new PostgresStore(options.pool, false, options.schema ?? 'leasehold', `postgres (${options.schema ?? 'leasehold'}, your pool)`, notify);
    }
    if (options.url === undefined) throw new ConfigError('PostgresStore needs a url or a pool');
    const parsed = parsePostgresUrl(options.url);
    const listenAt = notifyOption ?? parsed.notifyTarget ?? { target: parsed.target };
    const pg = await loadPg();
    const schema = options.schema ?? parsed.schema ?? 'leasehold';
    const pool = createPool(pg, parsed.target, {
      max: 4,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
      query_timeout: options.queryTimeoutMs ?? 10_000,
      idleTimeoutMillis: 30_000,
      allowExitOnIdle: true,
    }, schema);
    const store = new PostgresStore(pool, true, schema, parsed.description, listenAt === 'none' ? 'none' : { target: listenAt.target });
    store.sessionTarget = parsed.target;
    return store;
  }

  private async q(text: string, values?: unknown[], options?: CallOptions): Promise<PgResultLike> {
    if (this.closed) throw new ClosedError('this PostgresStore is closed; open a new store');
    options?.signal?.throwIfAborted();
    try {
      return await this.pool.query(text, values);
    } catch (err) {
      throw mapPgError(err, this.schema);
    }
  }

  /** @internal the fleet registry (./fleet.ts) and the term fence's schema check (./term-fence.ts) run their statements on this store's pool, with its error mapping. */
  fleetQuery(text: string, values: unknown[], options?: CallOptions): Promise<PgResultLike> {
    return this.q(text, values, options);
  }

  async migrate(options?: MigrateOptions): Promise<MigrateResult> {
    options?.signal?.throwIfAborted();
    const minToken = options?.minToken === undefined ? undefined : validateMinToken(options.minToken, MAX_SQL_FLOOR, 'PostgreSQL');
    let client;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw mapPgError(err, this.schema);
    }
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`leasehold.migrate.${this.schema}`]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${this.s}`);
      await client.query(`CREATE TABLE IF NOT EXISTS ${this.s}.schema_version (version integer NOT NULL)`);
      const r = await client.query(`SELECT version FROM ${this.s}.schema_version`);
      let current = r.rows.length === 0 ? 0 : Number(r.rows[0]!['version']);
      if (current > SCHEMA_VERSION) {
        throw new SchemaError(
          `schema "${this.schema}" is at version ${current}, newer than this leasehold (${SCHEMA_VERSION}); upgrade leasehold`,
        );
      }
      const all = migrations(this.schema);
      for (; current < SCHEMA_VERSION; current++) await client.query(all[current]!);
      await client.query(`DELETE FROM ${this.s}.schema_version`);
      await client.query(`INSERT INTO ${this.s}.schema_version (version) VALUES ($1)`, [current]);
      const tokenFloor = minToken === undefined ? undefined : await this.raiseFloor(client, minToken);
      await client.query('COMMIT');
      return tokenFloor === undefined ? { current, expected: SCHEMA_VERSION } : { current, expected: SCHEMA_VERSION, tokenFloor };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw mapPgError(err, this.schema);
    } finally {
      client.release();
    }
  }

  /**
   * The floor is the token column's default: the claim function inserts a never-seen name with
   * the default and bumps it, so a new name's first token is floor + 1, with no change to the
   * claim statement. Existing rows below the floor are raised; a live term among them is ended
   * as revoked (its holder hears it through NOTIFY and stands down) rather than left to renew a
   * token that no longer exists. Runs inside migrate's transaction and advisory lock.
   */
  private async raiseFloor(client: PgQueryableLike, minToken: bigint): Promise<NonNullable<MigrateResult['tokenFloor']>> {
    const before = await this.floorOf(client);
    const floor = before > minToken ? before : minToken;
    if (floor > before) await client.query(`ALTER TABLE ${this.s}.leases ALTER COLUMN token SET DEFAULT ${floor.toString()}`);
    const ended = await client.query(
      `WITH old AS (SELECT name, holder, token FROM ${this.s}.leases WHERE token <= $1 AND holder IS NOT NULL FOR UPDATE),
       upd AS (
         UPDATE ${this.s}.leases l SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'revoked'
           FROM old WHERE l.name = old.name
         RETURNING l.name, l.token, old.holder AS previous_holder)
       INSERT INTO ${this.s}.history (name, event, holder, previous_holder, token, at, detail)
       SELECT name, 'revoked', NULL, previous_holder, token, now(), $2 FROM upd RETURNING name`,
      [floor.toString(), `leasehold migrate --min-token ${minToken}: the token floor is now ${floor}`],
    );
    await client.query(`UPDATE ${this.s}.leases SET token = $1 WHERE token < $1`, [floor.toString()]);
    // The fleet's generations are fencing tokens too (src/fleet): every later one above the floor.
    await client.query(`SELECT setval('${this.s}.fleet_generation', GREATEST(last_value, $1::bigint)) FROM ${this.s}.fleet_generation`, [floor.toString()]);
    return { floor, raised: floor > before, endedTerms: ended.rows.length };
  }

  private async floorOf(db: PgQueryableLike): Promise<bigint> {
    const r = await db.query(
      `SELECT pg_get_expr(d.adbin, d.adrelid) AS def FROM pg_attrdef d
         JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = to_regclass($1) AND a.attname = 'token'`,
      [`${this.s}.leases`],
    );
    // The default reads back as '0', '5000' or '''5000''::bigint' depending on how it was set.
    const m = /\d+/.exec(String(r.rows[0]?.['def'] ?? '0'));
    return m === null ? 0n : BigInt(m[0]);
  }

  async nextToken(options?: CallOptions & { name?: string }): Promise<bigint> {
    options?.signal?.throwIfAborted();
    let floor: bigint;
    try {
      floor = await this.floorOf(this.pool);
    } catch (err) {
      throw mapPgError(err, this.schema);
    }
    // After a promotion the claim function's timeline floor is above both (sql/005-timeline-tokens.ts).
    const tl = await this.q(`SELECT ${this.s}.timeline_token_floor() AS f`, [], options).catch(() => undefined);
    const tlFloor = tl?.rows[0] === undefined ? 0n : BigInt(tl.rows[0]['f'] as string);
    if (tlFloor > floor) floor = tlFloor;
    if (options?.name === undefined) return floor + 1n;
    const r = await this.q(`SELECT token FROM ${this.s}.leases WHERE name = $1`, [options.name], options);
    const token = r.rows[0] === undefined ? floor : BigInt(r.rows[0]['token'] as string);
    return (token > floor ? token : floor) + 1n;
  }

  async fenceHighWater(options?: CallOptions & { limit?: number }): Promise<{ resource: string; token: bigint }[]> {
    const r = await this.q(`SELECT to_regclass($1) AS t`, [`${this.s}.fences`], options);
    if (r.rows[0]?.['t'] == null) return [];
    const rows = await this.q(`SELECT resource, token FROM ${this.s}.fences ORDER BY token DESC, resource LIMIT $1`, [options?.limit ?? 5], options);
    return rows.rows.map((row) => ({ resource: row['resource'] as string, token: BigInt(row['token'] as string) }));
  }

  async schemaStatus(options?: CallOptions): Promise<SchemaStatus> {
    // One round trip (every `leasehold run` starts with this): no schema or no table is version 0.
    try {
      const v = await this.q(`SELECT max(version) AS v FROM ${this.s}.schema_version`, [], options);
      return { current: Number(v.rows[0]?.['v'] ?? 0), expected: SCHEMA_VERSION };
    } catch (err) {
      const code = (err as { cause?: { code?: unknown } }).cause?.code;
      if (err instanceof SchemaError && (code === '42P01' || code === '3F000')) return { current: 0, expected: SCHEMA_VERSION };
      throw err;
    }
  }

  async claim(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> {
    checkClaimBatch(requests);
    if (requests.length === 0) return [];
    if (requests.every((q) => q.expect !== null && q.session === undefined)) {
      // The scheduler's steady state: renewals only, one call that never inserts (./renew.ts).
      const values = [
        requests.map((q) => q.name),
        requests.map((q) => q.holder),
        requests.map((q) => q.expect!.join(',')),
        requests.map((q) => q.nextNonce),
        requests.map((q) => q.ttlMs),
      ];
      const r = await this.renewRows(values, options);
      const found = new Map<string, ClaimResult>();
      let storeNowMs = 0;
      for (const row of r.rows) {
        storeNowMs = row['now_ms'] as number;
        if (row['name'] != null) found.set(row['name'] as string, toClaimResult(row));
      }
      return requests.map(
        (q) => found.get(q.name) ?? { name: q.name, outcome: 'lost', reason: 'expired', holder: null, token: null, expiresAtMs: null, storeNowMs },
      );
    }
    const one = this.claimOneFunction ? claimOneStatement(this.s, requests) : undefined;
    if (one !== undefined) {
      try {
        return (await this.q(one.text, one.values, options)).rows.map(toClaimResult);
      } catch (err) {
        // A schema before version 20 has no `claim_one`: the statement those versions' clients send.
        if ((err as { cause?: { code?: unknown } }).cause?.code !== '42883') throw err;
        this.claimOneFunction = false;
      }
    }
    const { text, values } = claimBatchStatement(this.s, requests);
    const r = await this.q(text, values, options);
    return r.rows.map(toClaimResult);
  }

  /** False once the schema turned out older than migration 20 (a process upgraded before `migrate`). */
  private claimOneFunction = true;

  async release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    const r = await this.q(releaseStatement(this.s), [req.name, req.holder, [...req.expect]], options);
    return r.rows[0]?.['released'] === true;
  }

  /** False once the schema turned out older than migration 12 (a process upgraded before `migrate`). */
  private renewFunction = true;

  private async renewRows(values: unknown[], options?: CallOptions): Promise<PgResultLike> {
    // Below RENEW_FUNCTION_MIN rows the statement costs the server less than the function call
    // (bench pg-server: 1 lease 0.58 vs 0.93 ms, even at 1,000); above, the function is cheaper
    // (10,000: 339 vs 451 ms, raw 218 ms). Both answer alike (test/stores/postgres-renew.test.ts).
    if (this.renewFunction && (values[0] as unknown[]).length >= RENEW_FUNCTION_MIN) {
      try {
        return await this.q(renewCall(this.s), values, options);
      } catch (err) {
        // A schema before version 12 has no `renew`: the statement those versions' clients send.
        if ((err as { cause?: { code?: unknown } }).cause?.code !== '42883') throw err;
        this.renewFunction = false;
      }
    }
    return this.q(renewalStatement(this.s), values, options);
  }

  /** False once the schema turned out older than migration 7 (a process upgraded before `migrate`). */
  private batchReleases = true;

  async releaseMany(requests: readonly ReleaseRequest[], options?: CallOptions): Promise<boolean[]> {
    if (this.batchReleases) {
      try {
        const r = await this.q(`SELECT ord, released FROM ${this.s}.release_many($1::text[], $2::text[], $3::text[])`, [
          requests.map((q) => q.name),
          requests.map((q) => q.holder),
          requests.map((q) => q.expect.join(',')),
        ], options);
        const out = requests.map(() => false);
        for (const row of r.rows) out[Number(row['ord']) - 1] = row['released'] === true;
        return out;
      } catch (err) {
        // A schema at version 6 has `release` and not `release_many`: release one by one, as that
        // version's clients do, rather than leave every lease to expire until `migrate` runs.
        if ((err as { cause?: { code?: unknown } }).cause?.code !== '42883') throw err;
        this.batchReleases = false;
      }
    }
    return Promise.all(requests.map((q) => this.release(q, options)));
  }

  async revoke(name: string, reason: string, options?: CallOptions): Promise<RevokeResult> {
    const r = await this.q(
      `WITH old AS (SELECT name, holder, token FROM ${this.s}.leases WHERE name = $1 FOR UPDATE),
       upd AS (
         UPDATE ${this.s}.leases l SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'revoked'
           FROM old WHERE l.name = old.name AND old.holder IS NOT NULL
         RETURNING l.name, l.token, old.holder AS previous_holder),
       h AS (
         INSERT INTO ${this.s}.history (name, event, holder, previous_holder, token, at, detail)
         SELECT name, 'revoked', NULL, previous_holder, token, now(), $2 FROM upd)
       SELECT old.token, upd.previous_holder, upd.name IS NOT NULL AS revoked FROM old LEFT JOIN upd ON true`,
      [name, reason],
      options,
    );
    const row = r.rows[0];
    if (row === undefined) return { revoked: false, previousHolder: null, token: null };
    return {
      revoked: row['revoked'] === true,
      previousHolder: (row['previous_holder'] as string | null) ?? null,
      token: BigInt(row['token'] as string),
    };
  }

  async list(options?: CallOptions & { name?: string }): Promise<LeaseInfo[]> {
    const r = await this.q(
      `SELECT name, holder, token, (extract(epoch FROM expires_at) * 1000)::float8 AS expires_at_ms,
              (extract(epoch FROM term_started_at) * 1000)::float8 AS started_ms,
              (extract(epoch FROM renewed_at) * 1000)::float8 AS renewed_ms,
              (extract(epoch FROM now()) * 1000)::float8 AS now_ms
         FROM ${this.s}.leases WHERE term_started_at IS NOT NULL AND ($1::text IS NULL OR name = $1) ORDER BY name`,
      [options?.name ?? null],
      options,
    );
    return r.rows.map((row) => {
      const holder = (row['holder'] as string | null) ?? null;
      const expiresAtMs = (row['expires_at_ms'] as number | null) ?? null;
      const storeNowMs = row['now_ms'] as number;
      return {
        name: row['name'] as string,
        holder,
        token: BigInt(row['token'] as string),
        state: leaseState(holder, expiresAtMs, storeNowMs),
        expiresAtMs,
        storeNowMs,
        termStartedAtMs: (row['started_ms'] as number | null) ?? null,
        renewedAtMs: (row['renewed_ms'] as number | null) ?? null,
      };
    });
  }

  async history(options?: CallOptions & { name?: string; limit?: number }): Promise<HistoryEntry[]> {
    const limit = historyLimit(options?.limit);
    if (limit === 0) return [];
    const r = await this.q(
      `SELECT * FROM (
         SELECT id, name, event, holder, previous_holder, token, (extract(epoch FROM at) * 1000)::float8 AS at_ms, detail
           FROM ${this.s}.history WHERE ($1::text IS NULL OR name = $1) ORDER BY id DESC LIMIT $2) h
       ORDER BY id`,
      [options?.name ?? null, limit],
      options,
    );
    return r.rows.map((row) => ({
      id: BigInt(row['id'] as string),
      name: row['name'] as string,
      event: row['event'] as HistoryEntry['event'],
      holder: (row['holder'] as string | null) ?? null,
      previousHolder: (row['previous_holder'] as string | null) ?? null,
      token: BigInt(row['token'] as string),
      atMs: row['at_ms'] as number,
      detail: (row['detail'] as string | null) ?? null,
    }));
  }

  async now(options?: CallOptions): Promise<number> {
    const r = await this.q(`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now_ms`, [], options);
    return r.rows[0]!['now_ms'] as number;
  }

  /**
   * One LISTEN connection per store instance, however many leases wait on it. When the
   * connection drops, it reconnects with backoff (./reconnect.ts) and calls `onReconnect` so waiters re-check:
   * a notification sent while we were away is gone.
   */
  async watchFreed(listener: FreedListener, onReconnect?: () => void): Promise<() => Promise<void>> {
    if (this.listen !== undefined) throw new ConfigError('watchFreed is already active on this store; stop the first listener (or open a second store) before starting another');
    if (this.closed) throw new ClosedError('this PostgresStore is closed; open a new store');
    if (this.notifyBroken !== undefined && performance.now() - this.notifyBrokenAt < NOTIFY_REPROBE_MS) throw this.notifyBroken;
    this.notifyBroken = undefined;
    // Told not to listen (notify_url=none): followers take a freed lease at its expiry.
    if (this.notify === 'none') return () => Promise.resolve();
    return listenForFreed(
      { channel: channelFor(this.schema), connect: () => this.listenClient(), probe: (c) => this.probeNotify(c), broken: () => this.notifyBroken },
      listener,
      onReconnect,
      {
        register: (stop) => (this.listen = { stop }),
        unregister: (stop) => {
          if (this.listen?.stop === stop) this.listen = undefined;
        },
      },
    );
  }

  /**
   * Whether a NOTIFY sent through the store's pool reaches this LISTEN connection. Through
   * PgBouncer in transaction or statement mode it does not: the LISTEN ran on a server
   * connection that went back to the pool, and PgBouncer drops what arrives there ("got packet
   * 'A' from server when not linked"). Followers would then wait for expiry with nobody told,
   * so the store says so (once) and stops listening. A probe on a channel of its own, so no
   * follower mistakes it for a release. False only when the NOTIFY went out and nothing came.
   */
  private async probeNotify(c: PgListenClientLike): Promise<boolean> {
    const probe = `leasehold_probe_${Math.random().toString(36).slice(2, 12)}`;
    let arrived!: () => void;
    const came = new Promise<void>((resolve) => (arrived = resolve));
    c.on('notification', (msg) => {
      if (msg.channel === probe) arrived();
    });
    await c.query(`LISTEN "${probe}"`);
    let timer: NodeJS.Timeout | undefined;
    try {
      await this.q(`SELECT pg_notify($1, '')`, [probe]);
      const ok = await Promise.race([came.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), NOTIFY_PROBE_MS)))]);
      if (!ok) {
        this.notifyBrokenAt = performance.now();
        this.notifyBroken = new ConfigError(
          `PostgreSQL notifications do not reach ${this.notify === 'own' ? "this store's connection" : 'notify_url'} ` +
            '(a pooler in transaction or statement mode, such as PgBouncer, cannot carry LISTEN): followers take a released lease only when its term would have expired. ' +
            'Add notify_url=<a direct postgres:// URL of the same primary, %-encoded> to the store URL for prompt handover, or notify_url=none to accept the wait',
        );
      }
      return ok;
    } finally {
      clearTimeout(timer);
      await c.query(`UNLISTEN "${probe}"`).catch(() => {});
    }
  }

  private async listenClient(): Promise<PgListenClientLike> {
    if (this.notify === 'own' || this.notify === 'none') return this.pool.connect();
    const pg = await loadPg();
    // With several hosts, in order, as the pool chooses: a reconnect after a failover finds the new primary.
    const { client } = await connectFirst(pg, this.notify.target, { keepAlive: true }, 5000, (err) => mapPgError(err, this.schema));
    return client;
  }

  /** Liveness 'session': a connection of its own per lease (./session.ts). */
  async openSession(name: string, ttlMs: number, options?: CallOptions): Promise<LeaseSession> {
    if (this.closed) throw new ClosedError('this PostgresStore is closed; open a new store');
    const direct = this.sessionTarget;
    return PgLeaseSession.open({
      s: this.s,
      urlPort: direct === undefined ? undefined : portOf(direct.urls[0]!),
      mapError: (err) => mapPgError(err, this.schema),
      release: (req, o) => this.release(req, o),
      connect: async () => {
        if (direct === undefined) return this.pool.connect();
        const { client } = await connectFirst(await loadPg(), direct, { keepAlive: true }, 5000, (err) => mapPgError(err, this.schema));
        return client;
      },
    }, name, ttlMs, options);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.listen?.stop();
    if (this.ownsPool) {
      const ended = this.pool.end?.();
      cutConnecting(this.pool);
      await ended;
    }
  }
}

/** How long a NOTIFY probe may take to come back before notifications count as not arriving. */
const NOTIFY_PROBE_MS = 3000;
/** How long a failed probe's verdict stands before watchFreed probes again. */
const NOTIFY_REPROBE_MS = 60_000;

function portOf(url: string): number {
  const u = new URL(url);
  return Number(u.searchParams.get('port') ?? (u.port || 5432));
}
