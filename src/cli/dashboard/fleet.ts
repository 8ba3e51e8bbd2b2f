/**
 * The dashboard's fleet: the agents as the store sees them (`fleet.agents()`: one read joining
 * each agent's row to its liveness lease `agent/<id>`, judged by the store's clock), and the
 * first RESOURCES_SHOWN resources by name (`fleet.resources()`: one page) with owner and
 * generation. Read at most every FLEET_EVERY_MS and only while at least one browser is
 * connected: the reading is shared by every browser, and nobody watching costs the store nothing.
 *
 * Ownership changes only when a resource is placed, moved or removed, and each of those changes
 * an agent's owned count, which every agents reading carries: the resources page is read again
 * when the counts changed (or every RESOURCES_EVERY_MS, for changes that keep every count, such
 * as a remove and a place on one agent between two readings), not at every reading. Whether an
 * owner is dead is a question of the agent, so a resource's owner state comes from the newest
 * agents reading (the store's clock): an owner's death shows at the next reading, as the agent's
 * own state does.
 */
import type { AgentRow, Labels } from '../../fleet/port.js';
import type { Fleet, OwnerState, ResourceRow } from '../../fleet/fleet.js';
import { errorMessage } from '../../core/errors.js';

/** The fleet is read at most this often, whatever the number of browsers. */
const FLEET_EVERY_MS = 2000;
/** Resources shown: one page. A larger fleet's others are a `leasehold fleet resources` away. */
const RESOURCES_SHOWN = 200;
/** The resources page is read again at least this often while watched, whatever the owned counts. */
const RESOURCES_EVERY_MS = 30_000;

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

export interface ResourceView {
  resource: string;
  agent: string;
  generation: string;
  ownerState: OwnerState;
  /** The owner on record is stale or deregistered by the store's clock. */
  ownerDead: boolean;
  placedAtMs: number;
}

function agentState(a: AgentRow): AgentState {
  if (a.deregistered) return 'deregistered';
  if (!a.live) return 'stale';
  return a.draining ? 'draining' : 'live';
}

export class FleetReader {
  private agents: AgentView[] = [];
  private resourceRows: ResourceRow[] = [];
  /** More resources on record than RESOURCES_SHOWN. */
  resourcesMore = false;
  resourceReads = 0;
  private resourcesReadAt = -Infinity;
  /** The owned counts the resources page was read at: a change means ownership changed. */
  private ownedAtRead: string | null = null;
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
      const owned = this.agents.map((a) => `${a.id}=${a.owned}`).join(',');
      // A port of the caller's without `resources` (it is optional): agents only.
      const listable = this.fleet.port.resources !== undefined;
      if (listable && (owned !== this.ownedAtRead || performance.now() - this.resourcesReadAt >= RESOURCES_EVERY_MS)) {
        this.resourceReads++;
        this.resourcesReadAt = performance.now();
        const page = await this.fleet.resources({ limit: RESOURCES_SHOWN });
        this.resourceRows = page.resources;
        this.resourcesMore = page.next !== null;
        this.ownedAtRead = owned;
      }
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

  /** The resources read, each owner's state from the newest agents reading (an owner with no agent record: as the listing said). */
  resources(): ResourceView[] {
    const byId = new Map(this.agents.map((a) => [a.id, a]));
    return this.resourceRows.map((r) => {
      const a = byId.get(r.agent);
      const ownerState: OwnerState = a === undefined ? r.ownerState : a.state === 'deregistered' ? 'deregistered' : a.state === 'stale' ? 'stale' : 'live';
      return { resource: r.resource, agent: r.agent, generation: r.generation.toString(), ownerState, ownerDead: ownerState !== 'live', placedAtMs: r.placedAtMs };
    });
  }

  /** Stops reading; the fleet itself is its opener's to close. */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
  }
}
