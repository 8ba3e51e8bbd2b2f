/**
 * `leasehold dashboard`: a read-only page of every lease (holder, token, time to expiry by the
 * store's clock, state) and a timeline of terms and revocations from the history, updated live
 * over server-sent events.
 *
 * Load: one LeaseWatcher (one store subscription, reads bounded like a follower's, see
 * src/observe) and one history read per change it sees, shared by every browser: a browser
 * that connects gets the last state from memory and never causes a store read.
 *
 * Limits (issue 28: ten clients that never read grew a dashboard from 57 MB to 2.4 GB in a
 * minute): at most `maxClients` event streams; each has at most one state waiting to be sent
 * (a newer state replaces it, so a slow browser sees fewer, newer states, never a backlog); a
 * client that has not taken a state within `clientTimeoutMs` is disconnected; states go out at
 * most every 100ms whatever the store does; the server caps connections and request time
 * (observe/http-limits.ts).
 *
 * Exposure: loopback by default. Any other address needs --allow-remote and prints a warning
 * (the page shows it too). On loopback, requests whose Host header is not a loopback name are
 * refused, so a web page elsewhere cannot read it through DNS rebinding. GET and HEAD only.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import type { HistoryEntry, LeaseStore } from '../backends/store.js';
import { ConfigError, errorMessage } from '../core/errors.js';
import { LeaseWatcher, type LeaseView } from '../observe/index.js';
import { limitedServer } from '../observe/http-limits.js';
import { CliError, EXIT, cliLog, durationOption, formatMs, logFormatOption, openStoreFromFlags, out, requireCurrentSchema, setLogContext, usageError } from './common.js';
import { PAGE_HTML } from './dashboard/page.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

const DEFAULT_MAX_CLIENTS = 64;
const DEFAULT_CLIENT_TIMEOUT_MS = 30_000;

export const DASHBOARD_SPEC = defineCommand({
  name: 'dashboard',
  summary: 'A read-only web page of every lease and its recent terms, updated live; on 127.0.0.1 unless told otherwise.',
  about: `Serves a read-only page: every lease with its holder, token, time to expiry (by the store's
clock, ticking live) and state, and a timeline per lease of its terms and revocations over the
last hour of history. Updates arrive over server-sent events from one shared watch of the
store: ten browsers cost the store what one does.`,
  flags: {
    ...STORE_FLAGS,
    port: { type: 'string', value: 'P', env: 'LEASEHOLD_DASHBOARD_PORT', default: '7373', help: 'the TCP port to listen on (0: any free port)' },
    host: {
      type: 'string',
      value: 'HOST',
      env: 'LEASEHOLD_DASHBOARD_HOST',
      default: '127.0.0.1',
      help: 'the address to listen on; anything but loopback also needs --allow-remote',
    },
    'allow-remote': {
      type: 'boolean',
      help: 'allow a --host that is not loopback: everyone who can reach it sees every lease, holder and revocation reason',
    },
    'max-clients': {
      type: 'string',
      value: 'N',
      default: String(DEFAULT_MAX_CLIENTS),
      help: 'live pages (event streams) served at once; one more is answered 503',
    },
    'client-timeout': {
      type: 'string',
      value: 'D',
      default: '30s',
      help: 'a page that has not taken an update within this long (it stopped reading) is disconnected',
    },
    ...LOG_FLAGS,
  },
  footer: `Prints the page's URL on stdout, then serves until SIGINT/SIGTERM (exit 0). Exit 2 on usage
(a bad port, --max-clients or --client-timeout, a remote --host without --allow-remote, a
port in use); 3 store unreachable or
schema missing at start. Later store outages show on the page; the watch keeps retrying.`,
});

export const DASHBOARD_USAGE = helpText(DASHBOARD_SPEC);

/** States go out at most this often: the watcher's own shortest interval between reads. */
const BROADCAST_MIN_MS = 100;
/** Connections beyond the event streams: page loads, state.json, a refused stream being told so. */
const OTHER_CONNECTIONS = 32;
/** Refusals and drops are logged at most this often (with counts), so a flood cannot flood the log. */
const WARN_EVERY_MS = 60_000;
const HISTORY_WINDOW_MS = 3_600_000;
const HISTORY_LIMIT = 2000;
const HEARTBEAT_MS = 15_000;
/** A lease taken after being free (or a new name) shows within this long; nothing notifies an acquisition. */
const IDLE_MS = 5000;

function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || (isIP(h) === 4 && h.startsWith('127.'));
}

interface LeaseRow {
  name: string;
  state: LeaseView['state'];
  holder: string | null;
  token: string;
  expiresAtMs: number | null;
  storeNowMs: number;
  termStartedAtMs: number | null;
  last: { event: string; atMs: number; holder: string | null; previousHolder: string | null; detail: string | null; token: string } | null;
}

export interface BoardState {
  store: string;
  listen: string;
  remote: boolean;
  storeNowMs: number;
  leases: LeaseRow[];
  history: Array<{ id: string; name: string; event: string; holder: string | null; previousHolder: string | null; token: string; atMs: number; detail: string | null }>;
  error: string | null;
  reads: { total: number; list: number; history: number };
  /** Readings that found a change (a history read follows each, coalesced). */
  changes: number;
  clients: number;
  /** Event streams refused (at maxClients) and disconnected (stalled past clientTimeoutMs) since start. */
  refused: number;
  dropped: number;
  uptimeMs: number;
}

export interface BoardLimits {
  /** Event streams served at once; one more is answered 503. Default 64. */
  maxClients?: number;
  /** A client that has not taken a state within this long is disconnected. Default 30s. */
  clientTimeoutMs?: number;
  /** Where refusals and disconnections are reported (at most one line a minute of each). */
  warn?: (message: string) => void;
}

/** One event stream. `since` is set while a write waits for the socket to drain. */
interface Client {
  res: ServerResponse;
  since: number | undefined;
  /** A newer state came while a write was waiting: send it on drain. */
  stale: boolean;
}

function positiveInt(v: number | undefined, fallback: number, what: string): number {
  if (v === undefined) return fallback;
  if (!Number.isSafeInteger(v) || v < 1) throw new ConfigError(`${what} must be a whole number of at least 1, got ${String(v)}`);
  return v;
}

/** The shared state and its browsers. */
export class Board {
  private readonly watcher: LeaseWatcher;
  private readonly clients = new Set<Client>();
  readonly maxClients: number;
  readonly clientTimeoutMs: number;
  private readonly warn: (message: string) => void;
  private refused = 0;
  private dropped = 0;
  private readonly warned = { refused: { at: -Infinity, count: 0 }, dropped: { at: -Infinity, count: 0 } };
  private lastBroadcast = -Infinity;
  private broadcastTimer: NodeJS.Timeout | undefined;
  private sweep: NodeJS.Timeout | undefined;
  private history: HistoryEntry[] = [];
  private historyReads = 0;
  /** Readings that found a change: each may cost one history read, and nothing else does. */
  private changes = 0;
  private error: string | null = null;
  private fetching = false;
  private refetch = false;
  private heartbeat: NodeJS.Timeout | undefined;
  private readonly startedAt = performance.now();
  listen = '';
  remote = false;

  /** @throws {ConfigError} a limit that is not a whole number >= 1. */
  constructor(
    private readonly store: LeaseStore,
    limits: BoardLimits = {},
  ) {
    this.maxClients = positiveInt(limits.maxClients, DEFAULT_MAX_CLIENTS, 'maxClients');
    this.clientTimeoutMs = positiveInt(limits.clientTimeoutMs, DEFAULT_CLIENT_TIMEOUT_MS, 'clientTimeoutMs');
    this.warn = limits.warn ?? (() => {});
    this.watcher = new LeaseWatcher(store, { minIntervalMs: 100, idleIntervalMs: IDLE_MS, heldRefresh: 0.5 });
    this.watcher.on('update', (_leases, changes) => {
      this.error = null;
      // A change of holder or state is what the history records: read it once per batch.
      if (changes.length > 0) {
        this.changes++;
        void this.fetchHistory();
      }
      else this.broadcast();
    });
    this.watcher.on('store-error', (e) => {
      this.error = errorMessage(e);
      this.broadcast();
    });
  }

  async start(): Promise<void> {
    await this.watcher.start();
    // The first reading usually started a history read already (its leases are all changes).
    if (this.historyReads === 0) await this.fetchHistory();
    this.heartbeat = setInterval(() => {
      for (const c of this.clients) if (c.since === undefined) this.send(c, ': keep-alive\n\n');
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
    // A stalled client is found within a quarter of its timeout.
    this.sweep = setInterval(() => this.dropStalled(), Math.max(25, Math.min(5000, Math.floor(this.clientTimeoutMs / 4))));
    this.sweep.unref();
  }

  /** The connections the server should allow: every event stream, and room for the rest. */
  get maxConnections(): number {
    return this.maxClients + OTHER_CONNECTIONS;
  }

  private report(kind: 'refused' | 'dropped', message: string): void {
    const w = this.warned[kind];
    w.count++;
    const now = performance.now();
    if (now - w.at < WARN_EVERY_MS) return;
    this.warn(w.count > 1 ? `${message} (${w.count} since the last report)` : message);
    w.at = now;
    w.count = 0;
  }

  private dropStalled(): void {
    const now = performance.now();
    for (const c of this.clients) {
      if (c.since === undefined || now - c.since < this.clientTimeoutMs) continue;
      this.clients.delete(c);
      this.dropped++;
      this.report('dropped', `disconnected a dashboard client that took no update for ${Math.round((now - c.since) / 1000)}s (--client-timeout); it may reconnect`);
      c.res.destroy();
    }
  }

  /**
   * Writes to one client unless a write is still waiting for its socket: then the client is
   * marked stale and gets the newest state once it drains. At most one state is ever queued
   * per client, however fast states come and however slowly it reads.
   */
  private send(c: Client, chunk: string): void {
    if (c.since !== undefined) {
      c.stale = true;
      return;
    }
    if (c.res.write(chunk)) return;
    c.since = performance.now();
    c.res.once('drain', () => {
      c.since = undefined;
      if (!c.stale || !this.clients.has(c)) return;
      c.stale = false;
      // Now, not when it was marked: the page counts down from the state's store time.
      this.send(c, `event: state\ndata: ${JSON.stringify(this.state())}\n\n`);
    });
  }

  /** Never throws: the watcher's listener calls it. */
  private async fetchHistory(): Promise<void> {
    if (this.fetching) {
      this.refetch = true;
      return;
    }
    this.fetching = true;
    try {
      do {
        this.refetch = false;
        this.historyReads++;
        try {
          this.history = await this.store.history({ limit: HISTORY_LIMIT });
          this.error = null;
        } catch (e) {
          this.error = errorMessage(e);
        }
        this.broadcast();
      } while (this.refetch);
    } finally {
      this.fetching = false;
    }
  }

  state(): BoardState {
    const leases = [...this.watcher.current.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    // Now, not the time of the last reading: the page counts down from it.
    const storeNowMs = Math.round(this.watcher.storeNow() ?? Date.now());
    const lastOf = new Map<string, HistoryEntry>();
    for (const h of this.history) lastOf.set(h.name, h);
    const recent = this.history.filter((h) => h.atMs >= storeNowMs - HISTORY_WINDOW_MS);
    return {
      store: this.store.description,
      listen: this.listen,
      remote: this.remote,
      storeNowMs,
      leases: leases.map((l) => {
        const h = lastOf.get(l.name);
        return {
          name: l.name,
          state: l.state,
          holder: l.holder,
          token: l.token.toString(),
          expiresAtMs: l.expiresAtMs,
          storeNowMs: l.storeNowMs,
          termStartedAtMs: l.termStartedAtMs,
          last:
            h === undefined
              ? null
              : { event: h.event, atMs: h.atMs, holder: h.holder, previousHolder: h.previousHolder, detail: h.detail, token: h.token.toString() },
        };
      }),
      history: recent.map((h) => ({ id: h.id.toString(), name: h.name, event: h.event, holder: h.holder, previousHolder: h.previousHolder, token: h.token.toString(), atMs: h.atMs, detail: h.detail })),
      error: this.error,
      reads: { total: this.watcher.reads.total + this.historyReads, list: this.watcher.reads.total, history: this.historyReads },
      changes: this.changes,
      clients: this.clients.size,
      refused: this.refused,
      dropped: this.dropped,
      uptimeMs: Math.round(performance.now() - this.startedAt),
    };
  }

  /** One state to every client, at most every BROADCAST_MIN_MS (a later call waits; the state it sends is the newest). */
  private broadcast(): void {
    const wait = this.lastBroadcast + BROADCAST_MIN_MS - performance.now();
    if (wait > 0) {
      if (this.broadcastTimer === undefined) {
        this.broadcastTimer = setTimeout(() => {
          this.broadcastTimer = undefined;
          this.broadcast();
        }, wait);
        this.broadcastTimer.unref();
      }
      return;
    }
    this.lastBroadcast = performance.now();
    if (this.clients.size === 0) return;
    const chunk = `event: state\ndata: ${JSON.stringify(this.state())}\n\n`;
    for (const c of this.clients) this.send(c, chunk);
  }

  subscribe(res: ServerResponse): void {
    if (this.clients.size >= this.maxClients) {
      this.refused++;
      this.report('refused', `refused a dashboard client: ${this.maxClients} live pages are open (--max-clients)`);
      res
        .writeHead(503, { 'content-type': 'text/plain', 'retry-after': '30', 'cache-control': 'no-store' })
        .end(`this dashboard serves at most ${this.maxClients} live pages at once (--max-clients); close one, or try again later\n`);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-content-type-options': 'nosniff' });
    res.write('retry: 1000\n\n');
    const c: Client = { res, since: undefined, stale: false };
    this.clients.add(c);
    res.on('close', () => this.clients.delete(c));
    // From memory: a new browser costs the store nothing.
    this.send(c, `event: state\ndata: ${JSON.stringify(this.state())}\n\n`);
  }

  async close(): Promise<void> {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    if (this.sweep !== undefined) clearInterval(this.sweep);
    if (this.broadcastTimer !== undefined) clearTimeout(this.broadcastTimer);
    for (const c of this.clients) c.res.end();
    this.clients.clear();
    await this.watcher.close();
  }
}

const SECURITY_HEADERS = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'content-security-policy': "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
};

/** The request handler: the page, its event stream, and the state as JSON (for curl and scripts). */
export function boardHandler(board: Board, loopbackOnly: boolean): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    if (loopbackOnly) {
      const host = (req.headers.host ?? '').replace(/:\d+$/, '');
      if (!isLoopback(host)) {
        res.writeHead(403, { 'content-type': 'text/plain' }).end('this dashboard only answers loopback names (localhost, 127.0.0.1, [::1])\n');
        return;
      }
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('read-only: GET and HEAD only\n');
      return;
    }
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/' || path === '/index.html') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', ...SECURITY_HEADERS }).end(PAGE_HTML);
    } else if (path === '/events') {
      board.subscribe(res);
    } else if (path === '/state.json') {
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store', ...SECURITY_HEADERS }).end(JSON.stringify(board.state()));
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    }
  };
}

export async function dashboardCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(DASHBOARD_SPEC, argv);
  if (values.help === true) {
    out(DASHBOARD_USAGE);
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals.length > 0) throw usageError(`dashboard takes no operands, got ${JSON.stringify(positionals[0])}; see \`leasehold dashboard --help\``);
  const portText = values.port ?? process.env['LEASEHOLD_DASHBOARD_PORT'] ?? '7373';
  if (!/^\d{1,5}$/.test(portText) || Number(portText) > 65535) throw usageError(`--port ${JSON.stringify(portText)} is not a port; give a whole number from 0 to 65535`);
  const host = values.host ?? process.env['LEASEHOLD_DASHBOARD_HOST'] ?? '127.0.0.1';
  const loopback = isLoopback(host);
  if (!loopback && values['allow-remote'] !== true) {
    throw usageError(`--host ${host} is not loopback: everyone who can reach it would see every lease and holder; add --allow-remote if that is meant`);
  }
  const maxClientsText = values['max-clients'] ?? String(DEFAULT_MAX_CLIENTS);
  if (!/^\d{1,6}$/.test(maxClientsText) || Number(maxClientsText) < 1) {
    throw usageError(`--max-clients ${JSON.stringify(maxClientsText)} is not a count; give a whole number from 1 to 999999`);
  }
  const clientTimeoutMs = durationOption(values['client-timeout'], 'client-timeout', '', {}) ?? DEFAULT_CLIENT_TIMEOUT_MS;
  if (clientTimeoutMs < 100) throw usageError(`--client-timeout ${formatMs(clientTimeoutMs)} would drop healthy pages; use at least 100ms`);
  const { store } = await openStoreFromFlags(values);
  const board = new Board(store, { maxClients: Number(maxClientsText), clientTimeoutMs, warn: (m) => cliLog().warn(m) });
  let server: Server | undefined;
  try {
    await requireCurrentSchema(store);
    await board.start();
    server = limitedServer(boardHandler(board, loopback), { maxConnections: board.maxConnections });
    const s = server;
    const url = await new Promise<string>((resolve, reject) => {
      s.once('error', (e: NodeJS.ErrnoException) =>
        reject(new CliError(EXIT.USAGE, e.code === 'EADDRINUSE' ? `port ${portText} on ${host} is in use; pick another with --port` : `cannot listen on ${host}:${portText}: ${errorMessage(e)}`)),
      );
      s.listen(Number(portText), host, () => {
        const a = s.address() as AddressInfo;
        resolve(`http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}/`);
      });
    });
    board.listen = url;
    board.remote = !loopback;
    if (!loopback) cliLog().warn(`the dashboard listens on ${host}, not only on loopback: anyone who can reach ${url} sees every lease, holder and revocation reason`);
    out(`dashboard at ${url} (read-only; Ctrl-C stops it)`);
    await new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve()).once('SIGTERM', () => resolve());
    });
    return EXIT.OK;
  } finally {
    server?.closeAllConnections();
    await board.close();
    await new Promise<void>((resolve) => (server === undefined ? resolve() : server.close(() => resolve())));
    await store.close();
  }
}
