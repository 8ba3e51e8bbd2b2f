import { ClosedError, ConfigError, SchemaError, StoreError, StoreUnavailableError } from '../../core/errors.js';
import { leaseState } from '../../core/claim-rule.js';
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
  StoreSettingCheck,
} from '../store.js';
import { checkClaimBatch, historyLimit } from '../checks.js';
import { MAX_SQL_FLOOR, validateMinToken } from '../min-token.js';
import { ACCEPT_ROWS_AT, acceptedTerm, planAccept, planClaim, planConflicts, readAnswers, type LeaseRow } from './claim.js';
import { loadMysql2, MysqlConnector, run, sessionSetupSql, splitHostPort, type MysqlConnectionLike } from './driver.js';
import { runBatch } from './batch.js';
import { acceptRequestBytes, claimRequestBytes, DEFAULT_MAX_PACKET, releaseRequestBytes, splitByPacket } from './packet.js';
import { FreedChannel, knockTargets } from './freed.js';
import { planReleaseMany, releaseCall, revokeStatements } from './release.js';
import { mapMysqlError } from './errors.js';
import { MIGRATIONS, MYSQL_SCHEMA_VERSION, NOW_US, T } from './schema.js';
import { parseMysqlUrl } from './url.js';
import { MysqlLeaseSession, type SessionConnection } from './session.js';

export interface MysqlStoreOptions {
  /** `mysql://user:password@host:3306/database` (or `mariadb://`); TLS: `?sslmode=verify-full&cacert=ca.pem`. */
  url: string;
  /** Give up on a statement after this long (the outcome is then unknown). Default 10s. */
  queryTimeoutMs?: number;
  /** Give up connecting after this long. Default 5s. */
  connectTimeoutMs?: number;
}


/** innodb_lock_wait_timeout and MariaDB's idle_transaction_timeout on every session of the store. */
const LOCK_WAIT_S = 2;
const IDLE_TRANSACTION_S = 5;
/** How long registrations leave out `waiter_accepts` after the schema was found without it (see omitAcceptsUntil). */
const ACCEPTS_RETRY_MS = 60_000;

/**
 * Leases in a MySQL or MariaDB database (InnoDB), beside the application's own tables: a claim
 * is one round trip (./claim.ts), expiry is judged by the server's clock, and tokens come from
 * each name's row and a counter that only grows.
 */
export class MysqlStore implements LeaseStore {
  readonly kind = 'mysql';
  /** ClaimRequest.unlessReleasedSince is refused from the row the claim reads (port.ts). */
  readonly honoursReleasedSince = true as const;
  /** A batch travels as one JSON document; 2,000 leases is about 300 KB, far below max_allowed_packet. */
  readonly maxClaimBatch = 2000;
  /** A release hands the term to the registered waiter in its own transaction (sql/006-handover.ts). */
  readonly handover = true as const;
  readonly description: string;
  readonly database: string;
  /** @internal the fleet registry, slot ledger and fence run on these connections. */
  readonly connector: MysqlConnector;
  private closed = false;
  /** Named locks as the "may be free" channel (./freed.ts). */
  private readonly freed: FreedChannel;
  private watching = false;
  /** Deadlocks and lock-wait timeouts retried inside a call, since the store was opened. */
  lockRetries = 0;

  private constructor(connector: MysqlConnector, description: string, freed: FreedChannel) {
    this.connector = connector;
    this.freed = freed;
    this.database = connector.target.database;
    this.description = description;
  }

  /** @throws {ConfigError} for a malformed URL, or when `mysql2` is not installed. */
  static async create(options: MysqlStoreOptions): Promise<MysqlStore> {
    if (options.url === undefined) throw new ConfigError('MysqlStore needs a url (mysql://user@host:3306/database)');
    const { target, description } = parseMysqlUrl(options.url);
    const mysql = loadMysql2();
    const connector = new MysqlConnector(mysql, target, {
      queryTimeoutMs: options.queryTimeoutMs ?? 10_000,
      connectTimeoutMs: options.connectTimeoutMs ?? 5000,
      // A claim's own locks are held for one server-side batch (microseconds); a wait of 2s means
      // another process is frozen inside a fenced write, and is retried as contention.
      lockWaitSeconds: LOCK_WAIT_S,
      idleTransactionSeconds: IDLE_TRANSACTION_S,
      max: 4,
    });
    const session = sessionSetupSql({ lockWaitSeconds: LOCK_WAIT_S, idleTransactionSeconds: IDLE_TRANSACTION_S });
    return new MysqlStore(connector, description, new FreedChannel(connector, session));
  }

  private check(options?: CallOptions): void {
    if (this.closed) throw new ClosedError('this MysqlStore is closed; open a new store');
    options?.signal?.throwIfAborted();
  }

  /** One statement (or several) on a pooled connection, errors mapped. */
  async q(sql: string, values?: unknown, options?: CallOptions): Promise<unknown> {
    this.check(options);
    try {
      return await this.connector.query(sql, values);
    } catch (err) {
      throw mapMysqlError(err, this.database);
    }
  }

  /** A batch with the rollback, lock-conflict retry and abort rules of ./batch.ts. */
  private withLockRetry(make: (retry: boolean) => { sql: string; values: unknown[] }, options?: CallOptions): Promise<unknown[]> {
    this.check(options);
    return runBatch(this, make, [], options);
  }

  async claim(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> {
    checkClaimBatch(requests);
    if (requests.length === 0) return [];
    // A contender with a session (liveness 'session') runs the whole claim: it ties the term to its session.
    if (requests.every((r) => r.session === undefined) && this.freed.rang(requests)) {
      // Followers woken by their doorbell, each registered as its lease's waiter: the release that
      // rang it has most likely handed them the term, which they accept (sql/010-handover-acceptance.ts).
      // Only then: an idle follower's re-check would otherwise cost two round trips instead of one.
      // Cut by packet size as the claim is: a woken batch too large for one packet was refused
      // whole, every time, and only the claim after it accepted. Each part is a transaction of
      // its own; after a part not all accepted, the claim runs (it accepts too), so no more go.
      const byName = new Map<string, LeaseRow>();
      const accepted = (req: ClaimRequest): ClaimResult | undefined => {
        const row = byName.get(req.name);
        return row === undefined ? undefined : acceptedTerm(req, row);
      };
      for (const part of splitByPacket(requests, acceptRequestBytes, this.maxPacket)) {
        const r = await this.withLockRetry(() => planAccept(part), options).catch(() => [] as unknown[]);
        for (const row of (r[ACCEPT_ROWS_AT] ?? []) as LeaseRow[]) byName.set(row.name, row);
        if (!part.every((req) => accepted(req) !== undefined)) break;
      }
      const handed = requests.map(accepted);
      if (handed.every((h) => h !== undefined)) {
        for (const h of handed) this.holding(h.name);
        return handed;
      }
    }
    // Name order: every batch locks rows in the same order, so two never wait on each other. One
    // round trip per part: a batch too large for the server's packet is cut (./packet.ts).
    const sorted = [...requests].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const byName = new Map<string, ClaimResult>();
    for (const part of splitByPacket(sorted, claimRequestBytes, this.maxPacket)) {
      let rowsAt = 0;
      const r = await this.claimPart(part, (plan) => (rowsAt = plan.rowsAt), options);
      const rows = r[rowsAt] as LeaseRow[];
      const now = (r[rowsAt + 1] as { now_us: string }[])[0]!.now_us;
      const { results, conflicts } = readAnswers(part, rows, now);
      if (conflicts.length > 0) await this.withLockRetry(() => planConflicts(conflicts), options);
      for (const res of results) byName.set(res.name, res);
    }
    const results = requests.map((req) => byName.get(req.name)!);
    for (const res of results) {
      if (res.outcome === 'acquired' || res.outcome === 'renewed') this.holding(res.name);
      else if (res.outcome === 'busy') this.freed.follow(res.name);
      else void this.freed.unhold(res.name);
    }
    return results;
  }

  /**
   * Until when (performance.now()) registrations leave out `waiter_accepts`: set when the schema
   * turned out older than migration 10 (a process upgraded before `migrate`). Not for ever: a
   * long-lived process would otherwise keep being handed whole terms, and a dead waiter of it keep
   * others out a whole TTL, long after the database was migrated. So the column is tried again
   * after ACCEPTS_RETRY_MS (one refused batch, rolled back and resent, per that interval while the
   * schema is old), and at once after this store's own migrate().
   */
  private omitAcceptsUntil = 0;

  /** One part of a claim (planClaim), rolled back and retried as ./batch.ts says; `planned` hears each plan sent. */
  private async claimPart(part: readonly ClaimRequest[], planned: (plan: { rowsAt: number }) => void, options?: CallOptions): Promise<unknown[]> {
    for (;;) {
      const accepts = performance.now() >= this.omitAcceptsUntil;
      try {
        return await this.withLockRetry((retry) => {
          const plan = planClaim(part, retry, { database: this.database, mariadb: this.connector.server?.mariadb ?? true, waiterAccepts: accepts });
          planned(plan);
          return plan;
        }, options);
      } catch (err) {
        // A schema before migration 10 has no `waiter_accepts` (the batch was rolled back): register
        // as the previous version does, and be handed whole terms by that schema's release.
        if (!accepts || !(err instanceof SchemaError) || !/waiter_accepts/.test(err.message)) throw err;
        this.omitAcceptsUntil = performance.now() + ACCEPTS_RETRY_MS;
      }
    }
  }

  /**
   * Liveness 'session': a connection of its own per lease, holding the lease's session lock
   * (./session.ts), on the server the pool uses now.
   */
  async openSession(name: string, ttlMs: number, options?: CallOptions): Promise<LeaseSession> {
    this.check(options);
    if (this.connector.server === undefined) await this.q('DO 0', [], options); // which server: MariaDB or MySQL
    // Pinned: the session's connection is the server the claims go to now.
    const at = this.connector.current;
    const [, port] = splitHostPort(at);
    return MysqlLeaseSession.open(
      {
        database: this.database,
        connect: () => this.connector.connect<SessionConnection>(at),
        setupSql: sessionSetupSql({ lockWaitSeconds: LOCK_WAIT_S, idleTransactionSeconds: IDLE_TRANSACTION_S }),
        urlPort: port,
        mapError: (err) => mapMysqlError(err, this.database),
        releaseStatements: (req) => {
          const call = releaseCall(req);
          return { sql: [call.sql], values: call.values };
        },
        release: (req, o) => this.release(req, o),
        released: (n) => this.freed.unhold(n),
      },
      name,
      ttlMs,
      options,
    );
  }

  /**
   * The server's max_allowed_packet, once a session has read it (./packet.ts).
   * @internal the store's batches and the slot ledger's.
   */
  get maxPacket(): number {
    return this.connector.server?.maxPacket ?? DEFAULT_MAX_PACKET;
  }

  private holding(name: string): void {
    this.freed.unfollow(name);
    this.freed.hold(name);
  }

  async release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    this.check(options);
    // On the connection that holds the lease's named lock when it is free: the lock goes in the
    // same round trip as the commit, and a waiter (handed the term, sql/006-handover.ts) wakes a
    // round trip sooner. Any failure there (rolled back, or the outcome unknown with the
    // connection gone) runs the release again below, where a release that did land answers false.
    const one = releaseCall(req);
    const here = await this.freed.releaseHere(req.name, `START TRANSACTION;\n${one.sql}`, one.values).catch(() => undefined);
    if (here !== undefined) return here.prev !== null;
    const r = await this.endTerm(one, options);
    // After the commit: a follower woken by the lock must find the lease free.
    await this.freed.unhold(req.name);
    return r.revoked;
  }

  async revoke(name: string, reason: string, options?: CallOptions): Promise<RevokeResult> {
    const one = revokeStatements(name, reason);
    const r = await this.endTerm({ sql: one.sql.join(';\n'), values: one.values }, options);
    if (r.revoked) await this.knock([name]);
    return r;
  }

  /**
   * Tells the holders of `names`, whose terms were just ended by an operator, by closing the
   * connection each holds the lease's named lock on (./freed.ts): its process re-checks at once
   * and hears 'revoked'. Best effort: without the privilege to kill that session (another
   * database user), the holder hears it at its next renewal, as on any store without a channel.
   */
  private async knock(names: readonly string[]): Promise<void> {
    for (let i = 0; i < names.length; i += 500) {
      try {
        const { sql, values } = knockTargets(this.database, names.slice(i, i + 500));
        const rows = (await this.q(sql, values)) as Record<string, unknown>[];
        const ids = new Set(Object.values(rows[0] ?? {}).filter((v) => v !== null).map((v) => String(v)));
        for (const id of ids) await this.q('KILL CONNECTION ?', [Number(id)]).catch(() => {});
      } catch {
        // The holder hears it at its next renewal.
      }
    }
  }

  /** Ends a term in one round trip and one transaction: `one` (./release.ts) is what ends it. */
  private async endTerm(one: { sql: string; values: unknown[] }, options?: CallOptions): Promise<RevokeResult> {
    const r = (await this.withLockRetry(() => ({
      sql: ['START TRANSACTION', one.sql, 'COMMIT', 'SELECT @lh_prev AS prev, @lh_seen AS seen'].join(';\n'),
      values: one.values,
    }), options)) as unknown[];
    const row = (r[r.length - 1] as { prev: string | null; seen: string | null }[])[0]!;
    if (row.seen === null) return { revoked: false, previousHolder: null, token: null };
    return { revoked: row.prev !== null, previousHolder: row.prev, token: BigInt(row.seen) };
  }

  /**
   * Many releases in one round trip and one transaction, each row ended exactly as `release`
   * ends it (the same statements, ./release.ts). Rows are locked in name order, the order a claim
   * locks its contenders in (./claim.ts), so a batch release and another process's batch claim
   * take turns instead of deadlocking. The named locks go after the commit, in one statement.
   */
  async releaseMany(requests: readonly ReleaseRequest[], options?: CallOptions): Promise<boolean[]> {
    if (requests.length === 0) return [];
    const order = requests.map((_, i) => i).sort((a, b) => (requests[a]!.name < requests[b]!.name ? -1 : requests[a]!.name > requests[b]!.name ? 1 : a - b));
    const answers = requests.map(() => false);
    for (const part of splitByPacket(order, (i) => releaseRequestBytes(requests[i]!), this.maxPacket)) {
      const plan = planReleaseMany(part.map((i) => requests[i]!));
      const r = (await this.withLockRetry(() => plan, options)) as unknown[];
      const out = String((r[r.length - 1] as { out: string | null }[])[0]!.out ?? '');
      if (out.length !== part.length) throw new StoreError(`MySQL answered ${out.length} of ${part.length} releases; report this`);
      part.forEach((i, k) => (answers[i] = out[k] === '1'));
    }
    // After the commit: a follower woken by a lock must find the lease free.
    await this.freed.unholdMany(requests.map((q) => q.name));
    return answers;
  }

  async list(options?: CallOptions & { name?: string }): Promise<LeaseInfo[]> {
    const rows = (await this.q(
      `SELECT name, holder, token, expires_at_us, term_started_at_us, renewed_at_us, ${NOW_US} AS now_us
         FROM ${T.leases} WHERE term_started_at_us IS NOT NULL AND (? IS NULL OR name = ?) ORDER BY name`,
      [options?.name ?? null, options?.name ?? null],
      options,
    )) as Record<string, string | null>[];
    return rows.map((row) => {
      const ms = (v: string | null | undefined): number | null => (v == null ? null : Number(v) / 1000);
      const expiresAtMs = ms(row['expires_at_us']);
      const storeNowMs = ms(row['now_us'])!;
      const holder = row['holder'] ?? null;
      return {
        name: row['name']!,
        holder,
        token: BigInt(row['token']!),
        state: leaseState(holder, expiresAtMs, storeNowMs),
        expiresAtMs,
        storeNowMs,
        termStartedAtMs: ms(row['term_started_at_us']),
        renewedAtMs: ms(row['renewed_at_us']),
      };
    });
  }

  async history(options?: CallOptions & { name?: string; limit?: number }): Promise<HistoryEntry[]> {
    const limit = historyLimit(options?.limit);
    if (limit === 0) return [];
    const rows = (await this.q(
      `SELECT * FROM (SELECT id, name, event, holder, previous_holder, token, at_us, detail FROM ${T.history}
         WHERE (? IS NULL OR name = ?) ORDER BY id DESC LIMIT ?) h ORDER BY id`,
      [options?.name ?? null, options?.name ?? null, limit],
      options,
    )) as Record<string, string | null>[];
    return rows.map((row) => ({
      id: BigInt(row['id']!),
      name: row['name']!,
      event: row['event'] as HistoryEntry['event'],
      holder: row['holder'] ?? null,
      previousHolder: row['previous_holder'] ?? null,
      token: BigInt(row['token']!),
      atMs: Number(row['at_us']) / 1000,
      detail: row['detail'] ?? null,
    }));
  }

  async now(options?: CallOptions): Promise<number> {
    const rows = (await this.q(`SELECT ${NOW_US} AS now_us`, undefined, options)) as { now_us: string }[];
    return Number(rows[0]!.now_us) / 1000;
  }

  async schemaStatus(options?: CallOptions): Promise<SchemaStatus> {
    try {
      const rows = (await this.q(`SELECT MAX(version) AS v FROM ${T.version}`, undefined, options)) as { v: number | null }[];
      return { current: Number(rows[0]?.v ?? 0), expected: MYSQL_SCHEMA_VERSION };
    } catch (err) {
      if (err instanceof SchemaError) return { current: 0, expected: MYSQL_SCHEMA_VERSION };
      throw err;
    }
  }

  /**
   * Creates or upgrades the tables under a named lock (two processes migrating at once take
   * turns). MySQL commits each DDL statement by itself: every statement of a migration is
   * idempotent, and the version is written after the migration's last.
   */
  async migrate(options?: MigrateOptions): Promise<MigrateResult> {
    this.check(options);
    this.omitAcceptsUntil = 0;
    const minToken = options?.minToken === undefined ? undefined : validateMinToken(options.minToken, MAX_SQL_FLOOR, 'MySQL');
    let conn;
    try {
      conn = await this.connector.connection();
    } catch (err) {
      throw mapMysqlError(err, this.database);
    }
    const lock = `leasehold.migrate.${this.database}`;
    const t = this.connector.timeoutMs;
    try {
      const got = (await run(conn, 'SELECT GET_LOCK(?, 30) AS ok', [lock], 35_000)) as { ok: number | null }[];
      if (Number(got[0]?.ok) !== 1) throw new StoreUnavailableError(`another process has been migrating database "${this.database}" for 30s; try again`);
      try {
        await run(conn, `CREATE TABLE IF NOT EXISTS ${T.version} (version INT NOT NULL) ENGINE = InnoDB`, undefined, t);
        const v = (await run(conn, `SELECT MAX(version) AS v FROM ${T.version}`, undefined, t)) as { v: number | null }[];
        let current = Number(v[0]?.v ?? 0);
        if (current > MYSQL_SCHEMA_VERSION) {
          throw new SchemaError(`database "${this.database}" is at leasehold schema version ${current}, newer than this leasehold (${MYSQL_SCHEMA_VERSION}); upgrade leasehold`);
        }
        for (; current < MYSQL_SCHEMA_VERSION; current++) {
          for (const stmt of MIGRATIONS[current]!) {
            await run(conn, stmt, undefined, 60_000).catch((err: unknown) => {
              // An index a cut-short run of this migration already made (MySQL 8 has no CREATE INDEX IF NOT EXISTS).
              const e = err as { errno?: unknown; cause?: { errno?: unknown } };
              if (/^CREATE INDEX /.test(stmt) && (e.errno ?? e.cause?.errno) === 1061) return;
              throw err;
            });
          }
          await run(conn, `DELETE FROM ${T.version}; INSERT INTO ${T.version} (version) VALUES (?)`, [current + 1], t);
        }
        const tokenFloor = minToken === undefined ? undefined : await this.raiseFloor(conn, minToken);
        return tokenFloor === undefined ? { current, expected: MYSQL_SCHEMA_VERSION } : { current, expected: MYSQL_SCHEMA_VERSION, tokenFloor };
      } finally {
        await run(conn, 'DO RELEASE_LOCK(?)', [lock], t).catch(() => {});
      }
    } catch (err) {
      conn.destroy();
      conn = undefined;
      throw mapMysqlError(err, this.database);
    } finally {
      conn?.release();
    }
  }

  /**
   * Raises the floor in the counter row; every later token is above it. A live term at or below
   * the floor is ended as revoked (its holder hears it at its next renewal), and stored tokens
   * below it are raised so `list` and `nextToken` agree with what the next claim will do.
   */
  private async raiseFloor(conn: MysqlConnectionLike, minToken: bigint): Promise<NonNullable<MigrateResult['tokenFloor']>> {
    const t = this.connector.timeoutMs;
    const detail = `leasehold migrate --min-token ${minToken}`;
    const r = (await run(
      conn,
      [
        'START TRANSACTION',
        `INSERT IGNORE INTO ${T.tokens} (id) VALUES (1)`,
        `SELECT floor INTO @lh_before FROM ${T.tokens} WHERE id = 1 FOR UPDATE`,
        'SET @lh_floor = GREATEST(@lh_before, ?)',
        `UPDATE ${T.tokens} SET floor = @lh_floor WHERE id = 1`,
        `SELECT COUNT(*) INTO @lh_locked FROM (SELECT name FROM ${T.leases} WHERE token <= @lh_floor AND holder IS NOT NULL ORDER BY name FOR UPDATE) x`,
        `SELECT JSON_ARRAYAGG(name) INTO @lh_names FROM ${T.leases} WHERE token <= @lh_floor AND holder IS NOT NULL`,
        `SET @lh_now = ${NOW_US}`,
        `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at_us, detail)
           SELECT name, 'revoked', NULL, holder, token, @lh_now, CONCAT(?, ': the token floor is now ', @lh_floor)
             FROM ${T.leases} WHERE token <= @lh_floor AND holder IS NOT NULL ORDER BY name`,
        'SET @lh_ended = ROW_COUNT()',
        `UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at_us = @lh_now, ended_by = 'revoked' WHERE token <= @lh_floor AND holder IS NOT NULL`,
        `UPDATE ${T.leases} SET token = @lh_floor WHERE token < @lh_floor`,
        `UPDATE leasehold_fleet_generation SET last = GREATEST(last, @lh_floor) WHERE id = 1`, // fleet generations are fencing tokens too (./fleet.ts)
        'COMMIT',
        'SELECT @lh_before AS before_floor, @lh_floor AS floor, @lh_ended AS ended, @lh_names AS names',
      ].join(';\n'),
      [minToken.toString(), detail],
      t,
    )) as unknown[];
    const row = (r[r.length - 1] as { before_floor: string; floor: string; ended: string | number; names: string | null }[])[0]!;
    if (row.names !== null) await this.knock(JSON.parse(row.names) as string[]);
    return { floor: BigInt(row.floor), raised: BigInt(row.floor) > BigInt(row.before_floor), endedTerms: Number(row.ended) };
  }

  async nextToken(options?: CallOptions & { name?: string }): Promise<bigint> {
    const rows = (await this.q(
      `SELECT GREATEST(t.floor, t.last, COALESCE((SELECT token FROM ${T.leases} WHERE name = ?), 0), ${NOW_US} - 1) AS top FROM ${T.tokens} t WHERE t.id = 1`,
      [options?.name ?? ''],
      options,
    )) as { top: string }[];
    return BigInt(rows[0]?.top ?? '0') + 1n;
  }

  async fenceHighWater(options?: CallOptions & { limit?: number }): Promise<{ resource: string; token: bigint }[]> {
    const rows = (await this.q(`SELECT resource, token FROM ${T.fences} ORDER BY token DESC, resource LIMIT ?`, [options?.limit ?? 5], options).catch((err: unknown) => {
      if (err instanceof SchemaError) return [];
      throw err;
    })) as { resource: string; token: string }[];
    return rows.map((r) => ({ resource: r.resource, token: BigInt(r.token) }));
  }

  /**
   * Settings that break a promise without failing a call: a server whose binary log or InnoDB
   * flushing can lose a committed token bump on a crash would hand out a token again.
   */
  async checkSettings(options?: CallOptions): Promise<StoreSettingCheck[]> {
    try {
      const rows = (await this.q('SELECT @@innodb_flush_log_at_trx_commit AS flush, VERSION() AS v', undefined, options)) as { flush: number | string; v: string }[];
      const flush = Number(rows[0]!.flush);
      return [
        flush === 1
          ? { check: 'durability', status: 'ok', detail: `innodb_flush_log_at_trx_commit = 1 on ${rows[0]!.v}: a committed token survives a crash` }
          : {
              check: 'durability',
              status: 'warn',
              detail: `innodb_flush_log_at_trx_commit = ${flush}: a server crash can lose the last second of commits, and with it a token bump, so a token could be issued twice; set it to 1`,
            },
      ];
    } catch (err) {
      return [{ check: 'durability', status: 'warn', detail: `could not read innodb_flush_log_at_trx_commit (${(err as Error).message})` }];
    }
  }

  /**
   * Followers hear a release (or a holder's death) through its named lock (./freed.ts); the
   * engine keeps its expiry timer, since a frozen holder keeps its lock while its term runs out.
   */
  watchFreed(listener: FreedListener, onReconnect?: () => void): Promise<() => Promise<void>> {
    if (this.closed) return Promise.reject(new ClosedError('this MysqlStore is closed; open a new store'));
    if (this.watching) return Promise.reject(new ConfigError('watchFreed is already active on this store; stop the first listener (or open a second store) before starting another'));
    this.watching = true;
    const stop = this.freed.watch(listener, onReconnect);
    return Promise.resolve(async () => {
      this.watching = false;
      await stop();
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.freed.close();
    await this.connector.close();
  }
}
