/**
 * `leasehold dashboard`: a read-only page in three views, updated live over server-sent events:
 * leases (job leases: holder, token, time to expiry by the store's clock, state, a timeline of
 * terms and revocations), schedules (each lease with scheduled slot-ledger rows: holder, the last
 * slots with outcome, missed and interrupted slots) and fleet (agents with heartbeat age by the
 * store's clock and state; the first page of resources with owner and generation, owner-dead
 * highlighted).
 *
 * Load and limits: see ./dashboard/board.ts (one shared watcher, history per change, ledgers per
 * schedule change at most once a second, the fleet every 2s while a browser is connected (its
 * resources page only when ownership changed, or every 30s), one
 * state queued per client at most). The server caps connections and request time
 * (observe/http-limits.ts).
 *
 * Exposure: loopback by default. Any other address needs --allow-remote and prints a warning
 * (the page shows it too). On loopback, requests whose Host header is not a loopback name are
 * refused, so a web page elsewhere cannot read it through DNS rebinding. GET and HEAD only.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import { openSlotLedger } from '../backends/index.js';
import { errorMessage } from '../core/errors.js';
import type { Fleet } from '../fleet/fleet.js';
import { openFleet } from '../fleet/open.js';
import type { SlotLedgerPort } from '../scheduler/ledger.js';
import { limitedServer } from '../observe/http-limits.js';
import { CliError, EXIT, cliLog, durationOption, formatMs, logFormatOption, openStoreFromFlags, out, requireCurrentSchema, setLogContext, usageError } from './common.js';
import { Board, DEFAULT_CLIENT_TIMEOUT_MS, DEFAULT_MAX_CLIENTS, type BoardSources } from './dashboard/board.js';
import { PAGE_HTML } from './dashboard/page.js';

import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

export { Board, type BoardLimits, type BoardSources, type BoardState } from './dashboard/board.js';

export const DASHBOARD_SPEC = defineCommand({
  name: 'dashboard',
  summary: 'A read-only web page of leases, schedules and fleet agents, updated live; on 127.0.0.1 unless told otherwise.',
  about: `Serves a read-only page with three views. Leases: every job lease with its holder, token,
time to expiry (by the store's clock, ticking live) and state, and a timeline of its terms and
revocations over the last hour. Schedules: every lease with slots in the slot ledger (\`leasehold
cron\`), its holder, and its last slots with outcome, who ran them and when, missed, skipped and
interrupted slots marked. Fleet: the agents, with heartbeat age by the store's clock, state
(live, draining, stale, deregistered), labels and owned count, and the first 200 resources by
name with owner and generation, those whose owner is dead highlighted. Updates arrive over
server-sent events from one shared watch of the store: ten browsers cost the store what one does.`,
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

function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || (isIP(h) === 4 && h.startsWith('127.'));
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
  const { store, url: storeUrl } = await openStoreFromFlags(values);
  let board: Board | undefined;
  let server: Server | undefined;
  let ledger: SlotLedgerPort | undefined;
  let fleet: Fleet | undefined;
  try {
    await requireCurrentSchema(store);
    // A store without a ledger or a fleet still gets its leases view; the page says why the others are empty.
    const sources: BoardSources = {};
    try {
      sources.ledger = ledger = await openSlotLedger(store, storeUrl);
    } catch (e) {
      sources.ledgerMissing = errorMessage(e);
    }
    try {
      sources.fleet = fleet = await openFleet(store);
    } catch (e) {
      sources.fleetMissing = errorMessage(e);
    }
    board = new Board(store, { maxClients: Number(maxClientsText), clientTimeoutMs, warn: (m) => cliLog().warn(m) }, sources);
    await board.start();
    const b = board;
    server = limitedServer(boardHandler(b, loopback), { maxConnections: b.maxConnections });
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
    await board?.close();
    await ledger?.close();
    await fleet?.close();
    await new Promise<void>((resolve) => (server === undefined ? resolve() : server.close(() => resolve())));
    await store.close();
  }
}
