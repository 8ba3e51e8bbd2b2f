/**
 * Releases, coalesced: a process closing with N held leases sends one release per lease from
 * the same synchronous loop (Leasehold.close maps every lease to its close). A port with
 * `releaseMany` gets them as one call per batch of at most its `maxClaimBatch`, as acquisitions
 * and renewals are batched; a port without it gets one `release` per lease, as before.
 *
 * A batch is cut at the end of the current job (a microtask): releases started together travel
 * together, and a lone release waits no timer. Each caller gets its own row's answer, or the
 * call's error (a release is best effort: the caller has already stood down, and an unanswered
 * release only means the lease expires instead).
 */
import type { LeasePort, ReleaseRequest } from './port.js';
import { MAX_BATCH } from './renewal-batcher.js';

interface Pending {
  request: ReleaseRequest;
  resolve(released: boolean): void;
  reject(err: unknown): void;
}

export class ReleaseBatcher {
  private queue: Pending[] = [];
  private scheduled = false;

  constructor(private readonly store: LeasePort) {}

  release(request: ReleaseRequest): Promise<boolean> {
    if (this.store.releaseMany === undefined) return this.store.release(request);
    return new Promise<boolean>((resolve, reject) => {
      this.queue.push({ request, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        queueMicrotask(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    const queue = this.queue;
    this.queue = [];
    const cap = Math.max(1, this.store.maxClaimBatch ?? MAX_BATCH);
    // One name per batch: a store answers per row by name, and a withdrawal and a release of the
    // same lease (a contender stopping as its holder closes) must each get their own answer.
    const batches: Array<{ rows: Pending[]; names: Set<string> }> = [];
    for (const p of queue) {
      let batch = batches.find((b) => b.rows.length < cap && !b.names.has(p.request.name));
      if (batch === undefined) batches.push((batch = { rows: [], names: new Set() }));
      batch.rows.push(p);
      batch.names.add(p.request.name);
    }
    for (const batch of batches) void this.send(batch.rows);
  }

  private async send(batch: Pending[]): Promise<void> {
    if (batch.length === 1) {
      const [p] = batch;
      await this.store.release(p!.request).then(p!.resolve, p!.reject);
      return;
    }
    try {
      const answers = await this.store.releaseMany!(batch.map((p) => p.request));
      if (answers.length !== batch.length) throw new Error(`releaseMany answered ${answers.length} rows for ${batch.length} releases`);
      batch.forEach((p, i) => p.resolve(answers[i] === true));
    } catch (err) {
      for (const p of batch) p.reject(err);
    }
  }
}
