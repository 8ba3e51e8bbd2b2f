/**
 * The stop signals (SIGTERM, SIGINT, SIGHUP) of a command that starts work before it can act on
 * them: `leasehold cron` starts its schedule, then its probe servers (an await), then installs the
 * handler that drains it. A signal in between used to take the default action, killing the replica
 * with no "stopping" line and no drain. Armed before the work starts, this keeps the first signal
 * and hands it to the handler as soon as there is one; later signals go straight to the handler.
 */
import { FORWARDED } from './supervisor.js';

export class StopSignals {
  private first: NodeJS.Signals | undefined;
  private handler: ((sig: NodeJS.Signals) => void) | undefined;
  private armed = false;
  private readonly listener = (sig: NodeJS.Signals): void => {
    if (this.handler !== undefined) this.handler(sig);
    else this.first ??= sig;
  };

  /** From now on a stop signal no longer kills the process: it is kept for the handler. */
  arm(): this {
    if (!this.armed) for (const s of FORWARDED) process.on(s, this.listener);
    this.armed = true;
    return this;
  }

  /** The first signal received, handled or not. */
  get received(): NodeJS.Signals | undefined {
    return this.first;
  }

  /** Sets the handler; a signal kept before this is handed to it at once. */
  handle(fn: (sig: NodeJS.Signals) => void): void {
    this.handler = (sig) => {
      this.first ??= sig;
      fn(sig);
    };
    if (this.first !== undefined) fn(this.first);
  }

  /** Stops listening (a signal after this takes the default action again). */
  disarm(): void {
    if (this.armed) for (const s of FORWARDED) process.off(s, this.listener);
    this.armed = false;
    this.handler = undefined;
  }
}
