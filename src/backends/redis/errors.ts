import { ConfigError, LeaseholdError, SchemaError, StoreError, StoreUnavailableError } from '../../core/errors.js';
import { LAYOUT_ERROR } from './scripts.js';

// Node socket errors and the two clients' own connection errors: the outcome is unknown.
const NET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'ECONNABORTED',
]);
const NET_MESSAGES =
  /Connection is closed|Stream isn't writeable|MaxRetriesPerRequest|max retries per request|Command timed out|Command timeout|Connection timeout|client is closed|client is offline|Socket closed unexpectedly|Reconnect|connect ETIMEDOUT|ECONN|EPIPE|socket hang up/i;

/** Where a store points, for messages: `redis://127.0.0.1:6379/0` or `your ioredis client`. */
export interface ErrorContext {
  where: string;
  prefix: string;
  /** The last connection error of a client leasehold created (ECONNREFUSED, ...), if any. */
  lastConnectionError?: () => string | undefined;
}

// What the drivers say when a command was refused because there is no connection: true, but
// the reason (the socket error) is more useful to whoever reads the message.
const NOT_CONNECTED = /max retries per request|client is offline|Stream isn't writeable|Connection is closed|client is closed/i;

/**
 * Maps anything a Redis client throws to leasehold's taxonomy. Only known connection, timeout
 * and busy errors are retryable; an unknown error is a `StoreError`. Server errors carry their code as
 * the first word of the message (`READONLY You can't write against a read only replica.`).
 */
export function mapRedisError(err: unknown, ctx: ErrorContext): Error {
  if (err instanceof LeaseholdError) return err;
  const e = err as { code?: unknown; message?: unknown; name?: unknown; errors?: unknown };
  const msg = typeof e.message === 'string' ? e.message : String(err);
  const code = typeof e.code === 'string' ? e.code : '';
  const word = /^[A-Z_]+/.exec(msg)?.[0] ?? '';
  const at = ctx.where;

  if (word === LAYOUT_ERROR) return new SchemaError(`Redis at ${at}: ${msg.slice(word.length + 1)}`, { cause: err });
  if (word === 'NOAUTH' || word === 'WRONGPASS') {
    return new ConfigError(`Redis at ${at} refused the login (${msg}); check the user and password in the store URL`, { cause: err });
  }
  if (word === 'NOPERM') {
    return new ConfigError(
      `Redis at ${at} refused a command (${msg}); the ACL user needs EVAL, EVALSHA, PUBLISH, SUBSCRIBE and access to keys {${ctx.prefix}}:*`,
      { cause: err },
    );
  }
  if (word === 'WRONGTYPE') {
    return new ConfigError(
      `a key under prefix "${ctx.prefix}" at ${at} holds data leasehold did not write (${msg}); choose another prefix (?prefix=)`,
      { cause: err },
    );
  }
  if (word === 'READONLY') {
    return new StoreUnavailableError(
      `Redis at ${at} is a read-only replica (${msg}); this is retryable: point the store URL at the primary, or wait for failover to finish`,
      { cause: err },
    );
  }
  if (word === 'LOADING') {
    return new StoreUnavailableError(`Redis at ${at} is loading its data set into memory; this is retryable`, { cause: err });
  }
  if (word === 'NOSCRIPT') {
    return new StoreUnavailableError(
      `Redis at ${at} forgot leasehold's script again right after loading it (${msg}); this is retryable. ` +
        'If a proxy sits in front of Redis, check that it supports EVAL and EVALSHA',
      { cause: err },
    );
  }
  if (word === 'BUSY') {
    return new StoreUnavailableError(`Redis at ${at} is busy running a long script (${msg}); this is retryable`, { cause: err });
  }
  if (word === 'MISCONF') {
    // stop-writes-on-bgsave-error: the last snapshot failed (usually a full disk); writes resume
    // once one succeeds.
    return new StoreUnavailableError(
      `Redis at ${at} refuses writes because it cannot persist to disk (${msg}); this is retryable: free space for its RDB/AOF files`,
      { cause: err },
    );
  }
  if (word === 'OOM') {
    return new StoreUnavailableError(
      `Redis at ${at} is out of memory (${msg}); this is retryable: raise maxmemory or use a noeviction policy`,
      { cause: err },
    );
  }
  if (['MASTERDOWN', 'TRYAGAIN', 'CLUSTERDOWN', 'MOVED', 'ASK', 'NOREPLICAS'].includes(word)) {
    return new StoreUnavailableError(`Redis at ${at} cannot serve leasehold right now (${msg}); this is retryable`, { cause: err });
  }
  if (NET_CODES.has(code) || NET_MESSAGES.test(msg) || hasNetCause(err)) {
    let detail = msg || code || 'no answer';
    if (NOT_CONNECTED.test(msg)) {
      const last = ctx.lastConnectionError?.();
      // The connection is refused at the handshake: retrying will not fix a wrong password.
      if (last !== undefined && /^(NOAUTH|WRONGPASS|NOPERM)/.test(last)) {
        return new ConfigError(`Redis at ${at} refused the login (${last}); check the user and password in the store URL`, { cause: err });
      }
      detail = last === undefined ? 'not connected' : `not connected: ${last}`;
    } else if (/Command timed out/i.test(msg)) {
      // A command that waited for a first connection (through Sentinel: for the Sentinels to
      // name a primary) times out rather than failing; why there is no connection is the news.
      const last = ctx.lastConnectionError?.();
      if (last !== undefined) detail = `${msg}, not connected: ${last}`;
    }
    return new StoreUnavailableError(
      `Redis at ${at} is unreachable (${detail}); this is retryable: check that Redis is running and the store URL is right`,
      { cause: err },
    );
  }
  // Anything else (a script error, ERR from a proxy that lacks a command, an error nobody
  // anticipated) is an answer, not an outage: reported, not retried in silence.
  return new StoreError(`Redis at ${at} refused leasehold's command (${msg}); this is not retried: check the server and the store URL, and report it if it persists`, {
    cause: err,
  });
}

// AggregateError (both address families refused) and wrapped socket errors carry the code inside.
function hasNetCause(err: unknown): boolean {
  const e = err as { errors?: unknown; cause?: unknown };
  const inner = [...(Array.isArray(e.errors) ? e.errors : []), e.cause];
  return inner.some((x) => {
    const c = (x as { code?: unknown } | undefined)?.code;
    return typeof c === 'string' && NET_CODES.has(c);
  });
}

export function isNoScript(err: unknown): boolean {
  const msg = (err as { message?: unknown } | undefined)?.message;
  return typeof msg === 'string' && msg.startsWith('NOSCRIPT');
}
