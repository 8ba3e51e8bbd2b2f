import { checkQueryParameters, checkUrlParts, readTlsFiles, redactUrl, tlsFilePaths, type TlsMaterial } from '../url.js';
import { ConfigError } from '../../core/errors.js';
import { driverFor, type IoredisLike, type NodeRedisLike, type RedisDriver } from './driver.js';
import { ioredisSentinelOptions, MAX_REDIS_DB, parseSentinelUrl, SENTINEL_EXAMPLE, SENTINEL_SCHEME, TLS_PARAMETERS } from './sentinel.js';

export const DEFAULT_PREFIX = 'leasehold';

/** Prefixes become part of every key (`{prefix}:lease:<name>`) and the pub/sub channel. */
export function validatePrefix(prefix: string): string {
  if (!/^[A-Za-z0-9_.:-]{1,100}$/.test(prefix)) {
    throw new ConfigError(
      `Redis key prefix ${JSON.stringify(prefix)} is not allowed: use 1-100 letters, digits and _ . : - (no braces, spaces or glob characters)`,
    );
  }
  return prefix;
}

interface ParsedRedisUrl {
  /** The URL for createOwnedDriver: no prefix=; TLS file parameters it reads and removes. */
  url: string;
  prefix: string | undefined;
  /** The URL with any password replaced by ***: safe to log. */
  redacted: string;
}

const EXAMPLE =
  'write redis://[user:password@]host:6379/0?prefix=leasehold (or rediss:// for TLS, with ?cacert=ca.pem[&cert=client.pem&key=client-key.pem] as needed)';

/**
 * @throws {ConfigError} for anything but a redis:// or rediss:// URL with a host, a database
 * 0-15, and at most ?prefix= (and on rediss://, the TLS files cacert=, cert=, key=); or a
 * redis+sentinel:// / rediss+sentinel:// URL with Sentinels, a master name and the same.
 */
export function parseRedisUrl(url: string): ParsedRedisUrl {
  if (SENTINEL_SCHEME.test(url)) {
    const s = parseSentinelUrl(url);
    if (s.prefix !== undefined) validatePrefix(s.prefix);
    return { url: s.url, prefix: s.prefix, redacted: s.redacted };
  }
  let u: URL;
  try {
    u = new URL(url);
  } catch (err) {
    throw new ConfigError(`store URL ${JSON.stringify(redactUrl(url))} is not a URL; ${EXAMPLE}`, { cause: err });
  }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') {
    throw new ConfigError(`store URL scheme "${u.protocol}" is not Redis; ${EXAMPLE}; for Sentinel, ${SENTINEL_EXAMPLE}`);
  }
  if (u.hostname === '') throw new ConfigError(`store URL ${JSON.stringify(redactUrl(url))} has no host; ${EXAMPLE}`);
  checkUrlParts(u, redactUrl(url));
  const db = u.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db)) {
    throw new ConfigError(`store URL path "${u.pathname}" is not a database number; ${EXAMPLE}`);
  }
  // A SELECT the server refuses is only an error event to ioredis, which carries on in database
  // 0 (sharing it with everyone else), and to node-redis a connection failure retried for ever
  // ("unreachable", exit 3). Neither says the URL is wrong, so the range is checked here.
  if (db !== '' && Number(db) > MAX_REDIS_DB) {
    throw new ConfigError(
      `store URL database ${db} is out of range: a Redis server has databases 0-${MAX_REDIS_DB} unless configured otherwise; ` +
        `use 0-${MAX_REDIS_DB} (or pass your own client, already on its database, for a server with more)`,
    );
  }
  // Drivers turn query parameters into client options (ioredis would accept keyPrefix, which
  // would split leasehold's keys from its channel); leasehold takes options as options.
  checkQueryParameters(u.searchParams, ['prefix', ...TLS_PARAMETERS], 'the Redis store (pass a client for other settings)');
  if (tlsFilePaths(u.searchParams, 'Redis store') !== undefined && u.protocol !== 'rediss:') {
    throw new ConfigError(`store URL ${JSON.stringify(redactUrl(url))} has TLS files (cacert=, cert=, key=) but the redis:// scheme; write rediss:// to use TLS`);
  }
  const prefix = u.searchParams.get('prefix') ?? undefined;
  if (prefix !== undefined) validatePrefix(prefix);
  u.searchParams.delete('prefix');
  const clean = u.toString();
  return { url: clean, prefix, redacted: redactUrl(clean) };
}


interface OwnedClientOptions {
  commandTimeoutMs: number;
  connectTimeoutMs: number;
  /** Which package to load; default: ioredis if installed, else redis. */
  clientPackage: 'ioredis' | 'redis' | undefined;
}

/** Reconnect quickly at first, then every 2s at most; never give up (calls fail fast meanwhile). */
function backoff(attempt: number): number {
  return Math.min(50 * 2 ** Math.min(attempt, 6), 2000);
}

interface IoredisConstructor {
  new (url: string, options: Record<string, unknown>): IoredisLike;
  new (options: Record<string, unknown>): IoredisLike;
}

interface IoredisModule {
  default?: IoredisConstructor;
  Redis?: IoredisConstructor;
}

interface NodeRedisModule {
  createClient: (options: Record<string, unknown>) => NodeRedisLike;
}

/**
 * Creates a client for a URL: ioredis if it is installed, else node-redis. Both are set up to
 * fail fast while Redis is down (a lease engine must hear "unknown" in time to act, not wait in
 * a queue), and never to resend a command after a reconnect (a renewal replayed later would
 * land after the engine already decided what its failure meant).
 *
 * @throws {ConfigError} when neither driver is installed.
 */
export async function createOwnedDriver(url: string, options: OwnedClientOptions): Promise<RedisDriver> {
  if (SENTINEL_SCHEME.test(url)) return createSentinelDriver(url, options);
  // The drivers would read the TLS parameters as client options of their own (or not at all):
  // they are taken out here and given as tls options, read from their files.
  const u = new URL(url);
  const paths = tlsFilePaths(u.searchParams, 'Redis store');
  for (const k of TLS_PARAMETERS) u.searchParams.delete(k);
  const tls: TlsMaterial | undefined = paths === undefined ? undefined : readTlsFiles(paths, 'Redis store');
  url = paths === undefined ? url : u.toString();
  const ioredis = options.clientPackage === 'redis' ? undefined : await tryImport<IoredisModule>('ioredis');
  const Redis = ioredis?.Redis ?? ioredis?.default;
  if (Redis !== undefined) {
    const client = new Redis(url, { ...ioredisOptions(options), ...(tls === undefined ? {} : { tls }) });
    // Without a listener, a connection error event would crash the process.
    return withLastError(client, driverFor(client, true));
  }
  const nodeRedis = options.clientPackage === 'ioredis' ? undefined : await tryImport<NodeRedisModule>('redis');
  if (nodeRedis !== undefined && typeof nodeRedis.createClient === 'function') {
    const client = nodeRedis.createClient({
      url,
      disableOfflineQueue: true,
      socket: { connectTimeout: options.connectTimeoutMs, reconnectStrategy: backoff, ...(tls === undefined ? {} : { tls: true, ...tls }) },
      commandOptions: { timeout: options.commandTimeoutMs },
    });
    const driver = withLastError(client, driverFor(client, true));
    // node-redis needs an explicit connect(), and with no offline queue a command sent before
    // it finishes would fail. connect() itself only settles once connected (it retries while
    // Redis is down), so wait for the first attempt's outcome: connected, or its first error.
    let timer: NodeJS.Timeout | undefined;
    let onError: (() => void) | undefined;
    await Promise.race([
      client.connect().catch(() => {}),
      new Promise<void>((resolve) => {
        onError = resolve;
        client.on('error', onError);
        timer = setTimeout(resolve, options.connectTimeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
    if (onError !== undefined) client.removeListener?.('error', onError);
    return driver;
  }
  if (options.clientPackage !== undefined) {
    throw new ConfigError(`the Redis store was told to use the "${options.clientPackage}" package, which is not installed: npm install ${options.clientPackage}`);
  }
  throw new ConfigError('the Redis store needs a Redis client package: npm install ioredis (or npm install redis)');
}

/** The ioredis options of every client leasehold creates, Sentinel or not. */
function ioredisOptions(options: OwnedClientOptions): Record<string, unknown> {
  return {
    lazyConnect: true,
    // Commands wait while the first connection is made, and are failed (not kept) as soon as
    // one connection attempt fails: maxRetriesPerRequest 0 flushes the queue on every close.
    enableOfflineQueue: true,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    commandTimeout: options.commandTimeoutMs,
    connectTimeout: options.connectTimeoutMs,
    retryStrategy: backoff,
  };
}

/**
 * Sentinel through ioredis only: node-redis' Sentinel client (createSentinel) is a different
 * object from createClient's, and leasehold has not been tested against its failover
 * behaviour; an untested path to the primary is not one a lease should take.
 */
async function createSentinelDriver(url: string, options: OwnedClientOptions): Promise<RedisDriver> {
  const target = parseSentinelUrl(url);
  const tls = target.tlsPaths === undefined ? undefined : readTlsFiles(target.tlsPaths, 'Redis store');
  const ioredis = options.clientPackage === 'redis' ? undefined : await tryImport<IoredisModule>('ioredis');
  const Redis = ioredis?.Redis ?? ioredis?.default;
  if (Redis === undefined) {
    throw new ConfigError(
      `a Sentinel store URL (${target.redacted}) needs the ioredis package` +
        (options.clientPackage === 'redis' ? ', but the store was told to use "redis" (node-redis); drop clientPackage, and ' : '; ') +
        'npm install ioredis (node-redis is not supported with Sentinel; or pass your own client already connected to the primary)',
    );
  }
  const client = new Redis({ ...ioredisOptions(options), ...ioredisSentinelOptions(target, tls, options.connectTimeoutMs, backoff) });
  const driver = withLastError(client, driverFor(client, true));
  // When no Sentinel names a primary, ioredis' error says only "All sentinels are unreachable
  // ... Last error: Connection is closed."; each Sentinel's own reason (a TLS failure, a
  // refused connection, no such master) comes as a 'sentinelError' event.
  let sentinelError: string | undefined;
  // ("Connection is closed" is ioredis closing its own Sentinel connection: keep the reason before it.)
  (client as unknown as { on(event: 'sentinelError', listener: (err: Error) => void): unknown }).on('sentinelError', (err: Error) => {
    if (sentinelError === undefined || !/Connection is closed\.?$/.test(err.message)) sentinelError = err.message;
    // Over TLS, a handshake the Sentinel refused (a wrong CA, a missing client certificate)
    // reaches us only as that "Connection is closed.": ioredis keeps the TLS error to its own
    // Sentinel connection. One handshake of our own, with the same material, says why.
    if (target.tls && /Connection is closed\.?$/.test(err.message)) probeTls(err.message);
  });
  let probing = false;
  let lastProbe = -Infinity;
  const probeTls = (message: string): void => {
    if (probing || performance.now() - lastProbe < 5000) return;
    // The Sentinel the message names (ioredis' wording), else the first one in the URL.
    const m = /sentinel ([^\s]+):(\d+) because/.exec(message);
    const first = target.sentinels[0];
    const host = m?.[1] ?? first?.host;
    const port = m === null ? first?.port : Number(m[2]);
    if (host === undefined || port === undefined) return;
    probing = true;
    lastProbe = performance.now();
    const socket = process.getBuiltinModule('node:tls').connect({ host, port, ...(tls ?? {}), ...(process.getBuiltinModule('node:net').isIP(host) === 0 ? { servername: host } : {}) });
    const done = (why: string | undefined): void => {
      clearTimeout(timer);
      socket.destroy();
      probing = false;
      if (why !== undefined) sentinelError = `TLS to Sentinel ${host}:${port} failed: ${why}`;
    };
    const timer = setTimeout(() => done(undefined), options.connectTimeoutMs);
    timer.unref();
    socket.once('secureConnect', () => done(undefined));
    socket.once('error', (e: Error) => done(e.message));
  };
  client.on('ready', () => {
    sentinelError = undefined;
  });
  // ioredis (6.0) can end a Sentinel client for good in a failover: its failover detector,
  // left over from the last connection, hears +switch-master while the client is reconnecting
  // and disconnects the connector; the reconnect under way then fails with "Connection is
  // closed.", the client goes to 'end', and every later command fails the same way (seen in
  // the Sentinel TLS topology test, and upstream as redis/ioredis#1683). The client is ours and
  // only close() ends it on purpose, so an 'end' before that starts a new connection. Commands
  // sent meanwhile fail as unavailable, as during any reconnect.
  let closing = false;
  let attempt = 0;
  const reconnect = (): void => {
    if (closing) return;
    setTimeout(() => {
      if (closing) return;
      client.connect().then(
        () => {
          attempt = 0;
        },
        // Failed before ioredis' own retries took over (it went to 'end' again): that 'end' retries.
        () => undefined,
      );
    }, backoff(attempt++)).unref();
  };
  client.on('end', reconnect);
  return {
    ...driver,
    async close() {
      closing = true;
      await driver.close();
    },
    lastConnectionError: () => {
      const last = driver.lastConnectionError?.();
      return last !== undefined && sentinelError !== undefined && /All sentinels are unreachable/.test(last) ? `${last.replace(/ Last error: .*$/, '')} Last: ${sentinelError}` : last;
    },
  };
}

/** Listens for errors (unhandled, one would crash the process) and keeps the last for messages. */
function withLastError(client: IoredisLike | NodeRedisLike, driver: RedisDriver): RedisDriver {
  let last: string | undefined;
  client.on('error', (err: Error) => {
    const code = (err as { code?: unknown }).code;
    last = err.message || (typeof code === 'string' ? code : String(err));
  });
  client.on('ready', () => {
    last = undefined;
  });
  return { ...driver, lastConnectionError: () => last };
}

async function tryImport<T>(specifier: 'ioredis' | 'redis'): Promise<T | undefined> {
  try {
    return (specifier === 'ioredis' ? await import('ioredis') : await import('redis')) as unknown as T;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') return undefined;
    throw new ConfigError(`loading the "${specifier}" package failed: ${(err as Error).message}`, { cause: err });
  }
}
