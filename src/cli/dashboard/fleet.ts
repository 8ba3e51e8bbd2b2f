/**
 * The dashboard's fleet: the agents as the store sees them (`fleet.agents()`: one read joining
 * each agent's row to its liveness lease `agent/<id>`, judged by the store's clock). Read at most
 * every FLEET_EVERY_MS and only while at least one browser is connected: the reading is shared by
 * every browser, and nobody watching costs the store nothing.
 *
 * Resources are not listed: the fleet port answers `owner(resource)` for a name the caller
 * already knows, and has no call that lists ownership records. An agent's owned count is what
 * the page shows; owner-dead is shown per agent (a stale or deregistered agent that still owns
 * resources: each of them is owner-dead until reassigned).
 */
import type { AgentRow, Labels } from '../../fleet/port.js';
import type { Fleet } from '../../fleet/fleet.js';
import { errorMessage } from '../../core/errors.js';

/** The fleet is read at most this often, whatever the number of browsers. */
const FLEET_EVERY_MS = 2000;

type AgentState = 'live' | 'draining' | 'stale' | 'deregistered';

export interface AgentView {
  id: string;
  state: AgentState;
  labels: Labels;
  owned: number;
  heartbeatAgeMs: number | null;
  expiresInMs: number | null;
  startedAtMs: number;
  storeNowMs: number;
  /** Owns resources and is not alive: every resource it owns has a dead owner. */
  ownerDead: boolean;
}

function agentState(a: AgentRow): AgentState {
  if (a.deregistered) return 'deregistered';
  if (!a.live) return 'stale';
  return a.draining ? 'draining' : 'live';
}

export class FleetReader {
  private agents: AgentView[] = [];
  private timer: NodeJS.Timeout | undefined;
  private reading = false;
  private closed = false;
  /** Dashboard clock (ms since epoch) of the last reading; 0 before the first. */
  readAtMs = 0;
  reads = 0;
  private lastReadAt = -Infinity;
  error: string | null = null;

  constructor(
    private readonly fleet: Fleet,
    private readonly onChange: () => void,
    private readonly watched: () => boolean,
  ) {}

  /** Called when a browser connects (and on a timer while any is): reads unless one is in flight. */
  wake(): void {
    if (this.closed || this.timer !== undefined || this.reading) return;
    // Browsers that come and go cannot make it read more often than every FLEET_EVERY_MS.
    const wait = this.lastReadAt + FLEET_EVERY_MS - performance.now();
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.read();
    }, Math.max(0, wait));
    this.timer.unref();
  }

  /** Never throws: a timer calls it. */
  private async read(): Promise<void> {
    this.reading = true;
    this.reads++;
    this.lastReadAt = performance.now();
    try {
      const rows = await this.fleet.agents();
      this.agents = rows.map((a) => {
        const state = agentState(a);
        return {
          id: a.id,
          state,
          labels: a.labels,
          owned: a.owned,
          heartbeatAgeMs: a.heartbeatAgeMs,
          expiresInMs: a.expiresInMs,
          startedAtMs: a.startedAtMs,
          storeNowMs: a.storeNowMs,
          ownerDead: a.owned > 0 && (state === 'stale' || state === 'deregistered'),
        };
      });
      this.agents.sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
      this.readAtMs = Date.now();
      this.error = null;
    } catch (e) {
      this.error = `fleet: ${errorMessage(e)}`;
    } finally {
      this.reading = false;
    }
    if (this.closed) return;
    this.onChange();
    // The next reading only if someone is still watching; a browser that connects later wakes it.
    if (this.watched()) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        if (this.watched()) void this.read();
      }, FLEET_EVERY_MS);
      this.timer.unref();
    }
  }

  rows(): AgentView[] {
    return this.agents;
  }

  /** Stops reading; the fleet itself is its opener's to close. */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
  }
}
