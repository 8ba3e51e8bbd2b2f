/**
 * The reference store: every answer comes from the claim rule (core/claim-rule.ts), over rows
 * kept in memory. For tests of code that uses leasehold (with a clock you control), and as the
 * proof that the exported conformance suite accepts a store that follows the rule. It is one
 * process's memory: it protects nothing across processes.
 */
import { ClosedError, ConfigError } from '../core/errors.js';
import { canEndTerm, CONFLICT_DETAIL, decideClaim, endedRow, leaseState, nextToken, rowAfterClaim, type LeaseRowState } from '../core/claim-rule.js';
import type { CallOptions, ClaimRequest, ClaimResult, FreedListener, ReleaseRequest } from '../core/port.js';
import { checkClaimBatch, historyLimit } from '../backends/checks.js';
import type { HistoryEntry, LeaseInfo, LeaseStore, MigrateOptions, MigrateResult, RevokeResult, SchemaStatus } from '../backends/store.js';

const MEMORY_SCHEMA_VERSION = 1;

interface Row extends LeaseRowState {
  termStartedAtMs: number | null;
  renewedAtMs: number | null;
}

/** The rows, history and listeners that every handle opened on one memory store shares. */
export class MemoryState {
  readonly rows = new Map<string, Row>();
  readonly history: HistoryEntry[] = [];
  readonly listeners = new Set<FreedListener>();
  floor = 0n;
  private nextId = 1n;

  record(e: Omit<HistoryEntry, 'id'>): void {
    this.history.push({ ...e, id: this.nextId++ });
  }

  freed(name: string): void {
    // Listeners run after the call that freed the lease returns, as a store's notification would.
    for (const l of [...this.listeners]) queueMicrotask(() => l(name));
  }
}

export interface MemoryStoreOptions {
  /** The store's clock (default `Date.now`). Pass a fake clock to drive expiry from a test. */
  now?: () => number;
  /** Another handle's state, to share its leases (what a second process would see). */
  state?: MemoryState;
}

export class MemoryStore implements LeaseStore {
  readonly kind = 'memory';
  /** ClaimRequest.unlessReleasedSince is refused from the row the claim reads (port.ts). */
  readonly honoursReleasedSince = true as const;
  readonly description = 'memory (this process only)';
  readonly state: MemoryState;
  private readonly clock: () => number;
  private closed = false;
  private readonly stops = new Set<() => Promise<void>>();

  constructor(options: MemoryStoreOptions = {}) {
    this.clock = options.now ?? Date.now;
    this.state = options.state ?? new MemoryState();
  }

  /** Another handle on the same leases, as a second process would open. */
  open(): MemoryStore {
    return new MemoryStore({ now: this.clock, state: this.state });
  }

  private begin(options: CallOptions | undefined): number {
    if (this.closed) throw new ClosedError('this MemoryStore is closed; open a new store');
    options?.signal?.throwIfAborted();
    return this.clock();
  }

  migrate(options?: MigrateOptions): Promise<MigrateResult> {
    return this.call(options, (now) => {
      const out: MigrateResult = { current: MEMORY_SCHEMA_VERSION, expected: MEMORY_SCHEMA_VERSION };
      if (options?.minToken === undefined) return out;
      if (typeof options.minToken !== 'bigint' || options.minToken < 0n) throw new ConfigError(`minToken must be a bigint >= 0, got ${String(options.minToken)}`);
      const raised = options.minToken > this.state.floor;
      if (raised) this.state.floor = options.minToken;
      // As the SQL stores do: a term whose token the floor passed is ended, so its holder stands
      // down instead of renewing a token that fenced resources may already refuse.
      let endedTerms = 0;
      for (const [name, row] of this.state.rows) {
        if (row.token > this.state.floor || row.holder === null) continue;
        this.state.rows.set(name, { ...row, ...endedRow(row, 'revoked', now) });
        const detail = `leasehold migrate --min-token ${options.minToken}: the token floor is now ${this.state.floor}`;
        this.state.record({ name, event: 'revoked', holder: null, previousHolder: row.holder, token: row.token, atMs: now, detail });
        this.state.freed(name);
        endedTerms++;
      }
      return { ...out, tokenFloor: { floor: this.state.floor, raised, endedTerms } };
    });
  }

  schemaStatus(options?: CallOptions): Promise<SchemaStatus> {
    return this.call(options, () => ({ current: MEMORY_SCHEMA_VERSION, expected: MEMORY_SCHEMA_VERSION }));
  }

  claim(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> {
    return this.call(options, (now) => {
      checkClaimBatch(requests);
      return requests.map((req): ClaimResult => {
        const row = this.state.rows.get(req.name);
        // ClaimRequest.unlessReleasedSince: a term granted since then and released by its holder did the work.
        if (req.expect === null && req.unlessReleasedSince !== undefined && row !== undefined && row.holder === null && row.endedBy === 'released' && row.termStartedAtMs !== null && row.termStartedAtMs >= req.unlessReleasedSince) {
          return { name: req.name, storeNowMs: now, outcome: 'busy', holder: null, token: row.token, expiresAtMs: null, releasedSince: true };
        }
        const d = decideClaim(row, req, now, this.state.floor);
        const after = rowAfterClaim(row, req, d, now);
        if (after !== undefined) {
          this.state.rows.set(req.name, {
            ...after,
            termStartedAtMs: d.outcome === 'acquired' ? now : (row?.termStartedAtMs ?? null),
            renewedAtMs: d.outcome === 'acquired' || d.outcome === 'renewed' ? now : (row?.renewedAtMs ?? null),
          });
        }
        const base = { name: req.name, storeNowMs: now };
        switch (d.outcome) {
          case 'acquired':
            this.state.record({ name: req.name, event: d.event, holder: req.holder, previousHolder: d.previousHolder, token: d.token, atMs: now, detail: null });
            return { ...base, outcome: 'acquired', token: d.token, holder: req.holder, expiresAtMs: d.expiresAtMs };
          case 'renewed':
            return { ...base, outcome: 'renewed', token: d.token, holder: req.holder, expiresAtMs: d.expiresAtMs };
          case 'busy':
            return { ...base, outcome: 'busy', holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs, ...(row?.termStartedAtMs == null ? {} : { grantedAtMs: row.termStartedAtMs }) };
          case 'lost':
            if (d.endTerm) {
              this.state.record({ name: req.name, event: 'conflict', holder: null, previousHolder: req.holder, token: d.token!, atMs: now, detail: CONFLICT_DETAIL });
              this.state.freed(req.name);
            }
            return { ...base, outcome: 'lost', reason: d.reason, holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs };
        }
      });
    });
  }

  release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    return this.call(options, (now) => this.end(req.name, 'released', null, req, now).revoked);
  }

  releaseMany(requests: readonly ReleaseRequest[], options?: CallOptions): Promise<boolean[]> {
    return this.call(options, (now) => requests.map((req) => this.end(req.name, 'released', null, req, now).revoked));
  }

  revoke(name: string, reason: string, options?: CallOptions): Promise<RevokeResult> {
    return this.call(options, (now) => this.end(name, 'revoked', reason, null, now));
  }

  private end(name: string, how: 'released' | 'revoked', detail: string | null, by: ReleaseRequest | null, now: number): RevokeResult {
    const row = this.state.rows.get(name);
    if (!canEndTerm(row, by)) return { revoked: false, previousHolder: null, token: row?.token ?? null };
    this.state.rows.set(name, { ...row, ...endedRow(row, how, now) });
    this.state.record({ name, event: how, holder: null, previousHolder: row.holder, token: row.token, atMs: now, detail });
    this.state.freed(name);
    return { revoked: true, previousHolder: row.holder, token: row.token };
  }

  list(options?: CallOptions & { name?: string }): Promise<LeaseInfo[]> {
    return this.call(options, (now) =>
      [...this.state.rows]
        .filter(([name]) => options?.name === undefined || name === options.name)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([name, r]) => ({
          name,
          holder: r.holder,
          token: r.token,
          state: leaseState(r.holder, r.expiresAtMs, now),
          expiresAtMs: r.expiresAtMs,
          storeNowMs: now,
          termStartedAtMs: r.termStartedAtMs,
          renewedAtMs: r.renewedAtMs,
        })),
    );
  }

  history(options?: CallOptions & { name?: string; limit?: number }): Promise<HistoryEntry[]> {
    return this.call(options, () => {
      const limit = historyLimit(options?.limit);
      if (limit === 0) return [];
      const mine = this.state.history.filter((h) => options?.name === undefined || h.name === options.name);
      return mine.slice(-limit);
    });
  }

  now(options?: CallOptions): Promise<number> {
    return this.call(options, (now) => now);
  }

  nextToken(options?: CallOptions & { name?: string }): Promise<bigint> {
    return this.call(options, () => nextToken(options?.name === undefined ? undefined : this.state.rows.get(options.name)?.token, this.state.floor));
  }

  watchFreed(listener: FreedListener): Promise<() => Promise<void>> {
    return this.call(undefined, () => {
      this.state.listeners.add(listener);
      const stop = (): Promise<void> => {
        this.state.listeners.delete(listener);
        this.stops.delete(stop);
        return Promise.resolve();
      };
      this.stops.add(stop);
      return stop;
    });
  }

  close(): Promise<void> {
    this.closed = true;
    for (const stop of [...this.stops]) void stop();
    return Promise.resolve();
  }

  /** Runs one call atomically (it is synchronous) and answers asynchronously, as a real store does. */
  private call<T>(options: CallOptions | undefined, fn: (nowMs: number) => T): Promise<T> {
    try {
      return Promise.resolve(fn(this.begin(options)));
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }
}
