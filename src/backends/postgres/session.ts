/**
 * Liveness 'session' on PostgreSQL (issue 32; sql/011-session-liveness.ts has the SQL side, and
 * docs/liveness.md the safety argument). One dedicated connection per contended or held lease:
 * it takes the lease's session lock (a session-level advisory lock) and waits on it while
 * following; the claim records its backend pid with the term; the backend's exit (the holder's
 * process died, or the server ended the session) releases the lock, which wakes one follower at
 * once, and its claim ends the orphaned term. Before the first claim the connection is checked:
 * refused through a pooler, and when the server's TCP keepalive could end a live holder's
 * session before the holder stands down on its own.
 */
import { LivenessError, StoreUnavailableError, errorMessage } from '../../core/errors.js';
import type { CallOptions, LeaseSession, ReleaseRequest } from '../../core/port.js';
import type { PgListenClientLike } from './store.js';
import { releaseStatement } from './release.js';

/**
 * A lock wait is one statement of at most this long, repeated until the follower's wait ends:
 * shorter than the query timeouts of the clients leasehold makes (5 s), which would otherwise
 * end the wait as an error.
 */
const LOCK_WAIT_SLICE_MS = 3000;

/** What the store gives a session: a connection of its own, and what to check it against. */
interface SessionEnv {
  /** The quoted schema. */
  s: string;
  connect(): Promise<PgListenClientLike>;
  /** The port the store's URL names (undefined for a pool of the caller's): a server that says another is behind a pooler or proxy. */
  urlPort: number | undefined;
  mapError(err: unknown): Error;
  /** The store's own release (the pool's), for a term whose session lock this session never got. */
  release(req: ReleaseRequest, options?: CallOptions): Promise<boolean>;
}

/**
 * The shortest time after which the server could end a silent session of a live holder (a
 * partition: no packet either way). Keepalive probes start after `idle` seconds of silence, so in
 * the worst case the first probe goes out just as the partition starts; the server then gives
 * up after `count` unanswered probes `interval` apart, or, with tcp_user_timeout U (ms), at the
 * first probe check at which U has passed since the last answer, which can be as early as one
 * interval when U <= idle + interval (Linux tcp_keepalive_timer). Infinity when the server
 * does not use TCP for this connection (a Unix socket: one host, no partition).
 */
export function serverGiveUpMs(settings: { idle: number; interval: number; count: number; userTimeoutMs: number; tcp: boolean }): number {
  if (!settings.tcp) return Infinity;
  const { idle, interval, count, userTimeoutMs } = settings;
  if (interval <= 0 || count <= 0) return 0; // unknown: treat as "could be at once"
  if (userTimeoutMs <= 0) return interval * count * 1000;
  const probes = Math.max(1, Math.ceil((userTimeoutMs / 1000 - idle) / interval));
  return interval * Math.min(count, probes) * 1000;
}

export class PgLeaseSession implements LeaseSession {
  readonly id: string;
  private _ended = false;
  private endListener: ((detail: string) => void) | undefined;
  private locking: Promise<boolean> | undefined;
  private locked = false;

  private constructor(
    private readonly client: PgListenClientLike,
    private readonly env: SessionEnv,
    private readonly name: string,
    pid: number,
  ) {
    this.id = String(pid);
    const ended = (err?: Error): void => {
      if (this._ended) return;
      this._ended = true;
      const l = this.endListener;
      this.endListener = undefined;
      l?.(`the connection holding this process's session (backend ${pid}) closed${err === undefined ? '' : `: ${errorMessage(err)}`}`);
    };
    client.on('error', (err) => ended(err));
    client.on('end', () => ended());
    // As a LISTEN socket: the session alone must not keep a process alive. A holder that would
    // exit without releasing (its work done, the lease forgotten) exits, and its term ends with
    // its connection, as any death's does. A contender is kept alive by its contention.
    streamOf(client)?.unref?.();
  }

  /**
   * @throws {LivenessError} a pooler or proxy in between, or keepalive settings that could end a live holder's session within its TTL
   * @throws {StoreUnavailableError} the connection could not be made
   */
  static async open(env: SessionEnv, name: string, ttlMs: number, options?: CallOptions): Promise<PgLeaseSession> {
    options?.signal?.throwIfAborted();
    let client: PgListenClientLike;
    try {
      client = await env.connect();
    } catch (err) {
      throw env.mapError(err);
    }
    try {
      const first = await client.query(
        `SELECT pg_backend_pid() AS pid, inet_server_port() AS port, inet_server_addr() IS NOT NULL AS tcp, inet_client_port() AS client_port,
                current_setting('tcp_keepalives_idle')::int AS idle, current_setting('tcp_keepalives_interval')::int AS interval,
                current_setting('tcp_keepalives_count')::int AS count, current_setting('tcp_user_timeout')::int AS user_timeout`,
      );
      const row = first.rows[0]!;
      const pid = Number(row['pid']);
      const port = row['port'] == null ? undefined : Number(row['port']);
      if (env.urlPort !== undefined && port !== undefined && port !== env.urlPort) {
        throw new LivenessError(
          'pooler',
          `liveness 'session' needs a direct connection to PostgreSQL, and this one is not: the store's URL names port ${env.urlPort}, the server says it listens on ${port} ` +
            "(a pooler such as PgBouncer, or a proxy, in between). Through a pooler the connection's session is not this process's: it can outlive the process, or be lost while the process lives. " +
            "Give the store a direct URL of the primary, or use liveness 'ttl'",
        );
      }
      // The port the server sees us connect from must be our socket's own: a pooler or proxy
      // connects from its own port, whatever port it listens on (PgBouncer on a host of its own
      // listens on 5432 as its server does, and the port comparison above passes it).
      const clientPort = row['client_port'] == null ? undefined : Number(row['client_port']);
      const localPort = streamOf(client)?.localPort;
      if (clientPort !== undefined && typeof localPort === 'number' && clientPort !== localPort) {
        throw new LivenessError(
          'pooler',
          `liveness 'session' needs a direct connection to PostgreSQL, and this one is not: the server sees this connection come from client port ${clientPort}, ` +
            `this process's socket is on port ${localPort} (a pooler such as PgBouncer, a proxy or address translation in between). ` +
            "Through a pooler the connection's session is not this process's: it can outlive the process, or be lost while the process lives. " +
            "Give the store a direct URL of the primary, or use liveness 'ttl'",
        );
      }
      const giveUpMs = serverGiveUpMs({
        idle: Number(row['idle']),
        interval: Number(row['interval']),
        count: Number(row['count']),
        userTimeoutMs: Number(row['user_timeout']),
        tcp: row['tcp'] === true,
      });
      if (giveUpMs <= ttlMs) {
        throw new LivenessError(
          'keepalive',
          `liveness 'session' refused for lease "${name}": PostgreSQL could end this process's session after ${giveUpMs}ms without an answer ` +
            `(tcp_keepalives_idle=${String(row['idle'])}s, tcp_keepalives_interval=${String(row['interval'])}s, tcp_keepalives_count=${String(row['count'])}, tcp_user_timeout=${String(row['user_timeout'])}ms), ` +
            `which is not longer than the TTL (${ttlMs}ms): in a partition the store would end the term of a holder that still believes it leads. ` +
            "Raise the server's tcp_keepalives_interval x tcp_keepalives_count (and tcp_user_timeout, or 0) above the TTL, use a shorter TTL, or liveness 'ttl'",
        );
      }
      // An idle session must not be ended for being idle: that would end a live holder's term.
      await client.query(`SELECT set_config('idle_session_timeout', '0', false)`).catch(() => {});
      const session = new PgLeaseSession(client, env, name, pid);
      session.locked = (await client.query(`SELECT ${env.s}.session_try_lock($1) AS ok`, [name])).rows[0]?.['ok'] === true;
      // Two statements, one backend: a pooler in transaction or statement mode hands each statement
      // to whichever server connection is free, and its session lock would be no one's.
      const again = await client.query(`SELECT pg_backend_pid() AS pid`);
      if (Number(again.rows[0]?.['pid']) !== pid) {
        throw new LivenessError(
          'pooler',
          `liveness 'session' needs a direct connection to PostgreSQL: two statements on one connection ran on backends ${pid} and ${String(again.rows[0]?.['pid'])} ` +
            "(a pooler in transaction or statement mode, such as PgBouncer). Give the store a direct URL of the primary, or use liveness 'ttl'",
        );
      }
      return session;
    } catch (err) {
      await PgLeaseSession.destroy(client);
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
          const slice = Math.max(1, Math.min(LOCK_WAIT_SLICE_MS, Math.ceil(until - performance.now())));
          try {
            await this.client.query(`SELECT set_config('lock_timeout', $2, false), ${this.env.s}.session_wait_lock($1)`, [this.name, `${slice}ms`]);
            this.locked = true;
            return true;
          } catch (err) {
            // 55P03 lock_not_available: the slice ran out with the lock still held by another session.
            if ((err as { code?: unknown }).code !== '55P03') return false;
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
      // A term the store did not tie to this session: released as a 'ttl' term is.
      await this.close();
      return this.env.release(req, options);
    }
    try {
      options?.signal?.throwIfAborted();
      if (this._ended) throw new StoreUnavailableError('the session connection had already closed; the store ends the term when a follower claims it');
      // One transaction: the release locks and ends the row, then the session lock goes, then
      // COMMIT. A follower the unlock wakes ends nothing: its claim waits for the row and then
      // finds it released (or handed over), not orphaned.
      streamOf(this.client)?.ref?.(); // the release must be sent before the process may exit
      await this.client.query('BEGIN');
      const r = await this.client.query(releaseStatement(this.env.s), [req.name, req.holder, [...req.expect]]);
      await this.client.query('SELECT pg_advisory_unlock_all()');
      await this.client.query('COMMIT');
      return r.rows[0]?.['released'] === true;
    } catch (err) {
      throw this.env.mapError(err);
    } finally {
      await this.close();
    }
  }

  async close(): Promise<void> {
    this.endListener = undefined;
    this._ended = true;
    await PgLeaseSession.destroy(this.client);
  }

  /** Ends the connection for good (never back into a pool: its session lock must go with it). */
  private static async destroy(c: PgListenClientLike): Promise<void> {
    streamOf(c)?.ref?.(); // until the goodbye is written
    try {
      if (c.release !== undefined) c.release(true);
      else await c.end?.();
    } catch {
      // already closed
    }
  }
}

function streamOf(c: PgListenClientLike): { ref?: () => void; unref?: () => void; localPort?: number } | undefined {
  return (c as unknown as { connection?: { stream?: { ref?: () => void; unref?: () => void; localPort?: number } } }).connection?.stream;
}
