import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ClosedError, ConfigError, SchemaError, StoreUnavailableError } from '../../core/errors.js';
import type {
  CallOptions,
  ClaimRequest,
  ClaimResult,
  FreedListener,
  LeaseSession,
  HistoryEntry,
  LeaseInfo,
  LeaseStore,
  MigrateOptions,
  MigrateResult,
  ReleaseRequest,
  RevokeResult,
  SchemaStatus,
} from '../store.js';
import { MAX_SQL_FLOOR, validateMinToken } from '../min-token.js';
import { checkClaimBatch, historyLimit } from '../checks.js';
import { canEndTerm, leaseState } from '../../core/claim-rule.js';
import { asSqliteDatabase, driverOf, resolveSqliteDriver, type SqliteDriverName } from './driver.js';
import { isBusy, mapSqliteError, pause } from './errors.js';
import { createPrivately } from './files.js';
import { parseSqliteUrl } from './url.js';
import type { DatabaseSyncLike } from './node-sqlite.js';
import { SQLITE_SCHEMA_VERSION, MIGRATIONS, T } from './schema.js';
import { decodeSession, SqliteLeaseSession } from './session.js';
import { claimBatch, refusedFromSnapshot, rowState, type LeaseRow } from './claim.js';

/**
 * The subset of a better-sqlite3 `Database` leasehold needs. node:sqlite's DatabaseSync is
 * given this shape by `NodeSqliteDatabase` (./node-sqlite.ts).
 */
export interface SqliteDatabaseLike {
  prepare(sql: string): SqliteStatementLike;
  exec(sql: string): unknown;
  pragma(sql: string, options?: { simple?: boolean }): unknown;
  transaction(fn: () => unknown): { immediate(): unknown };
  close(): unknown;
  readonly open: boolean;
  readonly name: string;
}
/** Runs `fn` in a BEGIN IMMEDIATE transaction: the write lock is taken before the first read. */
export function immediate<T>(db: SqliteDatabaseLike, fn: () => T): T {
  return db.transaction(fn).immediate() as T;
}

export interface SqliteStatementLike {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  safeIntegers(toggle?: boolean): this;
}

export interface SqliteStoreOptions {
  /** `sqlite:/path/to/file.db`, or pass `path`, or `database`. */
  url?: string;
  path?: string;
  /** Your own better-sqlite3 Database or node:sqlite DatabaseSync (leasehold will not close it). */
  database?: SqliteDatabaseLike | DatabaseSyncLike;
  /**
   * The driver that opens `url` / `path`: 'auto' (the default: node:sqlite where this Node has
   * it, 22.13+ and 24; better-sqlite3 where it does not), or one of the two by name. Unset, the
   * LEASEHOLD_SQLITE_DRIVER environment variable decides, with the same values.
   */
  driver?: SqliteDriverName | 'auto';
  /**
   * How long a store call waits for another process's write lock before failing (retryable).
   * Default 2s. The wait is asynchronous (short retries on timers): the event loop is never
   * blocked by it. It is also the connection's own busy timeout, which synchronous users of
   * {@link SqliteStore.database} (such as `fencedWriteSync`) wait with, blocking.
   */
  busyTimeoutMs?: number;
  /** Create or upgrade the tables on open. Default true: the embedded store needs no setup step. */
  migrate?: boolean;
}

/**
 * The token floor (`migrate({ minToken })`) lives in the leases table as the row named '': no
 * lease can have that name (names are non-empty), so the claim reads it with the same statement
 * it reads a lease with, and older files need no new table.
 */
const FLOOR_ROW = '';
/** watchFreed: when to look again after a change (see there). */
const FOLLOW_UP_MS = [20, 100, 400, 1500];

/**
 * The embedded default: one SQLite file shared by every process on one host. WAL lets readers
 * run beside the single writer; every claim is a BEGIN IMMEDIATE transaction so two processes
 * never both read "free" and both write "mine".
 *
 * The store's clock is this host's wall clock, read inside the write transaction. All
 * processes on the host share it, which is what makes SQLite a one-host store: a process whose
 * clock is faked (libfaketime) is judging expiry by a different clock, and an NTP step moves
 * every expiry at once.
 */
export class SqliteStore implements LeaseStore {
  readonly kind = 'sqlite';
  /** ClaimRequest.unlessReleasedSince is refused from the row the claim reads (port.ts). */
  readonly honoursReleasedSince = true as const;
  readonly description: string;
  readonly path: string;
  /** The SQLite driver under this store. */
  readonly driver: SqliteDriverName;
  private readonly db: SqliteDatabaseLike;
  private readonly ownsDb: boolean;
  private closed = false;
  private watchers = new Set<() => Promise<void>>();
  private readonly busyTimeoutMs: number;
  private readonly busyOff: SqliteStatementLike;
  private readonly busyOn: SqliteStatementLike;
  /**
   * The hot statements, prepared once per connection: preparing is a parse and plan in SQLite,
   * and a one-lease renewal preparing its six statements per call spent more on that than on
   * the update itself.
   */
  private readonly statements = new Map<string, SqliteStatementLike>();

  /**
   * The same shape as every other store's `create` (PostgresStore, RedisStore, EtcdStore), so
   * code that picks a backend at run time constructs each one the same way. Opening a SQLite
   * file is synchronous; the constructor stays public for code that cannot await.
   */
  static async create(options: SqliteStoreOptions): Promise<SqliteStore> {
    return new SqliteStore(options);
  }

  constructor(options: SqliteStoreOptions) {
    const busy = options.busyTimeoutMs ?? 2000;
    if (!Number.isInteger(busy) || busy < 0) throw new ConfigError(`busyTimeoutMs must be a whole number of milliseconds >= 0, got ${busy}`);
    this.busyTimeoutMs = busy;
    let path = options.path;
    if (options.database === undefined && path === undefined) {
      if (options.url === undefined) throw new ConfigError('SqliteStore needs a url (sqlite:PATH), a path or a database');
      path = parseSqliteUrl(options.url);
    }
    if (options.database !== undefined) {
      this.db = asSqliteDatabase(options.database);
      this.ownsDb = false;
      this.path = this.db.name;
      this.driver = driverOf(this.db);
    } else {
      this.path = path === ':memory:' ? path : resolve(path!);
      // Before anything touches the file: a missing driver is the first thing to report.
      const { Database, name } = resolveSqliteDriver(options.driver);
      this.driver = name;
      if (this.path !== ':memory:') {
        try {
          createPrivately(this.path);
        } catch (err) {
          throw new ConfigError(`cannot create ${this.path}: ${(err as Error).message}; choose a writable path`, { cause: err });
        }
      }
      try {
        this.db = new Database(this.path);
      } catch (err) {
        throw new ConfigError(`cannot open SQLite database ${this.path}: ${(err as Error).message}; check the path and its permissions`, { cause: err });
      }
      this.ownsDb = true;
    }
    this.description = `sqlite ${this.path}`;
    try {
      // The open itself (WAL switch, migration) may wait, blocking, for the busy timeout: it
      // happens once, before this store can hold a lease.
      this.db.pragma(`busy_timeout = ${busy}`);
      this.db.pragma('journal_mode = WAL');
      this.busyOff = this.db.prepare('PRAGMA busy_timeout = 0');
      this.busyOn = this.db.prepare(`PRAGMA busy_timeout = ${busy}`);
      // FULL, not NORMAL: in WAL mode NORMAL can lose the last commits on power loss, and a
      // lost token bump would hand the next term a token that was already used.
      this.db.pragma('synchronous = FULL');
    } catch (err) {
      throw mapSqliteError(err);
    }
    if (options.migrate !== false) this.migrateSync();
  }

  /**
   * Runs one store call. better-sqlite3 is synchronous, so SQLite's own busy wait would block
   * the event loop for up to the busy timeout whenever another process holds the write lock (a
   * long fenced write on this file, say): every timer in this process, including the renewal
   * deadlines of leases on other stores, would stall with it. Instead each attempt runs with
   * the busy timeout at 0 and a locked database is retried on a timer with a short backoff,
   * until the budget is spent or the caller's signal aborts (the engine aborts a renewal
   * after one renew interval and retries it in jeopardy). So the loop blocks only for one
   * attempt, and a claim that never got the lock is a retryable StoreUnavailableError: an
   * unknown outcome, never a crash and never a "yes".
   */
  private async guard<R>(fn: () => R, options?: CallOptions): Promise<R> {
    const signal = options?.signal;
    const started = performance.now();
    for (let attempt = 0; ; attempt++) {
      if (this.closed) throw new ClosedError('this SqliteStore is closed; open a new store');
      try {
        signal?.throwIfAborted();
        return this.withoutBusyWait(fn);
      } catch (err) {
        if (!isBusy(err)) throw mapSqliteError(err);
        const left = this.busyTimeoutMs - (performance.now() - started);
        if (left <= 0) {
          throw new StoreUnavailableError(
            `SQLite database ${this.path} stayed locked by another process for ${this.busyTimeoutMs}ms (${(err as Error).message}); this is retryable`,
            { cause: err },
          );
        }
        // 1, 2, 4 ... 25ms with jitter: a lock held for a few ms (another claim) costs a few
        // ms; one held for seconds costs ~40 attempts a second, each a failed lock attempt.
        const backoff = Math.min(25, 2 ** attempt) * (0.5 + Math.random() / 2);
        await pause(Math.min(backoff, left), signal, err);
      }
    }
  }

  /** @internal the fleet registry (./fleet.ts) runs its transactions through this store's lock handling. */
  fleetRun<R>(fn: (db: SqliteDatabaseLike) => R, options?: CallOptions): Promise<R> {
    return this.guard(() => immediate(this.db, () => fn(this.db)), options);
  }

  /** `sql` prepared once on this connection (`safe`: integers as bigint). */
  private stmt(sql: string, safe = false): SqliteStatementLike {
    const key = safe ? `1${sql}` : `0${sql}`;
    let s = this.statements.get(key);
    if (s === undefined) {
      s = this.db.prepare(sql);
      if (safe) s.safeIntegers(true);
      this.statements.set(key, s);
    }
    return s;
  }

  /** Runs `fn` with SQLite's blocking busy wait turned off for this connection. */
  private withoutBusyWait<R>(fn: () => R): R {
    if (this.busyTimeoutMs === 0) return fn();
    this.busyOff.get();
    try {
      return fn();
    } finally {
      if (this.db.open) this.busyOn.get();
    }
  }

  private migrateSync(): SchemaStatus {
    try {
      return immediate(this.db, () => {
        this.db.exec(`CREATE TABLE IF NOT EXISTS ${T.version} (version INTEGER NOT NULL)`);
        const row = this.db.prepare(`SELECT max(version) AS v FROM ${T.version}`).get() as { v: number | null };
        let current = row.v ?? 0;
        if (current > SQLITE_SCHEMA_VERSION) {
          throw new SchemaError(`${this.path} has leasehold schema ${current}, newer than this leasehold (${SQLITE_SCHEMA_VERSION}); upgrade leasehold`);
        }
        for (; current < SQLITE_SCHEMA_VERSION; current++) this.db.exec(MIGRATIONS[current]!);
        this.db.exec(`DELETE FROM ${T.version}`);
        this.db.prepare(`INSERT INTO ${T.version} (version) VALUES (?)`).run(current);
        return { current, expected: SQLITE_SCHEMA_VERSION };
      });
    } catch (err) {
      throw mapSqliteError(err);
    }
  }

  migrate(options?: MigrateOptions): Promise<MigrateResult> {
    return this.guard(() => {
      const minToken = options?.minToken === undefined ? undefined : validateMinToken(options.minToken, MAX_SQL_FLOOR, 'SQLite');
      const status = this.migrateSync();
      if (minToken === undefined) return status;
      return { ...status, tokenFloor: immediate(this.db, () => this.raiseFloor(minToken)) };
    }, options);
  }

  /**
   * Raises the floor row, and every lease below it; a live term among them is ended as revoked
   * (its holder hears it through the file watch and stands down) instead of being left to renew
   * a token that no longer exists.
   */
  private raiseFloor(minToken: bigint): NonNullable<MigrateResult['tokenFloor']> {
    const before = this.floorSync();
    const floor = before > minToken ? before : minToken;
    if (floor > before) {
      this.db.prepare(`INSERT INTO ${T.leases} (name, token) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET token = excluded.token`).run(FLOOR_ROW, floor);
    }
    const now = Date.now();
    const live = this.db
      .prepare(`SELECT name, holder, token FROM ${T.leases} WHERE name <> ? AND token <= ? AND holder IS NOT NULL`)
      .safeIntegers(true)
      .all(FLOOR_ROW, floor) as { name: string; holder: string; token: bigint }[];
    const end = this.db.prepare(`UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at = ?, ended_by = 'revoked' WHERE name = ?`);
    const hist = this.db.prepare(
      `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at, detail) VALUES (?, 'revoked', NULL, ?, ?, ?, ?)`,
    );
    for (const row of live) {
      end.run(now, row.name);
      hist.run(row.name, row.holder, row.token, now, `leasehold migrate --min-token ${minToken}: the token floor is now ${floor}`);
    }
    this.db.prepare(`UPDATE ${T.leases} SET token = ? WHERE name <> ? AND token < ?`).run(floor, FLOOR_ROW, floor);
    // The fleet's generations are fencing tokens too (src/fleet): every later one above the floor.
    this.db.prepare(`UPDATE leasehold_fleet_generation SET last = max(last, ?) WHERE id = 1`).run(floor);
    return { floor, raised: floor > before, endedTerms: live.length };
  }

  private floorSync(): bigint {
    const row = this.stmt(`SELECT token FROM ${T.leases} WHERE name = ?`, true).get(FLOOR_ROW) as { token: bigint } | undefined;
    return row?.token ?? 0n;
  }

  nextToken(options?: CallOptions & { name?: string }): Promise<bigint> {
    return this.guard(() => {
      const floor = this.floorSync();
      const row =
        options?.name === undefined
          ? undefined
          : (this.db.prepare(`SELECT token FROM ${T.leases} WHERE name = ?`).safeIntegers(true).get(options.name) as { token: bigint } | undefined);
      const token = row === undefined || row.token < floor ? floor : row.token;
      return token + 1n;
    }, options);
  }

  fenceHighWater(options?: CallOptions & { limit?: number }): Promise<{ resource: string; token: bigint }[]> {
    return this.guard(() => {
      const t = this.db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?`).get(T.fences);
      if (t === undefined) return [];
      return this.db
        .prepare(`SELECT resource, token FROM ${T.fences} ORDER BY token DESC, resource LIMIT ?`)
        .safeIntegers(true)
        .all(options?.limit ?? 5) as { resource: string; token: bigint }[];
    }, options);
  }

  schemaStatus(options?: CallOptions): Promise<SchemaStatus> {
    return this.guard(() => {
      const t = this.db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?`).get(T.version);
      if (t === undefined) return { current: 0, expected: SQLITE_SCHEMA_VERSION };
      const row = this.db.prepare(`SELECT max(version) AS v FROM ${T.version}`).get() as { v: number | null };
      return { current: row.v ?? 0, expected: SQLITE_SCHEMA_VERSION };
    }, options);
  }

  claim(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> {
    return this.guard(() => {
      checkClaimBatch(requests);
      // Refusals settle without the write lock (see refusedFromSnapshot).
      const refused = refusedFromSnapshot((sql, safe) => this.stmt(sql, safe), requests, Date.now());
      if (refused !== undefined) return refused;
      // Read inside the write transaction: a floor raised by another process applies at once.
      return immediate(this.db, () => claimBatch(this.db, (sql, safe) => this.stmt(sql, safe), requests, Date.now(), this.floorSync()));
    }, options);
  }

  /** Liveness 'session': this process is the session (./session.ts). */
  openSession(name: string, _ttlMs: number, options?: CallOptions): Promise<LeaseSession> {
    return this.guard(
      () =>
        SqliteLeaseSession.open(
          {
            holderOf: (n) => {
              const row = this.db.prepare(`SELECT holder, token, session_id, session_token FROM ${T.leases} WHERE name = ?`).safeIntegers(true).get(n) as LeaseRow | undefined;
              if (row?.holder == null || row.session_id == null || row.session_token !== row.token) return undefined;
              return decodeSession(row.session_id);
            },
            release: (req, o) => this.release(req, o),
          },
          this.path,
          name,
        ),
      options,
    );
  }

  release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    return this.guard(() => this.endTerm(req.name, 'released', null, req), options).then((r) => r.revoked);
  }

  /** Many releases in one write transaction: one lock of the file, one commit, instead of one each. */
  releaseMany(requests: readonly ReleaseRequest[], options?: CallOptions): Promise<boolean[]> {
    return this.guard(() => immediate(this.db, () => requests.map((req) => this.endTermRow(req.name, 'released', null, req).revoked)), options);
  }

  revoke(name: string, reason: string, options?: CallOptions): Promise<RevokeResult> {
    return this.guard(() => this.endTerm(name, 'revoked', reason, null), options);
  }

  private endTerm(name: string, event: 'released' | 'revoked', detail: string | null, holderReq: ReleaseRequest | null): RevokeResult {
    return immediate(this.db, () => this.endTermRow(name, event, detail, holderReq));
  }

  /** Inside a write transaction the caller opened. */
  private endTermRow(name: string, event: 'released' | 'revoked', detail: string | null, holderReq: ReleaseRequest | null): RevokeResult {
    const row = this.stmt(`SELECT * FROM ${T.leases} WHERE name = ?`, true).get(name) as LeaseRow | undefined;
    if (row === undefined) return { revoked: false, previousHolder: null, token: null };
    if (!canEndTerm(rowState(row), holderReq)) return { revoked: false, previousHolder: null, token: row.token };
    const now = Date.now();
    this.stmt(`UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at = ?, ended_by = ? WHERE name = ?`).run(now, event, name);
    this.stmt(`INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at, detail) VALUES (?, ?, NULL, ?, ?, ?, ?)`).run(
      name,
      event,
      row.holder,
      row.token,
      now,
      detail,
    );
    return { revoked: true, previousHolder: row.holder!, token: row.token };
  }

  list(options?: CallOptions & { name?: string }): Promise<LeaseInfo[]> {
    return this.guard(() => {
      const now = Date.now();
      const rows = this.db
        .prepare(`SELECT * FROM ${T.leases} WHERE token > 0 AND name <> ? AND (? IS NULL OR name = ?) ORDER BY name`)
        .safeIntegers(true)
        .all(FLOOR_ROW, options?.name ?? null, options?.name ?? null) as LeaseRow[];
      return rows.map((row) => {
        const expiresAtMs = row.expires_at === null ? null : Number(row.expires_at);
        return {
          name: row.name,
          holder: row.holder,
          token: row.token,
          state: leaseState(row.holder, expiresAtMs, now),
          expiresAtMs,
          storeNowMs: now,
          termStartedAtMs: row.term_started_at === null ? null : Number(row.term_started_at),
          renewedAtMs: row.renewed_at === null ? null : Number(row.renewed_at),
        };
      });
    }, options);
  }

  history(options?: CallOptions & { name?: string; limit?: number }): Promise<HistoryEntry[]> {
    return this.guard(() => {
      const limit = historyLimit(options?.limit);
      const rows = this.db
        .prepare(
          `SELECT * FROM (SELECT * FROM ${T.history} WHERE (? IS NULL OR name = ?) ORDER BY id DESC LIMIT ?) ORDER BY id`,
        )
        .safeIntegers(true)
        .all(options?.name ?? null, options?.name ?? null, limit) as {
        id: bigint;
        name: string;
        event: HistoryEntry['event'];
        holder: string | null;
        previous_holder: string | null;
        token: bigint;
        at: bigint;
        detail: string | null;
      }[];
      return rows.map((r) => ({
        id: r.id,
        name: r.name,
        event: r.event,
        holder: r.holder,
        previousHolder: r.previous_holder,
        token: r.token,
        atMs: Number(r.at),
        detail: r.detail,
      }));
    }, options);
  }

  now(options?: CallOptions): Promise<number> {
    return this.guard(() => Date.now(), options);
  }

  /**
   * SQLite has no push channel, but every commit touches the WAL file. We watch the directory
   * (the WAL file is deleted when the last connection closes, which would orphan a file watch)
   * and, on a change, read new release/revoke rows from the history: a cheap local query.
   */
  watchFreed(listener: FreedListener): Promise<() => Promise<void>> {
    if (this.path === ':memory:' || this.path === '') return Promise.reject(new ConfigError('an in-memory SQLite store cannot be watched'));
    return this.guard(() => {
      const lastId = this.db.prepare(`SELECT coalesce(max(id), 0) AS id FROM ${T.history}`).safeIntegers(true).get() as { id: bigint };
      let cursor = lastId.id;
      const base = basename(this.path);
      const poll = this.db
        .prepare(`SELECT id, name FROM ${T.history} WHERE id > ? AND event IN ('released', 'revoked', 'conflict') ORDER BY id`)
        .safeIntegers(true);
      const maxId = this.db.prepare(`SELECT coalesce(max(id), 0) AS id FROM ${T.history}`).safeIntegers(true);
      let pending: NodeJS.Timeout | undefined;
      /** Index into FOLLOW_UP_MS of the next look after the last change. */
      let followUp = 0;
      /** The pending look is the one right after a change (not a follow-up). */
      let quick = false;
      const check = (): void => {
        pending = undefined;
        quick = false;
        if (this.closed) return;
        try {
          const [rows, top] = this.withoutBusyWait(() => [poll.all(cursor) as { id: bigint; name: string }[], (maxId.get() as { id: bigint }).id] as const);
          for (const r of rows) listener(r.name);
          cursor = top > cursor ? top : cursor;
        } catch {
          // Busy or closing: the follow-up looks below cover it.
        }
        // A commit writes its WAL frames (the change the watch sees), syncs them (synchronous =
        // FULL), and only then publishes itself in the shared-memory index, which no file watch
        // sees. A look in between misses it, and without another look a release would wait for
        // the follower's expiry sleep (CI saw a takeover at the 6s expiry instead of at once).
        // So every change is looked at again a few times, a cheap local query each.
        if (followUp < FOLLOW_UP_MS.length) {
          pending = setTimeout(check, FOLLOW_UP_MS[followUp++]);
          pending.unref();
        }
      };
      let watcher: FSWatcher | undefined = watch(dirname(this.path), { persistent: false }, (_event, file) => {
        if (file !== null && !String(file).startsWith(base)) return;
        followUp = 0;
        if (pending !== undefined && !quick) {
          clearTimeout(pending); // a follow-up look, later than this change needs
          pending = undefined;
        }
        if (pending === undefined) {
          quick = true;
          pending = setTimeout(check, 5);
        }
      });
      watcher.on('error', () => {
        watcher?.close();
        watcher = undefined;
      });
      const stop = (): Promise<void> => {
        watcher?.close();
        watcher = undefined;
        if (pending !== undefined) clearTimeout(pending);
        this.watchers.delete(stop);
        return Promise.resolve();
      };
      this.watchers.add(stop);
      return stop;
    });
  }

  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    for (const stop of [...this.watchers]) void stop();
    this.closed = true;
    if (this.ownsDb && this.db.open) this.db.close();
    return Promise.resolve();
  }

  /** For the fence helpers: the same file's database handle. */
  get database(): SqliteDatabaseLike {
    return this.db;
  }
}
