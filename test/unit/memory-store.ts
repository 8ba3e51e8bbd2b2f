import { canEndTerm, decideClaim, rowAfterClaim, type LeaseRowState } from '../../src/core/claim-rule.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import type {
  CallOptions,
  ClaimRequest,
  ClaimResult,
  FreedListener,
  HistoryEntry,
  HistoryEvent,
  LeaseInfo,
  LeaseStore,
  MigrateResult,
  ReleaseRequest,
  RevokeResult,
  SchemaStatus,
} from '../../src/backends/store.js';

interface Row {
  holder: string | null;
  nonce: string | null;
  token: bigint;
  expiresAt: number | null;
  startedAt: number | null;
  renewedAt: number | null;
  endedBy: 'released' | 'revoked' | 'conflict' | null;
}

/** One claim round trip as the engine sent it, for tests about batching. */
export interface ClaimCall {
  requests: ClaimRequest[];
  at: number;
}

type Mode = { kind: 'ok' } | { kind: 'fail'; error: Error } | { kind: 'hold' };

/**
 * A store in memory whose every claim is decided by the pure claim rule (src/core/claim-rule.ts,
 * the rule the conformance suite checks every real store against), on a clock the test controls. A unit
 * test can also make it fail (outcome unknown), or apply claims but hold their answers back
 * (an answer lost or late), which no real store does on demand.
 */
export class MemoryStore implements LeaseStore {
  readonly kind = 'memory';
  readonly description = 'memory (unit tests)';
  readonly calls: ClaimCall[] = [];
  readonly releases: ReleaseRequest[] = [];
  private readonly rows = new Map<string, Row>();
  private readonly log: HistoryEntry[] = [];
  private readonly listeners = new Set<FreedListener>();
  private mode: Mode = { kind: 'ok' };
  private held: Array<() => void> = [];
  private historyId = 0n;
  /** When true, no "freed" notifications go out (a channel that missed them). */
  muted = false;

  /** `now` is the store's clock (expiry is judged by it alone). */
  constructor(private readonly clock: () => number) {}

  /** Every claim (and release) from now on throws without touching a row: by default StoreUnavailableError (outcome unknown). */
  fail(error: Error = new StoreUnavailableError('memory store: down (unit test)', { retryable: true })): void {
    this.mode = { kind: 'fail', error };
  }

  /** Claims from now on are applied at once but answered only on deliver() (or never). */
  hold(): void {
    this.mode = { kind: 'hold' };
  }

  /** Back to normal; held answers stay held until deliver(). */
  heal(): void {
    this.mode = { kind: 'ok' };
  }

  /** Delivers every held answer, in order. */
  deliver(): void {
    for (const d of this.held.splice(0)) d();
  }

  get heldAnswers(): number {
    return this.held.length;
  }

  row(name: string): Readonly<Row> | undefined {
    return this.rows.get(name);
  }

  async migrate(): Promise<MigrateResult> {
    return { current: 1, expected: 1 };
  }

  async schemaStatus(): Promise<SchemaStatus> {
    return { current: 1, expected: 1 };
  }

  claim(requests: readonly ClaimRequest[], _options?: CallOptions): Promise<ClaimResult[]> {
    const now = this.clock();
    this.calls.push({ requests: requests.map((r) => ({ ...r })), at: now });
    if (this.mode.kind === 'fail') return Promise.reject(this.mode.error);
    const results = requests.map((req) => this.claimOne(req, now));
    if (this.mode.kind === 'hold') return new Promise((resolve) => this.held.push(() => resolve(results)));
    return Promise.resolve(results);
  }

  /** The decision is the pure claim rule's (src/core/claim-rule.ts); this store only keeps rows, history and notifications. */
  private claimOne(req: ClaimRequest, now: number): ClaimResult {
    const row = this.rows.get(req.name);
    const state: LeaseRowState | undefined = row && { holder: row.holder, nonce: row.nonce, token: row.token, expiresAtMs: row.expiresAt, endedBy: row.endedBy };
    const d = decideClaim(state, req, now);
    const next = rowAfterClaim(state, req, d, now);
    if (next !== undefined) {
      this.rows.set(req.name, {
        holder: next.holder,
        nonce: next.nonce,
        token: next.token,
        expiresAt: next.expiresAtMs,
        endedBy: next.endedBy,
        startedAt: d.outcome === 'acquired' ? now : (row?.startedAt ?? null),
        renewedAt: d.outcome === 'lost' ? (row?.renewedAt ?? null) : now,
      });
    }
    const base = { name: req.name, storeNowMs: now };
    switch (d.outcome) {
      case 'acquired':
        this.record(req.name, d.event, req.holder, d.previousHolder, d.token, now);
        return { ...base, outcome: 'acquired', token: d.token, holder: req.holder, expiresAtMs: d.expiresAtMs };
      case 'renewed':
        return { ...base, outcome: 'renewed', token: d.token, holder: req.holder, expiresAtMs: d.expiresAtMs };
      case 'busy':
        return { ...base, outcome: 'busy', holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs };
      case 'lost':
        if (d.endTerm) {
          // 4b: two processes renew one term (a snapshot restored twice): end it for both.
          this.record(req.name, 'conflict', null, req.holder, row!.token, now);
          this.notify(req.name);
        }
        return { ...base, outcome: 'lost', reason: d.reason, holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs };
    }
  }

  async release(req: ReleaseRequest): Promise<boolean> {
    this.releases.push({ ...req, expect: [...req.expect] });
    if (this.mode.kind === 'fail') throw this.mode.error;
    const row = this.rows.get(req.name);
    if (row === undefined || !canEndTerm(this.stateOf(row), { holder: req.holder, expect: req.expect })) return false;
    this.end(req.name, row, 'released', null);
    return true;
  }

  async revoke(name: string, reason: string): Promise<RevokeResult> {
    const row = this.rows.get(name);
    if (row === undefined || !canEndTerm(this.stateOf(row), null)) return { revoked: false, previousHolder: null, token: row?.token ?? null };
    const previousHolder = row.holder;
    this.end(name, row, 'revoked', reason);
    return { revoked: true, previousHolder, token: row.token };
  }

  private stateOf(row: Row): LeaseRowState {
    return { holder: row.holder, nonce: row.nonce, token: row.token, expiresAtMs: row.expiresAt, endedBy: row.endedBy };
  }

  private end(name: string, row: Row, event: 'released' | 'revoked', detail: string | null): void {
    const now = this.clock();
    const previous = row.holder;
    Object.assign(row, { holder: null, nonce: null, expiresAt: now, endedBy: event });
    this.record(name, event, null, previous, row.token, now, detail);
    this.notify(name);
  }

  private record(name: string, event: HistoryEvent, holder: string | null, previousHolder: string | null, token: bigint, atMs: number, detail: string | null = null): void {
    this.log.push({ id: ++this.historyId, name, event, holder, previousHolder, token, atMs, detail });
  }

  private notify(name: string): void {
    if (this.muted) return;
    for (const l of this.listeners) l(name);
  }

  async list(options?: CallOptions & { name?: string }): Promise<LeaseInfo[]> {
    const now = this.clock();
    return [...this.rows]
      .filter(([n]) => options?.name === undefined || n === options.name)
      .map(([name, r]) => ({
        name,
        holder: r.holder,
        token: r.token,
        state: r.holder === null ? 'free' : r.expiresAt !== null && r.expiresAt > now ? 'held' : 'expired',
        expiresAtMs: r.expiresAt,
        storeNowMs: now,
        termStartedAtMs: r.startedAt,
        renewedAtMs: r.renewedAt,
      }));
  }

  async history(options?: CallOptions & { name?: string; limit?: number }): Promise<HistoryEntry[]> {
    return this.log.filter((h) => options?.name === undefined || h.name === options.name).slice(-(options?.limit ?? 1000));
  }

  async now(): Promise<number> {
    return this.clock();
  }

  async watchFreed(listener: FreedListener): Promise<() => Promise<void>> {
    this.listeners.add(listener);
    return async () => {
      this.listeners.delete(listener);
    };
  }

  async close(): Promise<void> {}
}

