/**
 * `leasehold/node-cron`: a node-cron 4 run coordinator. Every replica schedules the same named
 * task with `distributed: true`; each slot runs on one of them, recorded in the slot ledger with
 * the leader's fencing token, and a replica takes over when the leader dies.
 *
 *   import cron from 'node-cron';
 *   import { leaseholdCoordinator } from 'leasehold/node-cron';
 *   const coordinator = leaseholdCoordinator({ store: process.env.DATABASE_URL });
 *   const task = cron.schedule('0 * * * * *', async (ctx) => {
 *     const { token, signal } = coordinator.slot(ctx)!;  // fence your writes with token
 *   }, { name: 'report', distributed: true, runCoordinator: coordinator });
 *   coordinator.watch(task); // optional: contend at once, and record failures as 'failed'
 *
 * node-cron asks the coordinator once per task and slot (`shouldRun('report:2026-...Z')`), with
 * the slot's scheduled time in the key: replicas whose timers or clocks differ agree on it. A
 * slot the dead leader had started is recorded 'interrupted' then 'skipped' by the next leader
 * (node-cron gives a coordinator no way to run a past slot), and slots that fired while no
 * replica led are recorded 'skipped' with that reason: `leasehold cron history NAME` shows them.
 * The `distributedLease` option is not used: the lease's `ttl` here is.
 */
import type { RunCoordinator, ScheduledTask, TaskContext } from 'node-cron';
import { ConfigError, errorMessage } from '../core/errors.js';
import { validateLeaseName } from '../core/config.js';
import { SlotGate, type SlotGateOptions, type SlotRun } from '../scheduler/gate.js';
import { openScheduling, type Scheduling, type SchedulingSource } from '../scheduler/open.js';

export type { SlotRun } from '../scheduler/gate.js';
export type { SchedulingSource } from '../scheduler/open.js';

export interface LeaseholdCoordinatorOptions extends Omit<SlotGateOptions, 'onInterrupted'> {
  /** Prefix of each task's lease name (default none: the lease is the task's name). */
  prefix?: string;
}

/** node-cron's key: `${task name}:${slot ISO time}`. */
const KEY = /^(.*):(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)$/;
/** node-cron names an unnamed task with a random UUID: different on every replica. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export class LeaseholdCoordinator implements RunCoordinator {
  private readonly opened: Promise<Scheduling>;
  private readonly options: LeaseholdCoordinatorOptions;
  private readonly gates = new Map<string, Promise<SlotGate>>();
  private readonly running = new Map<string, { run: SlotRun; finish(status: 'succeeded' | 'failed', reason?: string | null): Promise<void>; recorded: Deferred }>();
  /** shouldRun calls still deciding: one may yet claim a slot, whose job close() must then wait for. */
  private readonly admitting = new Set<Promise<unknown>>();
  private readonly failed = new Map<string, string>();
  private closed = false;

  /** @internal built by leaseholdCoordinator */
  constructor(source: SchedulingSource, options: LeaseholdCoordinatorOptions) {
    this.options = options;
    this.opened = openScheduling(source);
    // Surfaced by the first shouldRun (fail-closed there); not an unhandled rejection meanwhile.
    this.opened.catch(() => undefined);
  }

  /** Called by node-cron before each slot; true on the one replica that claimed it. */
  async shouldRun(key: string, _ttlMs?: number): Promise<boolean> {
    const m = KEY.exec(key);
    if (m === null) throw new ConfigError(`node-cron asked about ${JSON.stringify(key)}, which is not "task-name:ISO-time"; is this node-cron 4?`);
    const [, task, iso] = m as unknown as [string, string, string];
    const admission = this.gate(task).then((gate) => gate.admit(Date.parse(iso)));
    this.admitting.add(admission);
    try {
      const a = await admission;
      if (a.run === undefined) return false;
      this.running.set(key, { ...a, recorded: deferred() });
      return true;
    } finally {
      this.admitting.delete(admission);
    }
  }

  /** Called by node-cron after the slot's job settled: records it succeeded (or failed, for a watched task). */
  async onComplete(key: string): Promise<void> {
    const a = this.running.get(key);
    if (a === undefined) return;
    this.running.delete(key);
    const failure = this.failed.get(key);
    this.failed.delete(key);
    try {
      await a.finish(failure === undefined ? 'succeeded' : 'failed', failure ?? null);
    } finally {
      a.recorded.resolve();
    }
  }

  /** The claimed slot of a running job (token, signal, idempotencyKey), from node-cron's context. */
  slot(ctx: Pick<TaskContext, 'date' | 'task'>): SlotRun | undefined {
    const name = ctx.task?.name;
    if (name === undefined) return undefined;
    return this.running.get(`${name}:${ctx.date.toISOString()}`)?.run;
  }

  /**
   * Contends for `task`'s lease now (rather than at its first slot), and records a slot whose
   * job threw as 'failed' with the error (node-cron tells a coordinator only that a job ended).
   */
  watch(task: ScheduledTask): this {
    if (task.name === undefined) throw this.unnamed();
    void this.gate(task.name).catch(() => undefined);
    task.on('execution:failed', (ctx) => {
      if (ctx.execution?.reason !== 'scheduled') return;
      this.failed.set(`${task.name!}:${ctx.date.toISOString()}`, errorMessage(ctx.execution.error ?? 'failed'));
    });
    return this;
  }

  /**
   * Stops contending (a running job's signal aborts), waits for a running job to settle and its
   * outcome to be recorded ('interrupted', owed to the next leader, when its term ended first),
   * then closes what this coordinator opened. Closing the ledger under a running job would leave
   * its slot 'claimed' until a next leader's takeover marks it, if there is one.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const gates = await Promise.allSettled([...this.gates.values()]);
    const stopping = Promise.all(gates.map((g) => (g.status === 'fulfilled' ? g.value.stop() : Promise.resolve())));
    await Promise.allSettled([...this.admitting]);
    // node-cron calls onComplete once the job settles, whatever it did: that records the slot.
    await Promise.all([...this.running.values()].map((r) => r.recorded.promise));
    await stopping;
    await (await this.opened).close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private unnamed(): ConfigError {
    return new ConfigError('a distributed node-cron task needs a name that is the same on every replica: cron.schedule(expr, fn, { name: "report", distributed: true, runCoordinator })');
  }

  private gate(task: string): Promise<SlotGate> {
    if (this.closed) return Promise.reject(new ConfigError('this leasehold coordinator is closed'));
    if (UUID.test(task)) return Promise.reject(this.unnamed());
    let g = this.gates.get(task);
    if (g === undefined) {
      const name = validateLeaseName(`${this.options.prefix ?? ''}${task}`);
      const { prefix: _p, ...gateOptions } = this.options;
      g = this.opened.then(({ leasehold, ledger }) => new SlotGate(leasehold, ledger, name, { ...gateOptions, onInterrupted: 'skip' }));
      this.gates.set(task, g);
    }
    return g;
  }
}

interface Deferred {
  promise: Promise<void>;
  resolve(): void;
}

/** Promise.withResolvers arrived in Node 22. */
function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((res) => (resolve = res));
  return { promise, resolve };
}

/**
 * A node-cron 4 `runCoordinator` over leasehold: give it as `runCoordinator` (with
 * `distributed: true`) to each task, or to `cron.setRunCoordinator()` for all of them.
 * @throws {ConfigError} (from shouldRun, which node-cron logs and skips) an unnamed task or a bad source.
 */
export function leaseholdCoordinator(source: SchedulingSource, options: LeaseholdCoordinatorOptions = {}): LeaseholdCoordinator {
  return new LeaseholdCoordinator(source, options);
}
