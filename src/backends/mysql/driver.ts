/**
 * Loading `mysql2` (an optional peer dependency, loaded on first use) and the connections
 * leasehold makes with it: one small pool per server, every session set up the same way before
 * its first statement, and a multi-host URL that moves to the next server when one is down or
 * read-only.
 */
import { createRequire } from 'node:module';
import { ConfigError, StoreUnavailableError } from '../../core/errors.js';
import { mapMysqlError } from './errors.js';
import { DEFAULT_MAX_PACKET, inlinedBound } from './packet.js';
import type { MysqlTarget } from './url.js';

/** The parts of mysql2's callback API leasehold uses. */
export interface MysqlConnectionLike {
  query(options: { sql: string; values?: unknown; timeout?: number }, cb: (err: Error | null, result?: unknown) => void): unknown;
  release?(): void;
  destroy?(): void;
}
interface MysqlPoolLike {
  getConnection(cb: (err: Error | null, conn?: MysqlConnectionLike & { release(): void; destroy(): void }) => void): void;
  on(event: 'connection', listener: (conn: MysqlConnectionLike) => void): unknown;
  end(cb?: (err?: Error) => void): void;
}
interface Mysql2Module {
  createPool(config: Record<string, unknown>): MysqlPoolLike;
  createConnection(config: Record<string, unknown>): unknown;
  /** How mysql2 inlines values client-side (its `query` sends the result). */
  format?(sql: string, values: unknown): string;
}

export function loadMysql2(): Mysql2Module {
  try {
    return createRequire(import.meta.url)('mysql2') as Mysql2Module;
  } catch (err) {
    throw new ConfigError('the MySQL store needs the "mysql2" package: npm install mysql2', { cause: err });
  }
}

/** What the server is, read once per session: MariaDB and MySQL differ in a few settings. */
interface ServerInfo {
  version: string;
  mariadb: boolean;
  /** The largest packet the server accepts (./packet.ts). */
  maxPacket: number;
}

/** Runs one query (or several, `;`-separated, in one round trip) on a connection. */
export function run(conn: MysqlConnectionLike, sql: string, values: unknown, timeoutMs: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    conn.query({ sql, values, timeout: timeoutMs }, (err, result) => (err === null ? resolve(result) : reject(err)));
  });
}

/**
 * Every session of the store, set up alike: reads committed data without gap locks (no
 * deadlocks from two contenders inserting into one gap), waits for a row lock at most
 * lockWaitSeconds, and on MariaDB loses its connection when frozen inside a transaction.
 * `/*M!100300 ... *\/` runs on MariaDB 10.3+ only; MySQL reads it as a comment. Two statements.
 */
export function sessionSetupSql(options: Pick<MysqlPoolOptions, 'lockWaitSeconds' | 'idleTransactionSeconds'>): string {
  return (
    'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; ' +
    `SET SESSION innodb_lock_wait_timeout = ${options.lockWaitSeconds}, time_zone = '+00:00'` +
    ` /*M!100300 , idle_transaction_timeout = ${options.idleTransactionSeconds} */`
  );
}

/**
 * mysql2's options for every connection leasehold opens to one server, pooled or not: the URL's
 * TLS and the store's connect timeout reach the named-lock and session connections exactly as
 * they reach the pool (each once had its own copy, and verify-ca's skipped name check and the
 * store's connectTimeoutMs option reached only the pool).
 */
function connectionConfig(t: MysqlTarget, host: string, port: number, connectTimeoutMs: number): Record<string, unknown> {
  const ssl =
    t.ssl === undefined
      ? undefined
      : {
          ...t.ssl.material,
          rejectUnauthorized: t.ssl.mode !== 'require',
          // mysql2 3.x checks the certificate's name only when asked (verifyIdentity, off by
          // default): without it verify-full checked the CA alone and took any name.
          verifyIdentity: t.ssl.mode === 'verify-full',
          // verify-ca: the chain is checked, the name in the certificate is not (for a mysql2
          // that leaves the name check to Node's default).
          ...(t.ssl.mode === 'verify-ca' ? { checkServerIdentity: () => undefined } : {}),
        };
  return {
    host,
    port,
    user: t.user,
    ...(t.password === undefined ? {} : { password: t.password }),
    database: t.database,
    ...(ssl === undefined ? {} : { ssl }),
    connectTimeout: t.connectTimeoutMs ?? connectTimeoutMs,
    enableKeepAlive: true,
    // A claim is two round trips of several statements each (./claim.ts), a release on a lock
    // or session connection one (./release.ts, ./session.ts).
    multipleStatements: true,
    supportBigNumbers: true,
    bigNumberStrings: true,
    charset: 'utf8mb4',
  };
}

/** `host:port` as ./freed.ts and the connector write it (unbracketed, even for IPv6): split at the last colon. */
export function splitHostPort(hostPort: string): [string, number] {
  const i = hostPort.lastIndexOf(':');
  return [hostPort.slice(0, i), Number(hostPort.slice(i + 1))];
}

interface MysqlPoolOptions {
  /** Per statement; the connection is dropped when it passes (the outcome is then unknown). */
  queryTimeoutMs: number;
  connectTimeoutMs: number;
  /** innodb_lock_wait_timeout for leasehold's sessions, whole seconds >= 1. */
  lockWaitSeconds: number;
  /**
   * MariaDB's idle_transaction_timeout for leasehold's sessions, whole seconds: a process frozen
   * inside a transaction (between the two round trips of a claim, or inside a fenced write)
   * loses its connection, and so its row locks, after this long. MySQL 8 has no equivalent.
   */
  idleTransactionSeconds: number;
  /** Connections per server. */
  max: number;
}

/**
 * The pool each error came from. Calls in flight on a server that died all fail, some only at
 * their timeout, long after the first of them moved the store on: only an error from the pool
 * in use now may move it again (otherwise two failures would skip the next host, and a late one
 * would tear down the pool of the server just found).
 */
const errorPool = new WeakMap<object, MysqlPoolLike>();

function tag(err: unknown, pool: MysqlPoolLike): void {
  if (typeof err === 'object' && err !== null && !errorPool.has(err)) errorPool.set(err, pool);
}

/**
 * The connections to one store URL. With several hosts, in order: the first that accepts a
 * connection and is writable serves, and a connection error or a read-only answer there moves
 * the next call to the next host (a promoted replica, after a failover).
 */
export class MysqlConnector {
  private pool: MysqlPoolLike | undefined;
  private index = 0;
  private closed = false;
  /** Set by the first session of the current pool. */
  server: ServerInfo | undefined;

  constructor(
    private readonly mysql: Mysql2Module,
    readonly target: MysqlTarget,
    private readonly options: MysqlPoolOptions,
  ) {}

  get timeoutMs(): number {
    return this.options.queryTimeoutMs;
  }

  /** The host the next call goes to, `host:port`. */
  get current(): string {
    // Unbracketed, even for IPv6: splitHostPort splits it at the last colon.
    const h = this.target.hosts[this.index]!;
    return `${h.host}:${h.port}`;
  }

  private poolFor(): MysqlPoolLike {
    if (this.pool !== undefined) return this.pool;
    const h = this.target.hosts[this.index]!;
    const pool = this.mysql.createPool({
      ...connectionConfig(this.target, h.host, h.port, this.options.connectTimeoutMs),
      connectionLimit: this.options.max,
      maxIdle: this.options.max,
      idleTimeout: 30_000,
    });
    pool.on('connection', (conn) => {
      // Every statement's error is tagged with this pool, and a read-only answer moves the store
      // from here whoever ran the statement (a switchover's primary set read-only answers 1290
      // to a user without READ ONLY ADMIN; the session check below only sees @@read_only).
      const query = conn.query.bind(conn);
      conn.query = (options, cb) =>
        query(options, (err, result) => {
          if (err !== null) {
            tag(err, pool);
            const errno = (err as { errno?: unknown }).errno;
            if (errno === 1290 || errno === 1836) this.failed(err);
          }
          cb(err, result);
        });
      // Queued ahead of the statement the connection was taken for (see sessionSetupSql).
      const sql = sessionSetupSql(this.options) + '; SELECT VERSION() AS v, @@read_only AS ro, @@max_allowed_packet AS mp';
      conn.query({ sql, timeout: this.options.queryTimeoutMs }, (err, result) => {
        (conn as { __lhReady?: boolean }).__lhReady = true;
        if (err !== null) return;
        const row = ((result as unknown[])[2] as { v: string; ro: number | string; mp: number | string }[])[0]!;
        this.server = { version: row.v, mariadb: /mariadb/i.test(row.v), maxPacket: Number(row.mp) };
        if (Number(row.ro) === 1) (conn as { __lhReadOnly?: boolean }).__lhReadOnly = true;
      });
    });
    this.pool = pool;
    return pool;
  }

  /** A connection of the current host's pool, session set up. */
  async connection(): Promise<MysqlConnectionLike & { release(): void; destroy(): void }> {
    if (this.closed) throw new StoreUnavailableError('the MySQL store is closing');
    const pool = this.poolFor();
    let conn;
    try {
      conn = await new Promise<MysqlConnectionLike & { release(): void; destroy(): void }>((resolve, reject) => {
        pool.getConnection((err, c) => (err === null ? resolve(c!) : reject(err)));
      });
    } catch (err) {
      tag(err, pool);
      this.failed(err);
      throw mapMysqlError(err, this.target.database);
    }
    // A new session: with several hosts, wait for its setup to say whether the server is a
    // read-only replica, which cannot take a claim (one more round trip, once per connection).
    if (this.target.hosts.length > 1 && (conn as { __lhReady?: boolean }).__lhReady !== true) {
      await run(conn, 'DO 1', undefined, this.options.queryTimeoutMs).catch(() => {});
    }
    if ((conn as { __lhReadOnly?: boolean }).__lhReadOnly === true && this.target.hosts.length > 1) {
      conn.destroy();
      const err = Object.assign(new Error(`${this.current} is read-only (a replica)`), { errno: 1290 });
      tag(err, pool);
      this.failed(err);
      throw mapMysqlError(err, this.target.database);
    }
    return conn;
  }

  /**
   * Runs `sql` on a connection of its own and gives the connection back. An error that leaves
   * the session's state unknown (a timeout, a dropped connection) destroys it.
   */
  async query(sql: string, values?: unknown): Promise<unknown> {
    const conn = await this.connection();
    try {
      await this.fits(conn, sql, values);
      const r = await run(conn, sql, values, this.options.queryTimeoutMs);
      conn.release();
      return r;
    } catch (err) {
      if (typeof (err as { errno?: unknown }).errno === 'number' && (err as { fatal?: boolean }).fatal !== true) conn.release();
      else conn.destroy();
      this.failed(err);
      throw err;
    }
  }

  /**
   * Refuses, before it is sent, a statement larger than the server's max_allowed_packet. Sent, it
   * is answered with error 1153 only when the server's answer arrives before the client is done
   * writing: MariaDB closes the connection on reading the packet's length, and mysql2, still
   * writing, reports ECONNRESET, which reads as an unavailable server and is retried in vain (every
   * statement over 4 MiB on a 4 MiB server here). Rejects with an error mapMysqlError takes as 1153.
   * @internal the connector's queries and ./batch.ts.
   */
  async fits(conn: MysqlConnectionLike, sql: string, values: unknown): Promise<void> {
    const bound = inlinedBound(sql, values);
    if (bound <= DEFAULT_MAX_PACKET) return; // every server in use takes this much
    // A new session's setup (which reads the limit) is queued ahead of anything sent on it.
    if (this.server === undefined) await run(conn, 'DO 1', undefined, this.options.queryTimeoutMs);
    const max = this.server?.maxPacket;
    if (max === undefined || bound <= max) return;
    const size = this.mysql.format === undefined ? bound : Buffer.byteLength(this.mysql.format(sql, values), 'utf8');
    // The packet carries one command byte before the statement.
    if (size + 1 <= max) return;
    throw Object.assign(new Error(`the statement is ${size + 1} bytes once its values are inlined; the server's max_allowed_packet is ${max}`), {
      errno: 1153,
      code: 'ER_NET_PACKET_TOO_LARGE',
    });
  }

  /** After an error that says this host cannot serve: the next call tries the next host. */
  failed(err: unknown): void {
    if (this.target.hosts.length < 2) return;
    const errno = (err as { errno?: unknown }).errno;
    const code = (err as { code?: unknown }).code;
    const hostDown = errno === 1290 || errno === 1836 || (err as { fatal?: boolean }).fatal === true || typeof code === 'string' && /^E[A-Z]+$/.test(code);
    if (!hostDown) return;
    const from = typeof err === 'object' && err !== null ? errorPool.get(err) : undefined;
    if (from !== undefined && from !== this.pool) return;
    const old = this.pool;
    this.pool = undefined;
    this.server = undefined;
    this.index = (this.index + 1) % this.target.hosts.length;
    old?.end(() => {});
  }

  /**
   * A connection of its own, outside the pool, to `hostPort` (the current host by default): the
   * named-lock connections (./freed.ts) and a lease's session (./session.ts). Set up by the
   * caller (sessionSetupSql); configured as the pool's connections are.
   */
  connect<C>(hostPort = this.current): C {
    const [host, port] = splitHostPort(hostPort);
    return this.mysql.createConnection(connectionConfig(this.target, host, port, this.options.connectTimeoutMs)) as C;
  }

  async close(): Promise<void> {
    this.closed = true;
    const p = this.pool;
    this.pool = undefined;
    if (p !== undefined) await new Promise<void>((resolve) => p.end(() => resolve()));
  }
}
