/**
 * A slot ledger in memory over the unit tests' MemoryStore, on the fake clock's world time: the
 * same rule (decideSlotClaim) and the same fencing by the lease row as the real ledgers, so the
 * scheduler's logic can be walked through hours of slots without sleeping. Claims about a store
 * are made against the real ones (test/conformance/slots.test.ts), never this.
 */
import { decideSlotClaim, type SlotClaimRequest, type SlotClaimResult, type SlotCompletion, type SlotLedgerPort, type SlotRecord, type SlotSkipRequest, type SlotTerm } from '../../src/scheduler/ledger.js';
import type { MemoryStore } from '../unit/memory-store.js';

export class MemoryLedger implements SlotLedgerPort {
  readonly kind = 'memory';
  readonly rows = new Map<string, SlotRecord>();
  /** Called after each claim is applied, before its answer is returned (a test's hook). */
  afterClaim: ((req: SlotClaimRequest, result: SlotClaimResult) => void) | undefined;

  constructor(
    private readonly store: MemoryStore,
    private readonly now: () => number,
  ) {}

  private held(t: SlotTerm, now: number): boolean {
    const r = this.store.row(t.name);
    return r !== undefined && r.holder === t.holder && r.token === t.token && r.expiresAt !== null && r.expiresAt > now;
  }

  private id(name: string, key: string): string {
    return `${name}\u0000${key}`;
  }

  /** Seeds a row as an earlier term left it. */
  put(row: Pick<SlotRecord, 'name' | 'key' | 'slotAtMs' | 'status' | 'token'>): void {
    this.rows.set(this.id(row.name, row.key), { holder: 'earlier', startedAtMs: null, endedAtMs: null, exitCode: null, reason: null, ...row });
  }

  async claim(req: SlotClaimRequest): Promise<SlotClaimResult> {
    await Promise.resolve();
    const now = this.now();
    const id = this.id(req.name, req.key);
    const d = decideSlotClaim(this.rows.get(id), req, this.held(req, now), now);
    const w = d.write;
    if (w.kind !== 'none') {
      this.rows.set(id, {
        name: req.name, key: req.key, slotAtMs: req.slotAtMs, status: w.status, token: req.token, holder: req.holder,
        startedAtMs: now, endedAtMs: w.status === 'skipped' ? now : null, exitCode: null, reason: w.reason,
      });
    }
    const result: SlotClaimResult =
      d.outcome === 'done' ? { outcome: 'done', storeNowMs: now, record: { ...this.rows.get(id)! } }
      : d.outcome === 'claimed' ? { outcome: 'claimed', storeNowMs: now, rerunOf: d.rerunOf }
      : { outcome: d.outcome, storeNowMs: now };
    this.afterClaim?.(req, result);
    return result;
  }

  async skip(req: SlotSkipRequest): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }> {
    await Promise.resolve();
    const now = this.now();
    if (!this.held(req, now)) return { fenced: true, skipped: 0, storeNowMs: now };
    let skipped = 0;
    for (const s of req.slots) {
      const id = this.id(req.name, s.key);
      if (this.rows.has(id)) continue;
      this.rows.set(id, { name: req.name, key: s.key, slotAtMs: s.slotAtMs, status: 'skipped', token: req.token, holder: req.holder, startedAtMs: now, endedAtMs: now, exitCode: null, reason: req.reason });
      skipped++;
    }
    return { fenced: false, skipped, storeNowMs: now };
  }

  async complete(req: SlotCompletion): Promise<{ completed: boolean; storeNowMs: number }> {
    await Promise.resolve();
    const now = this.now();
    const r = this.rows.get(this.id(req.name, req.key));
    if (r === undefined || r.token !== req.token || r.status !== 'claimed') return { completed: false, storeNowMs: now };
    Object.assign(r, { status: req.status, endedAtMs: now, exitCode: req.exitCode, reason: req.reason ?? r.reason });
    return { completed: true, storeNowMs: now };
  }

  async interruptStale(term: SlotTerm): Promise<{ fenced: boolean; interrupted: number; storeNowMs: number }> {
    await Promise.resolve();
    const now = this.now();
    if (!this.held(term, now)) return { fenced: true, interrupted: 0, storeNowMs: now };
    let interrupted = 0;
    for (const r of this.rows.values()) {
      if (r.name !== term.name || r.status !== 'claimed' || r.token >= term.token) continue;
      Object.assign(r, { status: 'interrupted', endedAtMs: now, reason: `its term ended before it completed (seen by term ${term.token})` });
      interrupted++;
    }
    return { fenced: false, interrupted, storeNowMs: now };
  }

  async records(name: string, options: { sinceMs?: number; untilMs?: number; limit?: number } = {}): Promise<SlotRecord[]> {
    await Promise.resolve();
    const at = (r: SlotRecord): number => r.slotAtMs ?? r.startedAtMs ?? 0;
    const rows = [...this.rows.values()]
      .filter((r) => r.name === name)
      .filter((r) => options.sinceMs === undefined || (r.slotAtMs !== null && r.slotAtMs > options.sinceMs))
      .filter((r) => options.untilMs === undefined || (r.slotAtMs !== null && r.slotAtMs <= options.untilMs))
      .sort((a, b) => at(a) - at(b) || (a.key < b.key ? -1 : 1));
    return rows.slice(-(options.limit ?? 1000)).map((r) => ({ ...r }));
  }

  async close(): Promise<void> {}
}
