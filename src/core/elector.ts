import { EventEmitter } from 'node:events';
import { AbortedError, errorMessage, type LeaseLostError } from './errors.js';
import type { Lease, Term } from './lease.js';
import type { LoggerLike } from './logger.js';

export interface ElectorHandlers {
  /** This process won a term. Start the work; stop it when `term.signal` aborts. */
  onElected(term: Term): void | Promise<void>;
  /** The term ended (lost, revoked, suspended, released). Called once per term. */
  onRevoked?(term: Term, error: LeaseLostError): void | Promise<void>;
}

export interface ElectorEvents {
  'handler-error': [error: unknown, handler: 'onElected' | 'onRevoked'];
}

/**
 * Contends for one lease for ever: wins a term, hands it to `onElected`, waits for it to end,
 * calls `onRevoked`, contends again. Built on Lease directly (acquire + renew + CAS), not on a
 * watch-based election, because that is where multi-leader bugs live.
 */
export class Elector extends EventEmitter<ElectorEvents> {
  readonly lease: Lease;
  private readonly handlers: ElectorHandlers;
  private readonly logger: LoggerLike;
  private readonly stopController = new AbortController();
  private loop: Promise<void> | undefined;

  constructor(lease: Lease, handlers: ElectorHandlers, logger: LoggerLike, signal?: AbortSignal) {
    super();
    this.lease = lease;
    this.handlers = handlers;
    this.logger = logger;
    signal?.addEventListener('abort', () => void this.stop(), { once: true });
  }

  /** @internal started by `leasehold.elect()` */
  start(): void {
    this.loop ??= this.run();
  }

  get isLeader(): boolean {
    return this.lease.isLeader;
  }

  private async run(): Promise<void> {
    const stop = this.stopController.signal;
    while (!stop.aborted) {
      let term: Term;
      try {
        term = await this.lease.acquire({ wait: true, signal: stop });
      } catch (err) {
        if (stop.aborted || err instanceof AbortedError || this.lease.state === 'closed') break;
        // acquire with wait only fails on closed leases or bad config: do not spin.
        this.logger.error({ lease: this.lease.name, err: errorMessage(err) }, 'leasehold: elector stopped');
        break;
      }
      await this.call('onElected', () => this.handlers.onElected(term));
      if (!term.signal.aborted) {
        await new Promise<void>((resolve) => term.signal.addEventListener('abort', () => resolve(), { once: true }));
      }
      const handler = this.handlers.onRevoked;
      if (handler !== undefined) await this.call('onRevoked', () => handler(term, term.signal.reason as LeaseLostError));
    }
  }

  private async call(which: 'onElected' | 'onRevoked', fn: () => void | Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (err) {
      this.logger.error({ lease: this.lease.name, err: errorMessage(err) }, `leasehold: ${which} threw`);
      this.emit('handler-error', err, which);
    }
  }

  /** Stops contending and releases the lease if held (after the term's signal has fired). */
  async stop(): Promise<void> {
    this.stopController.abort(new AbortedError('elector stopped'));
    await this.lease.release();
    await this.loop;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
