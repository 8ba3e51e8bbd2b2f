/**
 * Liveness 'session' on MySQL/MariaDB (issue 32; sql/008-session-liveness.ts has the columns,
 * docs/liveness.md the safety argument). One dedicated connection per contended or held lease:
 * it takes the lease's *session lock* (a named lock, GET_LOCK, distinct from the doorbell lock
 * of ./freed.ts, which followers take and let go at once) and keeps it; the claim records the
 * connection's id with the term; the server lets the lock go the moment the connection ends (the
 * holder's process died, or the server killed the session), which hands it at once to a follower
 * blocked in GET_LOCK on its own session, and that follower's claim ends the orphaned term
 * (./claim.ts, endOrphan). Before the first claim the connection is checked: refused through a
 * proxy, and when the server could end a live holder's silent session within the TTL.
 */
import { createHash } from 'node:crypto';
import { LivenessError, StoreUnavailableError, errorMessage } from '../../core/errors.js';
import type { CallOptions, LeaseSession, ReleaseRequest } from '../../core/port.js';

export const SESSION_ENDED_DETAIL = "the holder's session ended (liveness: session): its connection to MySQL closed";

/**
 * The server's start time in whole seconds by its own clock: what tells one server instance
 * from the next (connection ids start again at a restart; another server after a failover).
 * MariaDB keeps status in information_schema, MySQL 8 in performance_schema.
 */
export function serverStartSql(mariadb: boolean): string {
  const status = mariadb ? 'information_schema.GLOBAL_STATUS' : 'performance_schema.global_status';
  return `(UNIX_TIMESTAMP() - (SELECT CAST(VARIABLE_VALUE AS SIGNED) FROM ${status} WHERE VARIABLE_NAME = 'UPTIME'))`;
}

/** The session lock of a lease: at most 64 characters, and never the doorbell's name (./freed.ts). */
export function sessionLockName(database: string, lease: string): string {
  return `leasehold-s:${createHash('sha256').update(database).update('\0').update(lease).digest('base64url').slice(0, 40)}`;
}

/** A lock wait is one statement of at most this long, repeated until the follower's wait ends. */
const LOCK_WAIT_SLICE_S = 3;
/** The longest wait_timeout MySQL accepts on Linux: an idle session must outlive any term. */
const IDLE_FOREVER_S = 31_536_000;
/**
 * Linux's keepalive defaults (net.ipv4.tcp_keepalive_intvl, tcp_keepalive_probes), which a server
 * that leaves keepalive to the OS uses; the session cannot read the server host's sysctls.
 */
const OS_INTERVAL_S = 75;
const OS_PROBES = 9;

export interface SessionConnection {
  query(options: { sql: string; values?: unknown; timeout?: number }, cb: (err: Error | null, result?: unknown) => void): unknown;
  on(event: 'error' | 'end', listener: (err?: Error) => void): unknown;
  destroy(): void;
  end(cb?: () => void): void;
  stream?: { ref?: () => void; unref?: () => void; localPort?: number };
}

/** What the store gives a session. */
interface SessionEnv {
  database: string;
  connect(): SessionConnection;
  /** The store's session setup (driver.ts, sessionSetupSql): a release runs here as on the pool. */
  setupSql: string;
  /** The port the store connects to: a server that says it listens on another is behind a proxy. */
  urlPort: number;
  mapError(err: unknown): Error;
  /** The statements of a holder's release (./release.ts, releaseCall), without the transaction. */
  releaseStatements(req: ReleaseRequest): { sql: string[]; values: unknown[] };
  /** The store's own release, for a term this session's lock was never tied to. */
  release(req: ReleaseRequest, options?: CallOptions): Promise<boolean>;
  /** After a release over the session committed: the doorbell's lock goes (./freed.ts). */
  released(name: string): Promise<void>;
}

function q(c: SessionConnection, sql: string, values: unknown[], timeoutMs: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    c.query({ sql, values, timeout: timeoutMs }, (err, r) => (err === null ? resolve(r) : reject(err)));
  });
}

/**
 * The shortest time after which the server could end a silent session of a live holder (a
 * partition): its keepalive gives up after `probes` unanswered probes `interval` apart, the
 * first of which may go out just as the partition starts.
 */
export function mysqlGiveUpMs(s: { interval: number; probes: number }): number {
  const interval = s.interval > 0 ? s.interval : OS_INTERVAL_S;
  const probes = s.probes > 0 ? s.probes : OS_PROBES;
  return interval * probes * 1000;
}

export class MysqlLeaseSession implements LeaseSession {
  readonly id: string;
  private _ended = false;
  private endListener: ((detail: string) => void) | undefined;
  private locking: Promise<boolean> | undefined;
  private locked = false;
  private readonly lock: string;

  private constructor(
    private readonly c: SessionConnection,
    private readonly env: SessionEnv,
    private readonly name: string,
    connId: string,
  ) {
    this.id = connId;
    this.lock = sessionLockName(env.database, name);
    const ended = (err?: Error): void => {
      if (this._ended) return;
      this._ended = true;
      const l = this.endListener;
      this.endListener = undefined;
      l?.(`the connection holding this process's session (connection ${connId}) closed${err === undefined ? '' : `: ${errorMessage(err)}`}`);
    };
    c.on('error', (err) => ended(err));
    c.on('end', () => ended());
    // The session alone must not keep a process alive: a holder that exits without releasing
    // ends its term with its connection, as any death does.
    c.stream?.unref?.();
  }

  /**
   * @throws {LivenessError} a proxy in between, or server settings that could end a live holder's session within its TTL
   * @throws {StoreUnavailableError} the connection could not be made
   */
  static async open(env: SessionEnv, name: string, ttlMs: number, options?: CallOptions): Promise<MysqlLeaseSession> {
    options?.signal?.throwIfAborted();
    const c = env.connect();
    c.on('error', () => {}); // until the session listens: a failed connect rejects the first query
    try {
      // An idle session must never be ended for being idle: that would end a live holder's term.
      // MariaDB: no statement time limit on a follower's lock wait.
      await q(c, `${env.setupSql}; SET SESSION wait_timeout = ${IDLE_FOREVER_S} /*M!100100 , max_statement_time = 0 */`, [], 5000);
      const rows = (await q(
        c,
        `SELECT CONNECTION_ID() AS id, @@port AS port, @@session.wait_timeout AS wt,
                (SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()) AS client
           /*M!100303 , @@tcp_keepalive_interval AS itv, @@tcp_keepalive_probes AS cnt */`,
        [],
        5000,
      )) as Record<string, unknown>[];
      const row = rows[0]!;
      const id = String(row['id']);
      if (Number(row['port']) !== env.urlPort) {
        throw new LivenessError(
          'pooler',
          `liveness 'session' needs a direct connection to MySQL, and this one is not: the store connects to port ${env.urlPort}, the server says it listens on ${String(row['port'])} ` +
            "(a proxy such as ProxySQL or MaxScale in between). Through a proxy the connection's session is not this process's: it can outlive the process, or move under it. " +
            "Give the store a direct URL of the primary, or use liveness 'ttl'",
        );
      }
      // The client port the server sees (PROCESSLIST's HOST is "address:port" over TCP) must be
      // this socket's own: a proxy connects from its own port, whatever port it listens on (one on
      // a host of its own listens on 3306 as its server does, and the comparison above passes it).
      const seen = /:(\d+)$/.exec(String(row['client'] ?? ''))?.[1];
      const localPort = c.stream?.localPort;
      if (seen !== undefined && typeof localPort === 'number' && Number(seen) !== localPort) {
        throw new LivenessError(
          'pooler',
          `liveness 'session' needs a direct connection to MySQL, and this one is not: the server sees this connection come from client port ${seen}, ` +
            `this process's socket is on port ${localPort} (a proxy such as ProxySQL or MaxScale, or address translation, in between). ` +
            "Through a proxy the connection's session is not this process's: it can outlive the process, or move under it. " +
            "Give the store a direct URL of the primary, or use liveness 'ttl'",
        );
      }
      const waitMs = Number(row['wt']) * 1000;
      const giveUpMs = mysqlGiveUpMs({ interval: Number(row['itv'] ?? 0), probes: Number(row['cnt'] ?? 0) });
      if (waitMs <= ttlMs || giveUpMs <= ttlMs) {
        const keepalive = row['itv'] === undefined ? `the server host's TCP keepalive (assumed Linux's ${OS_INTERVAL_S}s x ${OS_PROBES})` : `tcp_keepalive_interval=${String(row['itv'])}s, tcp_keepalive_probes=${String(row['cnt'])} (0: the OS's, assumed ${OS_INTERVAL_S}s x ${OS_PROBES})`;
        throw new LivenessError(
          'keepalive',
          `liveness 'session' refused for lease "${name}": MySQL could end this process's silent session after ${Math.min(waitMs, giveUpMs)}ms ` +
            `(wait_timeout=${String(row['wt'])}s; ${keepalive}), which is not longer than the TTL (${ttlMs}ms): in a partition the store would end the term of a holder that still believes it leads. ` +
            "Raise the server's keepalive interval x probes above the TTL, use a shorter TTL, or liveness 'ttl'",
        );
      }
      const session = new MysqlLeaseSession(c, env, name, id);
      session.locked = Number(((await q(c, 'SELECT GET_LOCK(?, 0) AS ok', [session.lock], 5000)) as { ok: unknown }[])[0]?.ok) === 1;
      // Two statements, one connection: a proxy that multiplexes hands each statement to whichever
      // server connection is free, and the session lock would be no one's.
      const again = (await q(c, 'SELECT CONNECTION_ID() AS id', [], 5000)) as { id: unknown }[];
      if (String(again[0]?.id) !== id) {
        await session.close();
        throw new LivenessError(
          'pooler',
          `liveness 'session' needs a direct connection to MySQL: two statements on one connection ran on connections ${id} and ${String(again[0]?.id)} ` +
            "(a multiplexing proxy). Give the store a direct URL of the primary, or use liveness 'ttl'",
        );
      }
      return session;
    } catch (err) {
      c.destroy();
      if (err instanceof LivenessError) throw err;
      throw env.mapError(err);
    }
  }

  get ended(): boolean {
    return this._ended;
  }

  get holdsLock(): boolean {
    return this.locked && !this._ended;
  }

  onEnd(listener: (detail: string) => void): void {
    if (this._ended) return;
    this.endListener = listener;
  }

  waitForLock(ms: number): Promise<void> {
    if (this.locked || this._ended) return new Promise<void>(() => {});
    if (this.locking === undefined) {
      const until = performance.now() + ms;
      this.locking = (async () => {
        while (!this._ended && performance.now() < until) {
          const slice = Math.max(0.001, Math.min(LOCK_WAIT_SLICE_S, (until - performance.now()) / 1000));
          try {
            const r = (await q(this.c, 'SELECT GET_LOCK(?, ?) AS ok', [this.lock, slice], (slice + 5) * 1000)) as { ok: unknown }[];
            if (Number(r[0]?.ok) === 1) {
              this.locked = true;
              return true;
            }
          } catch {
            return false;
          }
        }
        return false;
      })().finally(() => {
        this.locking = undefined;
      });
    }
    return this.locking.then((granted) => (granted ? undefined : new Promise<void>(() => {})));
  }

  async release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    this.endListener = undefined;
    if (!this.locked) {
      await this.close();
      return this.env.release(req, options);
    }
    try {
      options?.signal?.throwIfAborted();
      if (this._ended) throw new StoreUnavailableError('the session connection had already closed; the store ends the term when a follower claims it');
      // One round trip: the release locks and ends the row, COMMIT, then the session lock goes.
      // A follower the lock wakes ends nothing: it finds the row released (or handed over).
      this.c.stream?.ref?.();
      const one = this.env.releaseStatements(req);
      // The session lock goes only after COMMIT (as the doorbell's does, ./release.ts): a waiter it
      // wakes must not read the row before the release is durable.
      const sql = ['START TRANSACTION', ...one.sql, 'COMMIT', 'DO RELEASE_LOCK(?)', 'SELECT @lh_prev AS prev'].join(';\n');
      let r: unknown[];
      try {
        r = (await q(this.c, sql, [...one.values, this.lock], 10_000)) as unknown[];
      } catch (err) {
        await q(this.c, 'ROLLBACK', [], 5000).catch(() => {});
        throw err;
      }
      await this.env.released(req.name);
      return (r[r.length - 1] as { prev: string | null }[])[0]?.prev != null;
    } catch (err) {
      throw this.env.mapError(err);
    } finally {
      await this.close();
    }
  }

  async close(): Promise<void> {
    this.endListener = undefined;
    if (this._ended && this.locking === undefined) {
      this.c.destroy();
      return;
    }
    this._ended = true;
    this.c.stream?.ref?.(); // until the goodbye is written
    if (this.locking !== undefined) {
      // A lock wait in flight would hold the goodbye back for its slice.
      this.c.destroy();
      return;
    }
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.c.destroy();
        resolve();
      }, 2000);
      this.c.end(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }
}
