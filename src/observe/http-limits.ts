/**
 * The limits every HTTP server leasehold starts shares (the dashboard, `run --metrics-port`,
 * `run --health-port`): a cap on open connections and a deadline for receiving a request, so
 * that clients which connect and then send nothing, or send a header a byte at a time
 * (slowloris), cannot pile up sockets and memory. Node's defaults have no connection cap and
 * give a request 300s (its headers 60s), checked every 30s.
 */
import { createServer, type RequestListener, type Server } from 'node:http';
import { ConfigError } from '../core/errors.js';

export interface HttpLimits {
  /** Connections open at once; the server closes any beyond it at once. Default 64. */
  maxConnections?: number;
  /** How long a client may take to send a request's headers. Default 10s. */
  headersTimeoutMs?: number;
  /** How long a client may take to send a whole request (not the response: an event stream may stay open). Default 10s. */
  requestTimeoutMs?: number;
}

const DEFAULT_HTTP_LIMITS: Required<HttpLimits> = { maxConnections: 64, headersTimeoutMs: 10_000, requestTimeoutMs: 10_000 };

function positiveInt(v: number | undefined, fallback: number, what: string): number {
  if (v === undefined) return fallback;
  if (!Number.isSafeInteger(v) || v < 1) throw new ConfigError(`${what} must be a whole number of at least 1, got ${String(v)}`);
  return v;
}

/** The limits with defaults filled in. @throws {ConfigError} a value that is not a whole number >= 1. */
export function resolveHttpLimits(limits: HttpLimits = {}): Required<HttpLimits> {
  const requestTimeoutMs = positiveInt(limits.requestTimeoutMs, DEFAULT_HTTP_LIMITS.requestTimeoutMs, 'requestTimeoutMs');
  return {
    maxConnections: positiveInt(limits.maxConnections, DEFAULT_HTTP_LIMITS.maxConnections, 'maxConnections'),
    // Node refuses a headers timeout longer than the request timeout: the request's bounds both.
    headersTimeoutMs: Math.min(positiveInt(limits.headersTimeoutMs, DEFAULT_HTTP_LIMITS.headersTimeoutMs, 'headersTimeoutMs'), requestTimeoutMs),
    requestTimeoutMs,
  };
}

/**
 * A node:http server with the limits applied. The timeouts are checked every second (at most
 * a quarter of the headers timeout), not Node's 30s, so a stalled request is cut off close to
 * its deadline. @throws {ConfigError}
 */
export function limitedServer(handler: RequestListener, limits: HttpLimits = {}): Server {
  const l = resolveHttpLimits(limits);
  const server = createServer(
    {
      headersTimeout: l.headersTimeoutMs,
      requestTimeout: l.requestTimeoutMs,
      connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(l.headersTimeoutMs / 4))),
    },
    handler,
  );
  server.maxConnections = l.maxConnections;
  return server;
}
