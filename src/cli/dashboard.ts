/**
 * `leasehold dashboard`: a read-only page of every lease (holder, token, time to expiry by the
 * store's clock, state) and a timeline of terms and revocations from the history, updated live
 * over server-sent events.
 *
 * Load: one LeaseWatcher (one store subscription, reads bounded like a follower's, see
 * src/observe) and one history read per change it sees, shared by every browser: a browser
 * that connects gets the last state from memory and never causes a store read.
 *
 * Exposure: loopback by default. Any other address needs --allow-remote and prints a warning
 * (the page shows it too). On loopback, requests whose Host header is not a loopback name are
 * refused, so a web page elsewhere cannot read it through DNS rebinding. GET and HEAD only.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import type { HistoryEntry, LeaseStore } from '../backends/store.js';
import { errorMessage } from '../core/errors.js';
import { LeaseWatcher, type LeaseView } from '../observe/index.js';
import { CliError, EXIT, cliLog, logFormatOption, openStoreFromFlags, out, requireCurrentSchema, setLogContext, usageError } from './common.js';
import { PAGE_HTML } from './dashboard/page.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

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
    ...LOG_FLAGS,
  },
  footer: `Prints the page's URL on stdout, then serves until SIGINT/SIGTERM (exit 0). Exit 2 on usage
(a bad port, a remote --host without --allow-remote, a port in use); 3 store unreachable or
schema missing at start. Later store outages show on the page; the watch keeps retrying.`,
});

export const DASHBOARD_USAGE = helpText(DASHBOARD_SPEC);

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
  uptimeMs: number;
}

/** The shared state and its browsers. */
export class Board {
  private readonly watcher: LeaseWatcher;
  private readonly clients = new Set<ServerResponse>();
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

  constructor(private readonly store: LeaseStore) {
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
      for (const c of this.clients) c.write(': keep-alive\n\n');
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
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
      uptimeMs: Math.round(performance.now() - this.startedAt),
    };
  }

  private broadcast(): void {
    const data = JSON.stringify(this.state());
    for (const c of this.clients) c.write(`event: state\ndata: ${data}\n\n`);
  }

  subscribe(res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-content-type-options': 'nosniff' });
    res.write('retry: 1000\n\n');
    this.clients.add(res);
    res.on('close', () => this.clients.delete(res));
    // From memory: a new browser costs the store nothing.
    res.write(`event: state\ndata: ${JSON.stringify(this.state())}\n\n`);
  }

  async close(): Promise<void> {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    for (const c of this.clients) c.end();
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
  const { store } = await openStoreFromFlags(values);
  const board = new Board(store);
  let server: Server | undefined;
  try {
    await requireCurrentSchema(store);
    await board.start();
    server = createServer(boardHandler(board, loopback));
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
