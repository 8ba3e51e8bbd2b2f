import { ConfigError } from '../../core/errors.js';

/**
 * The Redis store talks to one small interface, {@link RedisDriver}: run a script, and keep a
 * subscription open. Two adapters implement it, for the two clients people already have:
 * ioredis and node-redis (`redis` v4 and later). Both are described structurally (`*Like`), so
 * neither becomes a dependency of leasehold; a driver package is loaded only when the store is
 * given a URL instead of a client.
 */

/** The subset of an ioredis `Redis` that leasehold uses. (A `Cluster` duplicates differently.) */
export interface IoredisLike {
  evalsha(sha: string, numkeys: number, keysAndArgs: string[]): Promise<unknown>;
  eval(script: string, numkeys: number, keysAndArgs: string[]): Promise<unknown>;
  duplicate(override?: IoredisDuplicateOptions): IoredisLike;
  connect(): Promise<unknown>;
  subscribe(channel: string): Promise<unknown>;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'ready' | 'end', listener: () => void): unknown;
  removeAllListeners(event?: string): unknown;
  quit(): Promise<unknown>;
  disconnect(reconnect?: boolean): void;
  /** 'ready' once connected and answering; read by close. */
  readonly status?: string;
  readonly stream?: { destroy(): void };
}

/** The options leasehold overrides when it duplicates an ioredis client for pub/sub. */
interface IoredisDuplicateOptions {
  lazyConnect?: boolean;
  autoResubscribe?: boolean;
  enableOfflineQueue?: boolean;
  maxRetriesPerRequest?: number | null;
  autoResendUnfulfilledCommands?: boolean;
  connectionName?: string;
}

/** The subset of a node-redis client (`createClient()` from `redis` v4+) that leasehold uses. */
export interface NodeRedisLike {
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  duplicate(overrides?: { name?: string }): NodeRedisLike;
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: (message: string, channel: string) => unknown): Promise<unknown>;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'ready' | 'end', listener: () => void): unknown;
  removeAllListeners(event?: string): unknown;
  removeListener?(event: 'error', listener: (err: Error) => void): unknown;
  /** node-redis v5+. */
  close?(): Promise<unknown>;
  /** node-redis v4 (deprecated in v5). */
  quit?(): Promise<unknown>;
  destroy?(): void;
  disconnect?(): Promise<unknown>;
  readonly isReady?: boolean;
}

/** Either client; leasehold tells them apart by `evalSha` (node-redis) versus `evalsha` (ioredis). */
export type RedisClientLike = IoredisLike | NodeRedisLike;

/** Events from one subscriber connection. */
interface SubscriberEvents {
  message(message: string): void;
  /** The channel is subscribed: the first time, and again after every reconnect. */
  subscribed(): void;
  /** The connection gave up reconnecting; the caller must open a new one. */
  ended(): void;
}

export interface SubscriberHandle {
  /** Connects and subscribes; resolves after the first subscription or the first failure. */
  start(): Promise<void>;
  close(): Promise<void>;
}

/** What the Redis store needs from a client. */
export interface RedisDriver {
  /** `ioredis` or `node-redis`. */
  readonly label: string;
  evalsha(sha: string, keys: string[], args: string[]): Promise<unknown>;
  eval(source: string, keys: string[], args: string[]): Promise<unknown>;
  /**
   * One new connection (a duplicate of the client) subscribed to `channel`, named
   * `connectionName` (CLIENT SETNAME) so operators can find it in CLIENT LIST.
   */
  openSubscriber(channel: string, connectionName: string, events: SubscriberEvents): SubscriberHandle;
  /** Closes the client if leasehold created it; a client the caller passed in is left alone. */
  close(): Promise<void>;
  /** For clients leasehold created: the last connection error since the last successful connect. */
  lastConnectionError?(): string | undefined;
}

function isNodeRedis(client: RedisClientLike): client is NodeRedisLike {
  return typeof (client as Partial<NodeRedisLike>).evalSha === 'function';
}

function isIoredis(client: RedisClientLike): client is IoredisLike {
  return typeof (client as Partial<IoredisLike>).evalsha === 'function';
}

/** @throws {ConfigError} when `client` is neither an ioredis nor a node-redis client. */
export function driverFor(client: RedisClientLike, owned: boolean): RedisDriver {
  if (isNodeRedis(client)) return nodeRedisDriver(client, owned);
  if (isIoredis(client)) return ioredisDriver(client, owned);
  throw new ConfigError(
    'the Redis store needs an ioredis client (new Redis()) or a node-redis client (createClient() from "redis"); ' +
      'the client given has neither evalsha nor evalSha',
  );
}

const QUIT_TIMEOUT_MS = 2000;

/** Settles `p` or gives up after `ms`; the timer never holds the process open. */
async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
    timer.unref();
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function ioredisDriver(client: IoredisLike, owned: boolean): RedisDriver {
  return {
    label: 'ioredis',
    evalsha: (sha, keys, args) => client.evalsha(sha, keys.length, [...keys, ...args]),
    eval: (source, keys, args) => client.eval(source, keys.length, [...keys, ...args]),
    openSubscriber(channel, connectionName, events) {
      // autoResubscribe off: we subscribe on every 'ready' ourselves, so we know when the
      // subscription is back (ioredis' own resubscription is not awaited before 'ready').
      // No offline queue: a SUBSCRIBE queued while Redis is down would only duplicate ours.
      const sub = client.duplicate({
        lazyConnect: true,
        autoResubscribe: false,
        enableOfflineQueue: false,
        maxRetriesPerRequest: null,
        autoResendUnfulfilledCommands: false,
        connectionName,
      });
      let closing = false;
      let first: (() => void) | undefined;
      const firstAttempt = new Promise<void>((resolve) => {
        first = resolve;
      });
      const settleFirst = (): void => {
        first?.();
        first = undefined;
      };
      // An 'error' without a listener crashes Node; connection errors surface as retries.
      sub.on('error', () => {});
      sub.on('message', (ch, message) => {
        if (ch === channel) events.message(message);
      });
      sub.on('ready', () => {
        sub.subscribe(channel).then(
          () => {
            settleFirst();
            if (!closing) events.subscribed();
          },
          // The connection dropped again before SUBSCRIBE answered; the next 'ready' retries.
          () => {},
        );
      });
      sub.on('end', () => {
        settleFirst();
        if (!closing) events.ended();
      });
      return {
        async start() {
          sub.connect().catch(() => {
            // The first attempt failed; ioredis keeps retrying and 'ready' will subscribe.
            settleFirst();
          });
          await firstAttempt;
        },
        async close() {
          closing = true;
          settleFirst();
          sub.removeAllListeners('message');
          await quitIoredis(sub);
        },
      };
    },
    async close() {
      if (!owned) return;
      await quitIoredis(client);
    },
  };
}

/**
 * QUIT, then disconnect() whether or not QUIT answered: only disconnect() reaches a Sentinel
 * client's connector, whose failover detector otherwise keeps its own connections to the
 * Sentinels (and reconnects them for ever) after the client has quit.
 */
async function quitIoredis(c: IoredisLike): Promise<void> {
  // Not ready (still connecting, or connected to something that never answered the handshake):
  // there is nothing to say goodbye to, and QUIT would wait its full timeout. disconnect() only
  // half-closes the socket, and a listener that never answers never finishes the close, so the
  // commands waiting on it would hold the process open until their own timeouts: destroy it,
  // which rejects them at once.
  if (c.status !== undefined && c.status !== 'ready') {
    c.disconnect(false);
    c.stream?.destroy();
    return;
  }
  await within(
    c.quit().catch(() => undefined),
    QUIT_TIMEOUT_MS,
  );
  c.disconnect(false);
}

function nodeRedisDriver(client: NodeRedisLike, owned: boolean): RedisDriver {
  return {
    label: 'node-redis',
    evalsha: (sha, keys, args) => client.evalSha(sha, { keys, arguments: args }),
    eval: (source, keys, args) => client.eval(source, { keys, arguments: args }),
    openSubscriber(channel, connectionName, events) {
      const sub = client.duplicate({ name: connectionName });
      let closing = false;
      let listening = false;
      sub.on('error', () => {});
      // node-redis resubscribes by itself before it emits 'ready' after a reconnect.
      sub.on('ready', () => {
        if (listening && !closing) events.subscribed();
      });
      const run = async (): Promise<void> => {
        await sub.connect();
        await sub.subscribe(channel, (message, ch) => {
          if (ch === channel) events.message(message);
        });
        listening = true;
        if (!closing) events.subscribed();
      };
      return {
        async start() {
          const running = run().catch(() => {
            // connect() only rejects once the reconnect strategy gives up.
            if (!closing) events.ended();
          });
          // node-redis' connect() keeps retrying while Redis is down: wait for the first
          // attempt's outcome (subscribed, or its first error), never for ever.
          let onError: (() => void) | undefined;
          const failed = new Promise<void>((resolve) => {
            onError = resolve;
            sub.on('error', onError);
          });
          await within(Promise.race([running, failed]), 5000);
          if (onError !== undefined) sub.removeListener?.('error', onError);
        },
        async close() {
          closing = true;
          await closeNodeRedis(sub);
        },
      };
    },
    async close() {
      if (owned) await closeNodeRedis(client);
    },
  };
}

async function closeNodeRedis(c: NodeRedisLike): Promise<void> {
  const closing = (c.close?.() ?? c.quit?.() ?? Promise.resolve()).catch(() => undefined);
  if ((await within(closing, QUIT_TIMEOUT_MS)) === undefined) {
    if (c.destroy !== undefined) c.destroy();
    else await c.disconnect?.().catch(() => undefined);
  }
}
