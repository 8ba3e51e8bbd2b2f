/**
 * The dashboard's shared state and its browsers: one LeaseWatcher (one store subscription, reads
 * bounded like a follower's, see src/observe), one history read per change it sees, the
 * schedules' ledgers (./schedules.ts) and the fleet (./fleet.ts), all shared by every browser: a
 * browser that connects gets the last state from memory.
 *
 * Limits (issue 28: ten clients that never read grew a dashboard from 57 MB to 2.4 GB in a
 * minute): at most `maxClients` event streams; each has at most one state waiting to be sent
 * (a newer state replaces it, so a slow browser sees fewer, newer states, never a backlog); a
 * client that has not taken a state within `clientTimeoutMs` is disconnected; states go out at
 * most every 100ms whatever the store does.
 */
import type { ServerResponse } from 'node:http';
import type { HistoryEntry, LeaseStore } from '../../backends/store.js';
import { ConfigError, errorMessage } from '../../core/errors.js';
import type { Fleet } from '../../fleet/fleet.js';
import { LeaseWatcher, type LeaseView } from '../../observe/index.js';
import type { SlotLedgerPort } from '../../scheduler/ledger.js';
import { FleetReader, type AgentView, type ResourceView } from './fleet.js';
import { ScheduleReader, isJobLease, type ScheduleRow } from './schedules.js';

export const DEFAULT_MAX_CLIENTS = 64;
export const DEFAULT_CLIENT_TIMEOUT_MS = 30_000;

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
  /** Store reads since start, by kind: the watcher's lease lists, histories, slot-ledger reads, fleet agent readings, fleet resource pages. */
  reads: { total: number; list: number; history: number; ledger: number; records: number; fleet: number; resources: number };
  schedules: ScheduleRow[];
  /** Null when this store has no slot ledger. */
  schedulesError: string | null;
  /** `resourcesMore`: more resources on record than the page shown. */
  fleet: { agents: AgentView[]; resources: ResourceView[]; resourcesMore: boolean; readAtMs: number; error: string | null; available: boolean };
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

/** Where the schedules and fleet views read from; each is optional (a store without one shows why). */
export interface BoardSources {
  ledger?: SlotLedgerPort;
  fleet?: Fleet;
  /** Why there is no ledger or fleet (shown on the page). */
  ledgerMissing?: string;
  fleetMissing?: string;
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
  private readonly schedules: ScheduleReader | undefined;
  private readonly fleet: FleetReader | undefined;
  listen = '';
  remote = false;

  /** @throws {ConfigError} a limit that is not a whole number >= 1. */
  constructor(
    private readonly store: LeaseStore,
    limits: BoardLimits = {},
    private readonly sources: BoardSources = {},
  ) {
    this.maxClients = positiveInt(limits.maxClients, DEFAULT_MAX_CLIENTS, 'maxClients');
    this.clientTimeoutMs = positiveInt(limits.clientTimeoutMs, DEFAULT_CLIENT_TIMEOUT_MS, 'clientTimeoutMs');
    this.warn = limits.warn ?? (() => {});
    this.watcher = new LeaseWatcher(store, { minIntervalMs: 100, idleIntervalMs: IDLE_MS, heldRefresh: 0.5 });
    if (sources.ledger !== undefined) this.schedules = new ScheduleReader(sources.ledger, () => this.broadcast());
    if (sources.fleet !== undefined) this.fleet = new FleetReader(sources.fleet, () => this.broadcast(), () => this.clients.size > 0);
    this.watcher.on('update', (leases, changes) => {
      this.error = null;
      this.schedules?.update(leases, changes.map((c) => c.lease.name));
      // Agents' liveness leases renew and change all the time; the timeline and history are the job leases'.
      changes = changes.filter((c) => isJobLease(c.lease.name));
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
    this.schedules?.start();
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
    const leases = [...this.watcher.current.values()].filter((l) => isJobLease(l.name)).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    // Now, not the time of the last reading: the page counts down from it.
    const storeNowMs = Math.round(this.watcher.storeNow() ?? Date.now());
    const lastOf = new Map<string, HistoryEntry>();
    for (const h of this.history) lastOf.set(h.name, h);
    const recent = this.history.filter((h) => h.atMs >= storeNowMs - HISTORY_WINDOW_MS && isJobLease(h.name));
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
      reads: {
        total:
          this.watcher.reads.total + this.historyReads + (this.schedules?.reads ?? 0) + (this.schedules?.recordReads ?? 0) + (this.fleet?.reads ?? 0) + (this.fleet?.resourceReads ?? 0),
        list: this.watcher.reads.total,
        history: this.historyReads,
        ledger: this.schedules?.reads ?? 0,
        records: this.schedules?.recordReads ?? 0,
        fleet: this.fleet?.reads ?? 0,
        resources: this.fleet?.resourceReads ?? 0,
      },
      schedules: this.schedules?.rows() ?? [],
      schedulesError: this.schedules === undefined ? (this.sources.ledgerMissing ?? 'no slot ledger') : this.schedules.error,
      fleet: {
        agents: this.fleet?.rows() ?? [],
        resources: this.fleet?.resources() ?? [],
        resourcesMore: this.fleet?.resourcesMore ?? false,
        readAtMs: this.fleet?.readAtMs ?? 0,
        error: this.fleet === undefined ? (this.sources.fleetMissing ?? 'no fleet registry') : this.fleet.error,
        available: this.fleet !== undefined,
      },
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
    // The fleet is read only while someone watches: the first browser starts its readings.
    this.fleet?.wake();
    // From memory: a new browser costs the store nothing.
    this.send(c, `event: state\ndata: ${JSON.stringify(this.state())}\n\n`);
  }

  async close(): Promise<void> {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    if (this.sweep !== undefined) clearInterval(this.sweep);
    if (this.broadcastTimer !== undefined) clearTimeout(this.broadcastTimer);
    for (const c of this.clients) c.res.end();
    this.clients.clear();
    this.schedules?.close();
    this.fleet?.close();
    await this.watcher.close();
  }
}

