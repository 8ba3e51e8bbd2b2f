/**
 * `leasehold/nestjs`: @nestjs/schedule jobs that run once per slot across replicas.
 *
 *   @Module({ imports: [ScheduleModule.forRoot(), LeaseholdModule.forRoot({ store: process.env.DATABASE_URL! })] })
 *   class AppModule {}
 *
 *   class Reports {
 *     @Cron('0 * * * * *')
 *     @OncePerSlot('minute-report')
 *     async report() {
 *       const { token, signal, slot } = currentSlot(); // fence writes with token; stop when signal aborts
 *     }
 *   }
 *
 * Why `@Cron` + `runExclusive` in the body is not enough: both replicas' timers fire for the same
 * slot, a few milliseconds (or, with clocks apart, hundreds) apart. When the gap is longer than
 * the job, the first takes the lease, runs, and releases; the second then takes the free lease
 * and runs the same slot again. A lease
 * stops two runs at once, not two runs of one slot. `@OncePerSlot` names the slot (the schedule's
 * instant nearest the fire) and claims it in the slot ledger with the leader's fencing token, so
 * the second fire finds it done.
 *
 * The decorators are plain functions with NestJS's legacy signature (`experimentalDecorators`,
 * which every NestJS app compiles with); put `@OncePerSlot` directly under `@Cron`, `@Interval`
 * or `@Timeout` (either order works: the schedule's metadata is carried over to the wrapper).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createRequire } from 'node:module';
import type { DynamicModule, InjectionToken, ModuleMetadata, OptionalFactoryDependency, Provider } from '@nestjs/common';
import type * as NestCore from '@nestjs/core';
import { ConfigError, NotAcquiredError } from '../core/errors.js';
import { validateLeaseName } from '../core/config.js';
import { Leasehold } from '../core/leasehold.js';
import type { Elector } from '../core/elector.js';
import type { LeaseOptions, Term } from '../core/lease.js';
import { cronSchedule, everySchedule, intervalSlot, slotForFire, type IntervalFire, type Schedule } from '../scheduler/schedule.js';
import { SlotGate, type SlotGateOptions, type SlotRun } from '../scheduler/gate.js';
import { openScheduling, type Scheduling, type SchedulingSource } from '../scheduler/open.js';
import { runOncePer } from '../scheduler/once-per.js';

export type { SlotRun } from '../scheduler/gate.js';
export type { SchedulingSource } from '../scheduler/open.js';

/** Where the leases and the slot ledger live, and the defaults of every @OncePerSlot's lease. */
export type LeaseholdModuleOptions = SchedulingSource & Omit<SlotGateOptions, 'signal' | 'schedule'>;

export interface LeaseholdModuleAsyncOptions {
  imports?: ModuleMetadata['imports'];
  inject?: (InjectionToken | OptionalFactoryDependency)[];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- NestJS passes the injected values in `inject`'s order
  useFactory(...args: any[]): LeaseholdModuleOptions | Promise<LeaseholdModuleOptions>;
}

/** @nestjs/schedule's metadata keys and scheduler types (schedule.constants.ts, scheduler-type.enum.ts). */
const SCHEDULER_TYPE = 'SCHEDULER_TYPE';
const SCHEDULE_CRON_OPTIONS = 'SCHEDULE_CRON_OPTIONS';
const SCHEDULE_INTERVAL_OPTIONS = 'SCHEDULE_INTERVAL_OPTIONS';
const CRON = 1;
const TIMEOUT = 2;
const INTERVAL = 3;

/** The options token. */
export const LEASEHOLD_MODULE_OPTIONS = Symbol('LEASEHOLD_MODULE_OPTIONS');

interface ReflectMetadata {
  getMetadata?(key: unknown, target: object): unknown;
  getMetadataKeys?(target: object): unknown[];
  defineMetadata?(key: unknown, value: unknown, target: object): void;
}
const reflect = Reflect as unknown as ReflectMetadata;

const slots = new AsyncLocalStorage<SlotRun>();

/**
 * What each decorator made of a method: its wrapper function -> the lease it runs under. The
 * module finds the application's decorated methods (DiscoveryService) and starts their gates
 * before the first fire; the wrapper still starts one lazily for a method it did not find.
 */
const decorated = new WeakMap<object, { kind: 'once-per-slot' | 'exclusive'; name: string }>();

/** How long startup (or an undiscovered method's first call) waits for a first attempt at a lease. */
const FIRST_ATTEMPT_MS = 5000;

/** Settles once the elector's first attempt at its lease settled: won, found held, or the store failed. */
function firstAttempt(elector: Elector): Promise<void> {
  if (elector.lease.isLeader) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = setTimeout(done, FIRST_ATTEMPT_MS);
    timer.unref();
    function done(): void {
      clearTimeout(timer);
      elector.lease.off('acquired', done);
      elector.lease.off('busy', done);
      elector.lease.off('store-error', done);
      resolve();
    }
    elector.lease.once('acquired', done);
    elector.lease.once('busy', done);
    elector.lease.once('store-error', done);
  });
}

/**
 * @nestjs/core, loaded when a module is built (the application has loaded it by then), so that
 * importing `leasehold/nestjs` needs no NestJS. The same instance as the application's: its
 * DiscoveryService is the token Nest injects.
 */
const requireFromHere = createRequire(import.meta.url);
function nestCore(): typeof NestCore {
  try {
    return requireFromHere('@nestjs/core') as typeof NestCore;
  } catch (e) {
    throw new ConfigError('LeaseholdModule needs @nestjs/core (and @nestjs/common, @nestjs/schedule): npm install @nestjs/core', { cause: e });
  }
}

/**
 * The slot the calling @OncePerSlot method runs for: its fencing token, an AbortSignal that
 * aborts when the lease is lost, the slot's key and idempotency key.
 * @throws {ConfigError} outside a @OncePerSlot method.
 */
export function currentSlot(): SlotRun {
  const run = slots.getStore();
  if (run === undefined) throw new ConfigError('currentSlot() is only available inside a method decorated with @OncePerSlot, while it runs for a slot');
  return run;
}

/** The running module (one application per process). */
let active: LeaseholdRuntime | undefined;

/** @internal the module's provider: the scheduling it opened and one gate per lease name. */
export class LeaseholdRuntime {
  readonly leasehold: Leasehold;
  private readonly scheduling: Scheduling;
  private readonly defaults: Omit<SlotGateOptions, 'signal' | 'schedule'>;
  private readonly gates = new Map<string, SlotGate>();
  private readonly electors = new Map<string, Elector>();
  /** Each @Interval's previous fire on this replica, by lease name: its next fire counts periods from it. */
  private readonly intervalFires = new Map<string, IntervalFire>();
  /** Jobs running now: shutdown waits for them, so their outcome reaches the ledger before it closes. */
  private readonly running = new Set<Promise<unknown>>();

  private readonly discovery: NestCore.DiscoveryService | undefined;
  private readonly scanner: NestCore.MetadataScanner | undefined;

  constructor(scheduling: Scheduling, defaults: Omit<SlotGateOptions, 'signal' | 'schedule'>, discovery?: NestCore.DiscoveryService, scanner?: NestCore.MetadataScanner) {
    this.scheduling = scheduling;
    this.leasehold = scheduling.leasehold;
    this.defaults = defaults;
    this.discovery = discovery;
    this.scanner = scanner;
  }

  /**
   * Starts every decorated method's gate (or elector) and waits for its first attempt at the
   * lease (and, on the replica that won, its takeover), so the first fire finds a leader ready
   * to claim instead of starting to contend then: contending at the first fire made that fire's
   * job start late by the acquire and the takeover, long enough on a slow store for the next
   * fire to find it still running. onModuleInit, not onApplicationBootstrap: @nestjs/schedule
   * starts its timers in its onApplicationBootstrap, and Nest runs the modules' bootstrap hooks
   * one module after another in an order the application's imports decide, while every
   * module's onModuleInit has finished before the first bootstrap hook.
   * @throws {ConfigError} a decorated method with no schedule @OncePerSlot can name slots by.
   */
  async onModuleInit(): Promise<void> {
    if (this.discovery === undefined || this.scanner === undefined) return;
    const ready: Promise<void>[] = [];
    for (const wrapper of [...this.discovery.getControllers(), ...this.discovery.getProviders()]) {
      const instance: unknown = wrapper.instance;
      // A request-scoped provider has no instance yet; @nestjs/schedule does not schedule those either.
      if (typeof instance !== 'object' || instance === null || !wrapper.isDependencyTreeStatic()) continue;
      const proto: unknown = Object.getPrototypeOf(instance);
      if (typeof proto !== 'object' || proto === null) continue;
      for (const key of this.scanner.getAllMethodNames(proto)) {
        const method = (instance as Record<string, unknown>)[key];
        const found = typeof method === 'function' ? decorated.get(method) : undefined;
        if (found === undefined) continue;
        if (found.kind === 'exclusive') {
          ready.push(firstAttempt(this.elector(found.name)));
          continue;
        }
        const schedule = scheduleOf(method as object, found.name);
        // @Timeout: once per key, one attempt when it fires; there is no lease to hold before.
        if (schedule.kind === 'slots') ready.push(this.gate(found.name, schedule.schedule).ready());
      }
    }
    await Promise.all(ready);
  }

  /** @internal */
  gate(name: string, schedule: Schedule): SlotGate {
    let g = this.gates.get(name);
    if (g === undefined) {
      g = new SlotGate(this.scheduling.leasehold, this.scheduling.ledger, name, { ...this.defaults, schedule });
      this.gates.set(name, g);
    }
    return g;
  }

  /** @internal the slot of an @Interval fire now (see intervalSlot) */
  intervalSlot(name: string, periodMs: number, nowMs: number): number {
    const slotAtMs = intervalSlot(periodMs, nowMs, this.intervalFires.get(name));
    this.intervalFires.set(name, { slotAtMs, firedAtMs: nowMs });
    return slotAtMs;
  }

  /** @internal */
  track<T>(run: Promise<T>): Promise<T> {
    this.running.add(run);
    void run.catch(() => undefined).finally(() => this.running.delete(run));
    return run;
  }

  /** @internal one elector per @Exclusive name */
  elector(name: string): Elector {
    let e = this.electors.get(name);
    if (e === undefined) {
      e = this.leasehold.elect(name, { onElected: () => undefined }, this.leaseDefaults());
      this.electors.set(name, e);
    }
    return e;
  }

  /** @internal */
  hasElector(name: string): boolean {
    return this.electors.has(name);
  }

  /** @internal */
  async startElector(name: string): Promise<Elector> {
    const e = this.elector(name);
    await firstAttempt(e);
    return e;
  }

  private leaseDefaults(): LeaseOptions {
    const { onInterrupted: _o, catchUpWindow: _c, ...lease } = this.defaults;
    return lease;
  }

  /** @internal */
  get ledger(): Scheduling['ledger'] {
    return this.scheduling.ledger;
  }

  /** Called by NestJS on app.close() (and on a signal, with enableShutdownHooks()). */
  async onApplicationShutdown(): Promise<void> {
    if (active === this) active = undefined;
    // Stopping ends each term: a running job's signal aborts. Its outcome ('interrupted', owed to
    // the next leader) is recorded when it settles, so the ledger closes only after that; a
    // slot left 'claimed' would wait for the next leader's takeover to be marked at all.
    const stopping = Promise.all([...this.gates.values()].map((g) => g.stop()));
    await Promise.allSettled([...this.running]);
    await stopping;
    await Promise.all([...this.electors.values()].map((e) => e.stop()));
    await this.scheduling.close();
  }
}

function pickDefaults(options: LeaseholdModuleOptions): Omit<SlotGateOptions, 'signal' | 'schedule'> {
  const { leasehold: _l, ledger: _d, store: _s, logger: _g, ...rest } = options as LeaseholdModuleOptions & { leasehold?: unknown; ledger?: unknown; store?: unknown; logger?: unknown };
  return rest;
}

async function createRuntime(options: LeaseholdModuleOptions, discovery?: NestCore.DiscoveryService, scanner?: NestCore.MetadataScanner): Promise<LeaseholdRuntime> {
  if (active !== undefined) throw new ConfigError('LeaseholdModule is already running in this process: import LeaseholdModule.forRoot() once, in the root module');
  const runtime = new LeaseholdRuntime(await openScheduling(options), pickDefaults(options), discovery, scanner);
  active = runtime;
  return runtime;
}

/**
 * Provides `Leasehold` (inject it with `@Inject(Leasehold)`) and runs @OncePerSlot methods. The
 * store it opened is closed on application shutdown; one you passed in is yours to close.
 */
export class LeaseholdModule {
  static forRoot(options: LeaseholdModuleOptions): DynamicModule {
    return LeaseholdModule.build({ provide: LEASEHOLD_MODULE_OPTIONS, useValue: options });
  }

  static forRootAsync(options: LeaseholdModuleAsyncOptions): DynamicModule {
    const built = LeaseholdModule.build({ provide: LEASEHOLD_MODULE_OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] });
    return { ...built, imports: [...(built.imports ?? []), ...(options.imports ?? [])] };
  }

  private static build(optionsProvider: Provider): DynamicModule {
    const { DiscoveryModule, DiscoveryService, MetadataScanner } = nestCore();
    return {
      module: LeaseholdModule,
      global: true,
      imports: [DiscoveryModule],
      providers: [
        optionsProvider,
        { provide: LeaseholdRuntime, useFactory: createRuntime, inject: [LEASEHOLD_MODULE_OPTIONS, DiscoveryService, MetadataScanner] },
        { provide: Leasehold, useFactory: (rt: LeaseholdRuntime) => rt.leasehold, inject: [LeaseholdRuntime] },
      ],
      exports: [Leasehold, LeaseholdRuntime],
    };
  }
}

export interface OncePerSlotOptions {
  /** The lease (and ledger) name; default `ClassName.methodName`. The same on every replica. */
  name?: string;
  /** @Timeout only: the once-per key (default 'timeout': the first replica ever to fire runs it, once). */
  key?: () => string;
}

type Method = (this: unknown, ...args: unknown[]) => unknown;

/**
 * Each fire of the @Cron / @Interval / @Timeout method above it runs on one replica only; the
 * slot is claimed and completed in the slot ledger with the term's fencing token, which the
 * method reads with {@link currentSlot}. A fire on a replica that does not lead, or for a slot
 * already run, returns undefined without calling the method.
 */
export function OncePerSlot(nameOrOptions?: string | OncePerSlotOptions): MethodDecorator {
  const options: OncePerSlotOptions = typeof nameOrOptions === 'string' ? { name: nameOrOptions } : (nameOrOptions ?? {});
  return (target, propertyKey, descriptor) => {
    const original = descriptor.value as unknown as Method;
    if (typeof original !== 'function') throw new ConfigError(`@OncePerSlot goes on a method; ${String(propertyKey)} is not one`);
    const className = (target as { constructor?: { name?: string } }).constructor?.name ?? 'Anonymous';
    const name = validateLeaseName(options.name ?? `${className}.${String(propertyKey)}`);
    let schedule: ReturnType<typeof scheduleOf> | undefined;
    const wrapper = async function (this: unknown, ...args: unknown[]): Promise<unknown> {
      const rt = active;
      if (rt === undefined) throw new ConfigError(`@OncePerSlot ${name}: import LeaseholdModule.forRoot({ store }) in the application's root module`);
      schedule ??= scheduleOf(wrapper, name);
      if (schedule.kind === 'timeout') {
        try {
          const r = await runOncePer(options.key?.() ?? 'timeout', (ctx) => slots.run({ ...ctx, slot: ctx.key, slotAtMs: Date.now() }, () => original.apply(this, args)), {
            leasehold: rt.leasehold,
            ledger: rt.ledger,
            name,
            wait: false,
          });
          return r.ran ? r.value : undefined;
        } catch (e) {
          if (e instanceof NotAcquiredError) return undefined;
          throw e;
        }
      }
      const now = rt.leasehold.clock.wallNow();
      const slotAtMs = schedule.periodMs === undefined ? slotForFire(schedule.schedule, now) : rt.intervalSlot(name, schedule.periodMs, now);
      let value: unknown;
      await rt.track(
        rt.gate(name, schedule.schedule).run(slotAtMs, async (run) => {
          value = await slots.run(run, () => original.apply(this, args));
        }),
      );
      return value;
    };
    // @Cron above @OncePerSlot writes its metadata on the wrapper; below, on the original: carry it over.
    for (const key of reflect.getMetadataKeys?.(original) ?? []) reflect.defineMetadata?.(key, reflect.getMetadata?.(key, original), wrapper);
    Object.defineProperty(wrapper, 'name', { value: original.name });
    decorated.set(wrapper, { kind: 'once-per-slot', name });
    descriptor.value = wrapper as unknown as typeof descriptor.value;
    return descriptor;
  };
}

/** @Cron's fires are named by the schedule's nearest instant; @Interval's (periodMs) by intervalSlot. */
function scheduleOf(method: object, name: string): { kind: 'timeout' } | { kind: 'slots'; schedule: Schedule; periodMs?: number } {
  const type = reflect.getMetadata?.(SCHEDULER_TYPE, method);
  if (type === TIMEOUT) return { kind: 'timeout' };
  if (type === INTERVAL) {
    const { timeout } = (reflect.getMetadata?.(SCHEDULE_INTERVAL_OPTIONS, method) ?? {}) as { timeout?: number };
    // setInterval starts at boot, not on the epoch: its fires are counted onto the aligned grid.
    return { kind: 'slots', schedule: everySchedule(Number(timeout)), periodMs: Number(timeout) };
  }
  if (type === CRON) {
    const { cronTime, timeZone } = (reflect.getMetadata?.(SCHEDULE_CRON_OPTIONS, method) ?? {}) as { cronTime?: unknown; timeZone?: string };
    if (typeof cronTime !== 'string') throw new ConfigError(`@OncePerSlot ${name}: @Cron with a Date has one slot; use @Timeout or a cron expression`);
    return { kind: 'slots', schedule: cronSchedule(cronTime, timeZone ?? Intl.DateTimeFormat().resolvedOptions().timeZone) };
  }
  throw new ConfigError(`@OncePerSlot ${name}: put it under @Cron, @Interval or @Timeout from @nestjs/schedule (no schedule found on the method)`);
}

const terms = new AsyncLocalStorage<Term>();

/**
 * The term the calling @Exclusive method runs under: `token` to fence writes with, `signal` that
 * aborts when the lease is lost.
 * @throws {ConfigError} outside an @Exclusive method.
 */
export function currentTerm(): Term {
  const term = terms.getStore();
  if (term === undefined) throw new ConfigError('currentTerm() is only available inside a method decorated with @Exclusive, while it runs');
  return term;
}

/**
 * Only the replica that leads `name` runs the method, while it leads; on the others a call
 * returns undefined. Leadership, not slots: there is no ledger, so around a failover one fire
 * can run on the old leader (its lease not yet known lost) and the same instant's fire on the
 * new one. For "each slot once", use @OncePerSlot. Works on any method, scheduled or not.
 */
export function Exclusive(name?: string): MethodDecorator {
  return (target, propertyKey, descriptor) => {
    const original = descriptor.value as unknown as Method;
    if (typeof original !== 'function') throw new ConfigError(`@Exclusive goes on a method; ${String(propertyKey)} is not one`);
    const className = (target as { constructor?: { name?: string } }).constructor?.name ?? 'Anonymous';
    const lease = validateLeaseName(name ?? `${className}.${String(propertyKey)}`);
    const wrapper = async function (this: unknown, ...args: unknown[]): Promise<unknown> {
      const rt = active;
      if (rt === undefined) throw new ConfigError(`@Exclusive ${lease}: import LeaseholdModule.forRoot({ store }) in the application's root module`);
      // Started at startup for the application's providers; a method the module did not find
      // (not a provider) starts contending at its first call and waits for that first attempt.
      const elector = rt.hasElector(lease) ? rt.elector(lease) : await rt.startElector(lease);
      const term = elector.lease.isLeader ? elector.lease.currentTerm : undefined;
      if (term === undefined || term.signal.aborted) return undefined;
      return terms.run(term, () => original.apply(this, args));
    };
    for (const key of reflect.getMetadataKeys?.(original) ?? []) reflect.defineMetadata?.(key, reflect.getMetadata?.(key, original), wrapper);
    Object.defineProperty(wrapper, 'name', { value: original.name });
    decorated.set(wrapper, { kind: 'exclusive', name: lease });
    descriptor.value = wrapper as unknown as typeof descriptor.value;
    return descriptor;
  };
}
