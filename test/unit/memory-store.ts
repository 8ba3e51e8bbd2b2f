import { StoreUnavailableError } from '../../src/core/errors.js';
import type { CallOptions, ClaimRequest, ClaimResult, FreedListener, ReleaseRequest } from '../../src/backends/store.js';
import { MemoryStore as ReferenceStore } from '../../src/testing/memory-store.js';

/** One claim round trip as the engine sent it, for tests about batching. */
export interface ClaimCall {
  requests: ClaimRequest[];
  at: number;
}

/** A row as the unit tests read it. */
export interface UnitRow {
  holder: string | null;
  nonce: string | null;
  token: bigint;
  expiresAt: number | null;
  endedBy: 'released' | 'revoked' | 'conflict' | null;
}

type Mode = { kind: 'ok' } | { kind: 'fail'; error: Error } | { kind: 'hold' };

/**
 * The exported reference store (src/testing/memory-store.ts: every answer is the pure claim
 * rule's, the rule the conformance suite checks every real store against), on a clock the test
 * controls, with the faults no real store produces on demand: every call failing (outcome
 * unknown), claims applied but their answers held back (an answer lost or late), notifications
 * that never arrive. It records what the engine sent, for tests about batching.
 */
export class MemoryStore extends ReferenceStore {
  readonly calls: ClaimCall[] = [];
  readonly releases: ReleaseRequest[] = [];
  private mode: Mode = { kind: 'ok' };
  private held: Array<() => void> = [];
  private readonly storeClock: () => number;
  /** When true, no "freed" notifications go out (a channel that missed them). */
  muted = false;

  /** `clock` is the store's clock (expiry is judged by it alone). */
  constructor(clock: () => number) {
    super({ now: clock });
    this.storeClock = clock;
  }

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

  row(name: string): Readonly<UnitRow> | undefined {
    const r = this.state.rows.get(name);
    return r && { holder: r.holder, nonce: r.nonce, token: r.token, expiresAt: r.expiresAtMs, endedBy: r.endedBy };
  }

  override async claim(requests: readonly ClaimRequest[], options?: CallOptions): Promise<ClaimResult[]> {
    this.calls.push({ requests: requests.map((r) => ({ ...r })), at: this.storeClock() });
    if (this.mode.kind === 'fail') throw this.mode.error;
    const results = await super.claim(requests, options);
    if (this.mode.kind === 'hold') return new Promise((resolve) => this.held.push(() => resolve(results)));
    return results;
  }

  override async release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    this.releases.push({ ...req, expect: [...req.expect] });
    if (this.mode.kind === 'fail') throw this.mode.error;
    return super.release(req, options);
  }

  /** Each releaseMany call's names, in the order sent (its rows are in `releases` too). */
  readonly releaseBatches: string[][] = [];

  override async releaseMany(requests: readonly ReleaseRequest[], options?: CallOptions): Promise<boolean[]> {
    this.releaseBatches.push(requests.map((r) => r.name));
    for (const req of requests) this.releases.push({ ...req, expect: [...req.expect] });
    if (this.mode.kind === 'fail') throw this.mode.error;
    return super.releaseMany(requests, options);
  }

  override watchFreed(listener: FreedListener): Promise<() => Promise<void>> {
    return super.watchFreed((name) => {
      if (!this.muted) listener(name);
    });
  }
}
