import { EventEmitter } from 'node:events';
import { realClock, sleepOn, type Clock } from './clock.js';
import { AbortedError, LeaseholdError, errorMessage, type LeaseLostError } from './errors.js';
import type { Lease, Term } from './lease.js';
import type { LoggerLike } from './logger.js';

export interface ElectorHandlers {
  /** This process won a term. Start the work; stop it when `term.signal` aborts. */
  onElected(term: Term): void | Promise<void>;
  /** The term ended (lost, revoked, suspended, released). Called once per term. */
  onRevoked?(term: Term, error: LeaseLostError): void | Promise<void>;
}

export interface ElectorEvents {
  /** A handler threw. After `onElected` throws, the term is released so another replica can lead. */
  'handler-error': [error: unknown, handler: 'onElected' | 'onRevoked'];
  /**
   * Contending failed with an error that waiting alone will not fix (schema missing, bad
   * credentials, an SQL error: `SchemaError`, `ConfigError`, `StoreError`); the elector retries
   * with backoff. With no listener for this event, the first such error (and each new kind of
   * error after it) is also emitted as a process warning, printed on stderr by default. A store
   * that is merely down is retried inside `lease.acquire()`: see `elector.lease`'s `store-error`.
   */
  'contend-error': [error: unknown, retryInMs: number];
}

/**
 * Contends for one lease for ever: wins a term, hands it to `onElected`, waits for it to end,
 * calls `onRevoked`, contends again. Built on Lease directly (acquire + renew + CAS), not on a
 * watch-based election, because that is where multi-leader bugs live. It never stops on its
 * own, so an elector started before `leasehold migrate` recovers once the schema exists; but it
 * never fails in silence either: an error that stops it contending is emitted (`contend-error`),
 * logged (the logger, if given), kept in `lastError`, and, when nobody listens for
 * `contend-error`, raised as a process warning (`process.emitWarning`, code
 * LEASEHOLD_CANNOT_CONTEND: Node prints it on stderr unless run with --no-warnings). Not an
 * 'error' event: unlistened, that would crash the process, and the elector is meant to recover.
 */
export class Elector extends EventEmitter<ElectorEvents> {
  readonly lease: Lease;
  private readonly handlers: ElectorHandlers;
  private readonly logger: LoggerLike;
  private readonly clock: Clock;
  private readonly stopController = new AbortController();
  private readonly external: AbortSignal | undefined;
  private readonly onExternalAbort = (): void => void this.stop();
  private loop: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private _lastError: unknown;
  /** Error codes already raised as process warnings since the last term won. */
  private readonly warned = new Set<string>();

  constructor(lease: Lease, handlers: ElectorHandlers, logger: LoggerLike, signal?: AbortSignal, clock: Clock = realClock) {
    super();
    this.clock = clock;
    this.lease = lease;
    this.handlers = handlers;
    this.logger = logger;
    this.external = signal;
  }

  /** @internal started by `leasehold.elect()` */
  start(): void {
    if (this.external?.aborted === true) {
      void this.stop();
      return;
    }
    this.external?.addEventListener('abort', this.onExternalAbort, { once: true });
    this.loop ??= this.run();
  }

  get isLeader(): boolean {
    return this.lease.isLeader;
  }

  /** Why the last attempt to contend failed; undefined once a term has been won (or before any failure). */
  get lastError(): unknown {
    return this._lastError;
  }

  private async run(): Promise<void> {
    const stop = this.stopController.signal;
    let failures = 0;
    while (!stop.aborted) {
      let term: Term;
      try {
        term = await this.lease.acquire({ wait: true, signal: stop });
        failures = 0;
        this._lastError = undefined;
        this.warned.clear();
      } catch (err) {
        if (stop.aborted || err instanceof AbortedError || this.lease.state === 'closed') break;
        failures++;
        this._lastError = err;
        const retryInMs = Math.min(30_000, 500 * 2 ** Math.min(failures, 6)) * (0.5 + Math.random() / 2);
        this.logger.error({ lease: this.lease.name, err: errorMessage(err), retryInMs: Math.round(retryInMs) }, 'leasehold: elector could not contend; retrying');
        if (this.listenerCount('contend-error') > 0) this.emit('contend-error', err, retryInMs);
        else this.warn(err, retryInMs);
        await sleepOn(this.clock, retryInMs, stop);
        continue;
      }
      const started = await this.call('onElected', () => this.handlers.onElected(term));
      if (!started && !term.signal.aborted) {
        // The work did not start: holding the lease would keep every other replica idle too.
        await this.lease.release();
      }
      if (!term.signal.aborted) {
        await new Promise<void>((resolve) => term.signal.addEventListener('abort', () => resolve(), { once: true }));
      }
      const handler = this.handlers.onRevoked;
      if (handler !== undefined) await this.call('onRevoked', () => handler(term, term.signal.reason as LeaseLostError));
      // After a failed start, a stall or a suspected pause, this replica is the least healthy
      // one around: its release has woken the others, so let them take over before contending
      // again (it would otherwise often win its own lease straight back).
      const reason = (term.signal.reason as LeaseLostError | undefined)?.reason;
      if (!started || reason === 'suspended' || reason === 'stalled') await sleepOn(this.clock, this.lease.timing.renewMs, stop);
    }
  }

  /**
   * Nobody listens and the logger may be silent: say it where a human will see it. Once per kind
   * of error until a term is won, so a long outage is one line, not one per retry.
   */
  private warn(err: unknown, retryInMs: number): void {
    const code = err instanceof LeaseholdError ? err.code : err instanceof Error ? err.name : 'UNKNOWN';
    if (this.warned.has(code)) return;
    this.warned.add(code);
    process.emitWarning(
      `leasehold: the elector for lease "${this.lease.name}" cannot contend: ${errorMessage(err)} ` +
        `(retrying in ${Math.round(retryInMs)}ms, backing off to 30s; listen for 'contend-error' to handle it yourself)`,
      { type: 'LeaseholdWarning', code: 'LEASEHOLD_CANNOT_CONTEND' },
    );
  }

  private async call(which: 'onElected' | 'onRevoked', fn: () => void | Promise<void>): Promise<boolean> {
    try {
      await fn();
      return true;
    } catch (err) {
      this.logger.error({ lease: this.lease.name, err: errorMessage(err) }, `leasehold: ${which} threw`);
      this.emit('handler-error', err, which);
      return false;
    }
  }

  /**
   * Stops contending and closes the lease, releasing it if held (after the term's signal has
   * fired). Every call resolves when that release has reached the store: a second call (the
   * external signal's abort starts one, and its owner then calls stop() itself) used to find the
   * term already ended and resolve at once, while the first call's release was still in flight;
   * a caller that then closed the store lost the release (MySQL: "connection is in closed
   * state"), and the lease stayed held for a TTL.
   */
  stop(): Promise<void> {
    this.stopping ??= this.stopOnce();
    return this.stopping;
  }

  private async stopOnce(): Promise<void> {
    this.external?.removeEventListener('abort', this.onExternalAbort);
    this.stopController.abort(new AbortedError('elector stopped'));
    await this.lease.close();
    await this.loop;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
