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
  LostReason,
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
 * A store in memory that follows the contract in src/backends/store.ts (expectations 1-7 and
 * 4b), the same rule the SQLite store implements in SQL, on a clock the test controls. A unit
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

  private claimOne(req: ClaimRequest, now: number): ClaimResult {
    const row = this.rows.get(req.name);
    const expires = now + req.ttlMs;
    const live = row !== undefined && row.holder !== null && row.expiresAt !== null && row.expiresAt > now;
    if (req.expect !== null) {
      if (live && row.holder === req.holder && row.nonce !== null && req.expect.includes(row.nonce)) {
        row.nonce = req.nextNonce;
        row.expiresAt = expires;
        row.renewedAt = now;
        return { name: req.name, outcome: 'renewed', token: row.token, holder: req.holder, expiresAtMs: expires, storeNowMs: now };
      }
      if (live && row.holder === req.holder) {
        // 4b: two processes renew one term (a snapshot restored twice): end it for both.
        Object.assign(row, { holder: null, nonce: null, expiresAt: now, endedBy: 'conflict' });
        this.record(req.name, 'conflict', null, req.holder, row.token, now);
        this.notify(req.name);
        return { name: req.name, outcome: 'lost', reason: 'cloned', holder: null, token: row.token, expiresAtMs: now, storeNowMs: now };
      }
      return {
        name: req.name,
        outcome: 'lost',
        reason: lostReason(row, req),
        holder: row?.holder ?? null,
        token: row?.token ?? null,
        expiresAtMs: row?.expiresAt ?? null,
        storeNowMs: now,
      };
    }
    if (live) return { name: req.name, outcome: 'busy', holder: row.holder, token: row.token, expiresAtMs: row.expiresAt, storeNowMs: now };
    const token = (row?.token ?? 0n) + 1n;
    const event = row === undefined || row.holder === null ? 'acquired' : 'takeover';
    this.record(req.name, event, req.holder, row?.holder ?? null, token, now);
    this.rows.set(req.name, { holder: req.holder, nonce: req.nextNonce, token, expiresAt: expires, startedAt: now, renewedAt: now, endedBy: null });
    return { name: req.name, outcome: 'acquired', token, holder: req.holder, expiresAtMs: expires, storeNowMs: now };
  }

  async release(req: ReleaseRequest): Promise<boolean> {
    this.releases.push({ ...req, expect: [...req.expect] });
    if (this.mode.kind === 'fail') throw this.mode.error;
    const row = this.rows.get(req.name);
    if (row === undefined || row.holder === null || row.holder !== req.holder || row.nonce === null || !req.expect.includes(row.nonce)) return false;
    this.end(req.name, row, 'released', null);
    return true;
  }

  async revoke(name: string, reason: string): Promise<RevokeResult> {
    const row = this.rows.get(name);
    if (row === undefined || row.holder === null) return { revoked: false, previousHolder: null, token: row?.token ?? null };
    const previousHolder = row.holder;
    this.end(name, row, 'revoked', reason);
    return { revoked: true, previousHolder, token: row.token };
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

function lostReason(row: Row | undefined, req: ClaimRequest): LostReason {
  if (row === undefined) return 'expired';
  const nonceOk = row.nonce !== null && (req.expect ?? []).includes(row.nonce);
  if (row.holder === req.holder && nonceOk) return 'expired';
  if (row.holder === req.holder) return 'cloned';
  if (row.holder === null && row.endedBy === 'revoked') return 'revoked';
  if (row.holder === null && row.endedBy === 'released') return 'released';
  if (row.holder === null && row.endedBy === 'conflict') return 'cloned';
  if (row.holder === null) return 'expired';
  return 'superseded';
}
