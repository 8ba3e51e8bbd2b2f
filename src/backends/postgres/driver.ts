/** Loading `pg` (an optional peer dependency, loaded on first use) and the pools leasehold makes with it. */
import { createRequire } from 'node:module';
import { userInfo } from 'node:os';
import { ConfigError } from '../../core/errors.js';
import { FailoverPool, type PgDriver, type PgTarget } from './multi-host.js';
import { mapPgError } from './errors.js';
import type { PgListenClientLike, PgPoolLike } from './store.js';

/**
 * pg-pool's end() waits for every client, including one still connecting: to a listener that
 * accepts and never answers, that is the whole connection timeout (seconds), during which the
 * process cannot exit. A client that never connected has no session to end, so its socket is
 * destroyed; its connect fails and the pool lets it go. Duck-typed (pg-pool's own fields): a
 * pool without them is simply ended as before.
 */
export function cutConnecting(pool: unknown): void {
  const clients = (pool as { _clients?: unknown })._clients;
  if (!Array.isArray(clients)) return;
  for (const c of clients as { _connected?: boolean; connection?: { stream?: { destroy?: () => void } } }[]) {
    if (c._connected === false) c.connection?.stream?.destroy?.();
  }
}

type PgModule = PgDriver;

/**
 * The pool for a parsed URL: pg's own for one host with no target_session_attrs (as before),
 * else a {@link FailoverPool} that tries the hosts in order (./multi-host.ts).
 * @param config pg.Pool settings; connectionTimeoutMillis is also each host's connect timeout
 */
export function createPool(pg: PgDriver, target: PgTarget, config: Record<string, unknown>, schema: string): PgPoolLike {
  if (target.urls.length === 1 && target.attrs === 'any') {
    const pool = new pg.Pool({ ...config, connectionString: target.urls[0] });
    // An idle client's socket error is emitted on the pool; unhandled, it would crash the process.
    pool.on('error', () => {});
    return pool;
  }
  return new FailoverPool(pg, target, config, Number(config['connectionTimeoutMillis'] ?? 5000), (err) => mapPgError(err, schema));
}

export async function loadPg(): Promise<PgModule> {
  let pg: PgModule;
  try {
    pg = requirePg();
  } catch (err) {
    throw new ConfigError('the PostgreSQL store needs the "pg" package: npm install pg', { cause: err });
  }
  defaultUserFromOs(pg);
  return pg;
}

/**
 * A URL with no user name connects as the operating system's user, as libpq (psql) does. pg
 * takes its default from $USER alone, which containers often leave unset (Docker does), so a
 * URL that works in psql failed with "no PostgreSQL user name specified". $PGUSER and a user
 * in the URL still win; a uid with no passwd entry leaves pg's own behaviour.
 */
function defaultUserFromOs(pg: PgModule): void {
  const defaults = (pg as { defaults?: { user?: string | undefined } }).defaults;
  if (defaults === undefined || (defaults.user ?? '') !== '' || (process.env['PGUSER'] ?? '') !== '') return;
  try {
    defaults.user = userInfo().username;
  } catch {
    // No passwd entry for this uid: nothing to default to.
  }
}

/**
 * pg decides when it loads whether it runs on Cloudflare Workers: by `navigator.userAgent`, or,
 * where there is no `navigator` (Node 20), by constructing a `Response`, which loads Node's fetch
 * (undici): some 30 ms, a third of a CLI start-up, for nothing. On Node 20 a `navigator` that
 * says Node is present for that one synchronous require, so nothing else can see it.
 */
function requirePg(): PgModule {
  const require = createRequire(import.meta.url);
  if ('navigator' in globalThis) return require('pg') as PgModule;
  Object.defineProperty(globalThis, 'navigator', { value: { userAgent: `Node.js/${process.versions.node}` }, configurable: true, writable: true });
  try {
    return require('pg') as PgModule;
  } finally {
    delete (globalThis as { navigator?: unknown }).navigator;
  }
}

export async function closeListenClient(c: PgListenClientLike, graceful: boolean): Promise<void> {
  c.removeAllListeners?.('notification');
  // The socket was unref'd while idle; closing it must keep the process alive until it is done.
  (c as unknown as { connection?: { stream?: { ref?: () => void } } }).connection?.stream?.ref?.();
  try {
    if (c.release !== undefined) c.release(graceful ? undefined : true);
    else await c.end?.();
  } catch {
    // already closed
  }
}
