/**
 * libpq's multi-host URLs (`postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write`,
 * or `?host=h1,h2&port=5432,5433`) for node-postgres, which connects to one host only.
 *
 * As libpq does: the hosts are tried in order, each with its own connect timeout, and the
 * first that accepts the connection and satisfies target_session_attrs is used. Unlike libpq,
 * leasehold's default with several hosts is read-write (libpq's is any): a lease needs writes,
 * and a standby that accepts the connection would only answer every claim with an error.
 *
 * One pool at a time, on the host chosen; a connection-level failure, or a server that says it
 * is read-only (SQLSTATE 25006: demoted, or a standby), drops that pool, and the next call
 * chooses again from the top of the list: after a failover the store finds the new primary.
 */
import { ConfigError, StoreUnavailableError } from '../../core/errors.js';
import type { PgListenClientLike, PgPoolLike, PgResultLike } from './store.js';

/** The target_session_attrs values a lease store can use (libpq's others only pick read-only servers). */
type TargetSessionAttrs = 'any' | 'read-write' | 'primary';

/** Where to connect: one single-host connection string per host, in the URL's order, and what a host must be. */
export interface PgTarget {
  urls: string[];
  attrs: TargetSessionAttrs;
}

const USABLE_ATTRS: readonly TargetSessionAttrs[] = ['read-write', 'primary', 'any'];
const READ_ONLY_ATTRS = ['read-only', 'standby', 'prefer-standby'];

/**
 * target_session_attrs= as a lease store can use it.
 * @param several whether the URL names more than one host (then the default is read-write)
 * @throws {ConfigError} for libpq's read-only choices and for anything libpq does not know
 */
export function parseTargetSessionAttrs(value: string | null, several: boolean): TargetSessionAttrs {
  if (value === null) return several ? 'read-write' : 'any';
  if ((USABLE_ATTRS as readonly string[]).includes(value)) return value as TargetSessionAttrs;
  if (READ_ONLY_ATTRS.includes(value)) {
    throw new ConfigError(
      `target_session_attrs=${value} picks a server that cannot take writes, and every claim of a lease is a write; use target_session_attrs=read-write (or primary)`,
    );
  }
  throw new ConfigError(`target_session_attrs=${JSON.stringify(value)} is not a value libpq knows; use read-write (the default with several hosts), primary or any`);
}

// A host as libpq's URL host list writes it: a name, an IPv4 address or a [bracketed] IPv6 one,
// with an optional port.
const HOST_ENTRY = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]+)(?::(\d*))?$/;

/** One entry of a host list, checked: a host and, when given, a port in range. @throws {ConfigError} */
export function parseHostEntry(entry: string, list: string): { host: string; port: string } {
  if (entry === '') throw new ConfigError(`the host list ${JSON.stringify(list)} has an empty entry; write host1:5432,host2:5432`);
  const m = HOST_ENTRY.exec(entry);
  if (m === null) throw new ConfigError(`${JSON.stringify(entry)} in the host list ${JSON.stringify(list)} is not a host[:port]; write host1:5432,host2:5432`);
  const port = m[2] ?? '';
  if (port !== '' && !(Number(port) >= 1 && Number(port) <= 65535)) {
    throw new ConfigError(`${JSON.stringify(entry)} in the host list ${JSON.stringify(list)} has port ${port}; give the port the server listens on (1-65535)`);
  }
  return { host: m[1]!, port };
}

/** The host a single-host connection string names, for messages. */
function hostOf(url: string): string {
  try {
    const u = new URL(url);
    const h = u.searchParams.get('host') ?? u.hostname;
    const p = u.searchParams.get('port') ?? u.port;
    return p === '' ? h : `${h}:${p}`;
  } catch {
    return '?';
  }
}

/** The host list of a target, for descriptions: `h1:5432, h2:5433`. */
export function describeHosts(target: PgTarget): string {
  return target.urls.map(hostOf).join(', ');
}

interface PgClient extends PgListenClientLike {
  connect(): Promise<void>;
  end(): Promise<void>;
}

export interface PgDriver {
  Pool: new (config: Record<string, unknown>) => PgPoolLike & { on(event: 'error', l: (e: Error) => void): unknown; end(): Promise<void> };
  Client: new (config: Record<string, unknown>) => PgClient;
}

/**
 * A connected client on the first host of `target` that accepts a connection within
 * `perHostMs` and satisfies its target_session_attrs.
 * @param config the rest of the client's configuration (keepAlive, ...)
 * @param mapError the store's error mapping, to tell a login or configuration error from an outage
 * @throws {StoreUnavailableError} listing each host and why it was passed over; a
 *   {@link ConfigError} instead when every host refused the same way for a reason waiting will not fix
 */
export async function connectFirst(
  pg: PgDriver,
  target: PgTarget,
  config: Record<string, unknown>,
  perHostMs: number,
  mapError: (err: unknown) => Error,
): Promise<{ client: PgClient; index: number }> {
  const why: string[] = [];
  const errors: Error[] = [];
  for (const [index, url] of target.urls.entries()) {
    const c = new pg.Client({ ...config, connectionString: url, connectionTimeoutMillis: perHostMs, query_timeout: perHostMs });
    c.on('error', () => {});
    try {
      await c.connect();
      if (target.attrs !== 'any') {
        const r = await c.query<{ standby: boolean; ro: string }>(`SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') AS ro`);
        const { standby, ro } = r.rows[0]!;
        // A standby is read-only too: read-write passes over both, primary only the standby.
        const unfit = standby ? 'a standby (in recovery)' : target.attrs === 'read-write' && ro === 'on' ? 'read-only (default_transaction_read_only is on)' : undefined;
        if (unfit !== undefined) {
          why.push(`${hostOf(url)}: ${unfit}, not ${target.attrs}`);
          errors.push(new StoreUnavailableError(`${hostOf(url)} is ${unfit}`));
          await c.end().catch(() => {});
          continue;
        }
      }
      return { client: c, index };
    } catch (err) {
      const mapped = mapError(err);
      why.push(`${hostOf(url)}: ${(err as Error).message ?? String(err)}`);
      errors.push(mapped);
      await c.end().catch(() => {});
    }
  }
  const list = why.join('; ');
  const cause = errors.length === 1 ? errors[0] : new AggregateError(errors, list);
  if (errors.every((e) => e instanceof ConfigError)) throw new ConfigError(`no PostgreSQL host of the store URL could be used (${list}); ${errors[0]!.message}`, { cause });
  const wanted = target.attrs === 'any' ? 'accepted a connection' : `is ${target.attrs}`;
  throw new StoreUnavailableError(
    `no PostgreSQL host of the store URL ${wanted} (${list}); this is retryable: a failover may be in progress, or check the servers`,
    { cause },
  );
}

// What says the chosen host is gone, or no longer takes writes: the pool on it is dropped. Lock
// contention and statement timeouts (the host is fine, just busy) keep it.
const LEAVE_SQLSTATE = /^(25006|08|57P0)/;
const NET_CODES = /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN|ECONNABORTED)$/;
const DRIVER_GONE = /Connection terminated|connection timeout|timeout exceeded when trying to connect|Query read timeout|not queryable|Client was closed|socket hang up/i;

/** Whether an error from the chosen host means the next call should choose again. */
export function leavesHost(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (LEAVE_SQLSTATE.test(code) || NET_CODES.test(code)) return true;
  return !/^[0-9A-Z]{5}$/.test(code) && typeof e?.message === 'string' && DRIVER_GONE.test(e.message);
}

/**
 * A pool over a multi-host target: a `pg.Pool` on the host {@link connectFirst} chose, replaced
 * when {@link leavesHost} says that host is gone or read-only. The call that saw the error
 * still fails (its outcome is unknown, or it did not land): only later calls go elsewhere.
 */
export class FailoverPool implements PgPoolLike {
  private current: { pool: InstanceType<PgDriver['Pool']>; index: number } | undefined;
  private choosing: Promise<NonNullable<FailoverPool['current']>> | undefined;
  private ended = false;

  constructor(
    private readonly pg: PgDriver,
    private readonly target: PgTarget,
    private readonly poolConfig: Record<string, unknown>,
    private readonly perHostMs: number,
    private readonly mapError: (err: unknown) => Error,
  ) {}

  /** The host in use, as `host:port`, or undefined before the first call or after a drop. */
  get host(): string | undefined {
    return this.current === undefined ? undefined : hostOf(this.target.urls[this.current.index]!);
  }

  private chosen(): Promise<NonNullable<FailoverPool['current']>> {
    if (this.current !== undefined) return Promise.resolve(this.current);
    this.choosing ??= (async () => {
      // The probe connection is closed rather than handed to the pool: pg.Pool makes its own,
      // and choosing happens once per failover, not per call.
      const { client, index } = await connectFirst(this.pg, this.target, {}, this.perHostMs, this.mapError);
      await client.end().catch(() => {});
      const pool = new this.pg.Pool({ ...this.poolConfig, connectionString: this.target.urls[index] });
      pool.on('error', () => {});
      const cur = { pool, index };
      if (this.ended) {
        await pool.end().catch(() => {});
        throw new StoreUnavailableError('this PostgreSQL pool was ended');
      }
      this.current = cur;
      return cur;
    })().finally(() => {
      this.choosing = undefined;
    });
    return this.choosing;
  }

  private drop(cur: NonNullable<FailoverPool['current']>): void {
    if (this.current !== cur) return;
    this.current = undefined;
    // Clients still checked out finish (or fail) on their own; end() waits for them.
    void cur.pool.end().catch(() => {});
  }

  /**
   * A statement on a connection of the chosen host. When no connection could be made there (the
   * host is gone), the statement never went out: the host is chosen again and the statement
   * tried once more, so a call right after a failover does not fail for nothing. A statement that
   * went out and failed is never repeated here: its outcome is the caller's to judge.
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  async query<R extends Record<string, any> = Record<string, unknown>>(text: string, values?: unknown[]): Promise<PgResultLike<R>> {
    for (let attempt = 0; ; attempt++) {
      const cur = await this.chosen();
      let client;
      try {
        client = await cur.pool.connect();
      } catch (err) {
        if (!leavesHost(err)) throw err;
        this.drop(cur);
        if (attempt > 0) throw err;
        continue;
      }
      // A checked-out client has no error listener of the pool's: without one, a socket error would crash the process.
      const onError = (): void => {};
      client.on('error', onError);
      try {
        const r = await client.query<R>(text, values);
        client.release();
        return r;
      } catch (err) {
        // With the error: the pool discards this connection rather than lend it again.
        client.release(err as Error);
        if (leavesHost(err)) this.drop(cur);
        throw err;
      } finally {
        (client as { removeListener?: (e: string, l: () => void) => void }).removeListener?.('error', onError);
      }
    }
  }

  /** A checked-out client of the chosen host; as query(), chosen again once when no connection could be made. */
  async connect(): Promise<PgListenClientLike & { release(err?: Error | boolean): void }> {
    for (let attempt = 0; ; attempt++) {
      const cur = await this.chosen();
      try {
        return await cur.pool.connect();
      } catch (err) {
        if (!leavesHost(err)) throw err;
        this.drop(cur);
        if (attempt > 0) throw err;
      }
    }
  }

  async end(): Promise<void> {
    this.ended = true;
    await this.choosing?.catch(() => {});
    const cur = this.current;
    this.current = undefined;
    await cur?.pool.end();
  }
}
