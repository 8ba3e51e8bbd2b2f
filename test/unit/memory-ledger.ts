/**
 * A slot ledger in memory for the slot gate's unit tests: rows by key, skipped slots with their
 * reasons, and a `hold` that keeps a completion on its way. The gate's ordering is the property
 * these tests prove; the ledgers themselves are proven against real stores by the conformance suite.
 */
import type { SlotClaimRequest, SlotClaimResult, SlotCompletion, SlotLedgerPort, SlotRecord, SlotSkipRequest, SlotTerm } from '../../src/scheduler/ledger.js';

export class MemoryLedger implements SlotLedgerPort {
  readonly kind = 'unit';
  readonly rows = new Map<string, SlotRecord>();
  readonly skipped: Array<{ key: string; reason: string }> = [];
  /** While set, complete() waits for it: an outcome on its way to the store. */
  hold: Promise<void> | undefined;
  constructor(private readonly now: () => number) {}

  private put(req: SlotTerm, key: string, slotAtMs: number | null, status: SlotRecord['status'], reason: string | null): void {
    this.rows.set(key, { name: req.name, key, slotAtMs, status, token: req.token, holder: req.holder, startedAtMs: null, endedAtMs: null, exitCode: null, reason });
  }

  claim(req: SlotClaimRequest): Promise<SlotClaimResult> {
    const storeNowMs = this.now();
    if (req.slotAtMs !== null && req.slotAtMs > storeNowMs) return Promise.resolve({ outcome: 'early', storeNowMs });
    const row = this.rows.get(req.key);
    if (row !== undefined && row.status !== 'claimed' && row.status !== 'interrupted') return Promise.resolve({ outcome: 'done', storeNowMs, record: row });
    const rerunOf = row?.status === 'interrupted' ? row.token : null;
    this.put(req, req.key, req.slotAtMs, 'claimed', null);
    return Promise.resolve({ outcome: 'claimed', storeNowMs, rerunOf });
  }
  skip(req: SlotSkipRequest): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }> {
    let skipped = 0;
    for (const s of req.slots) {
      if (this.rows.has(s.key)) continue;
      this.skipped.push({ key: s.key, reason: req.reason });
      this.put(req, s.key, s.slotAtMs, 'skipped', req.reason);
      skipped++;
    }
    return Promise.resolve({ fenced: false, skipped, storeNowMs: this.now() });
  }
  async complete(req: SlotCompletion): Promise<{ completed: boolean; storeNowMs: number }> {
    if (this.hold !== undefined) await this.hold;
    const row = this.rows.get(req.key);
    this.put(req, req.key, row?.slotAtMs ?? null, req.status, req.reason);
    return { completed: true, storeNowMs: this.now() };
  }
  interruptStale(term: SlotTerm): Promise<{ fenced: boolean; interrupted: number; storeNowMs: number }> {
    let interrupted = 0;
    for (const row of this.rows.values()) {
      if (row.status !== 'claimed' || row.token >= term.token) continue;
      row.status = 'interrupted';
      interrupted++;
    }
    return Promise.resolve({ fenced: false, interrupted, storeNowMs: this.now() });
  }
  records(_name: string, options: { sinceMs?: number; untilMs?: number } = {}): Promise<SlotRecord[]> {
    const rows = [...this.rows.values()].filter((r) => r.slotAtMs === null || ((options.sinceMs === undefined || r.slotAtMs > options.sinceMs) && (options.untilMs === undefined || r.slotAtMs <= options.untilMs)));
    return Promise.resolve(rows.sort((a, b) => (a.slotAtMs ?? 0) - (b.slotAtMs ?? 0)));
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}
