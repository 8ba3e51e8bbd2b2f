/**
 * Waiting for a store that is down as a command starts (`leasehold run`, `leasehold agent`): a
 * replica started during an outage (a pod rescheduled while the database fails over, a SQLite
 * disk that is full) waits within its --wait instead of exiting at once and crash-looping. A
 * missing or stale schema is not waited for: waiting will not fix it.
 */
import { StoreUnavailableError, errorMessage } from '../core/errors.js';
import { realClock, sleepOn } from '../core/clock.js';
import type { LeaseStore } from '../backends/store.js';
import { formatMs, requireCurrentSchema } from './common.js';

/** Where the wait's lines go: `run`'s Reporter, or the agent's own lines. */
export interface StoreWaitLines {
  /** The store answered after one or more failed attempts. */
  event(event: 'store-reachable', msg: string, fields?: Record<string, unknown>): void;
  /** The store is unreachable and the wait goes on (one line per STORE_WAIT_LINE_EVERY_MS). */
  problem(event: 'store-unavailable', msg: string, fields?: Record<string, unknown>): void;
}

/** While the store is unreachable at start, one line this often (not one per attempt). */
const STORE_WAIT_LINE_EVERY_MS = 5000;

/**
 * Opens the store (SQLite writes on open: a full disk refuses it) and checks its schema, retried
 * while the store is unreachable and the wait allows. Undefined: a signal stopped the wait. A
 * missing schema, and an outage that outlasts --wait, throw (exit 3). A store opened here is
 * closed here unless it is returned.
 */
export async function storeOnceReachable(
  open: () => Promise<{ store: LeaseStore; url: string }>,
  wait: boolean | number,
  signal: AbortSignal,
  report: StoreWaitLines,
  options: { firstTryUnbounded?: boolean } = {},
): Promise<{ store: LeaseStore; url: string } | undefined> {
  const startedMs = performance.now();
  const until = wait === true ? Infinity : wait === false ? 0 : startedMs + wait;
  let lastLineMs = -Infinity;
  let opened: { store: LeaseStore; url: string } | undefined;
  let ok = false;
  try {
    for (let attempt = 0; ; attempt++) {
      if (signal.aborted) return undefined;
      try {
        // Opening does not connect (network stores connect on the first call); SQLite's open is
        // synchronous. --no-wait: one attempt, bounded by the store's own timeouts only.
        opened ??= await open();
        // firstTryUnbounded (the agent, whose wait, --stale-after + --heartbeat, can be short): the first try is
        // bounded by the store's own timeouts, as it was before the agent waited at all; a loaded
        // host can take most of a short wait just loading a driver (CI51: 398 ms were left).
        const bounded = wait !== false && !(attempt === 0 && options.firstTryUnbounded === true);
        await withinWait(requireCurrentSchema(opened.store), bounded ? until - performance.now() : Infinity, signal);
        if (attempt > 0) report.event('store-reachable', `the store answers after ${formatMs(performance.now() - startedMs)}; contending`);
        ok = true;
        return opened;
      } catch (e) {
        if (!(e instanceof StoreUnavailableError)) throw e;
        const now = performance.now();
        if (now >= until) {
          if (attempt === 0) throw e;
          throw new StoreUnavailableError(`the store was still unreachable when the wait (${formatMs(now - startedMs)}) ran out: ${errorMessage(e)}`, { cause: e });
        }
        if (now - lastLineMs >= STORE_WAIT_LINE_EVERY_MS) {
          lastLineMs = now;
          const left = until === Infinity ? 'for ever (--wait)' : `for ${formatMs(until - now)} more`;
          report.problem('store-unavailable', `the store is unreachable (${errorMessage(e)}); retrying ${left}`, {
            waitedMs: Math.round(now - startedMs),
            error: e.code,
          });
        }
        // Quick at first (a store restarting), then every 2s: a down store is not hammered.
        await sleepOn(realClock, Math.min(until - now, Math.min(2000, 100 * 2 ** attempt) * (0.5 + Math.random() / 2)), signal);
      }
    }
  } finally {
    if (!ok) await opened?.store.close();
  }
}

/**
 * `p`, or a StoreUnavailableError once `ms` pass: one attempt (its connect included: the drivers
 * connect on the first call) never outlasts the wait, whatever the store's own timeouts are (a
 * listener that accepts and never answers holds a call for the driver's full timeout, 5s or
 * more). The abandoned call settles on its own; the store is closed after it.
 */
function withinWait<T>(p: Promise<T>, ms: number, signal: AbortSignal): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const late = new Promise<never>((_, reject) => {
    const give = (): void => reject(new StoreUnavailableError(`the store did not answer within the wait (${formatMs(Math.max(0, ms))} left)`));
    if (ms !== Infinity) timer = setTimeout(give, Math.max(0, ms));
    // A signal while a call hangs stops the wait now, not at the driver's timeout.
    onAbort = give;
    signal.addEventListener('abort', onAbort, { once: true });
  });
  // The loser of the race must not become an unhandled rejection.
  p.catch(() => {});
  return Promise.race([p, late]).finally(() => {
    clearTimeout(timer);
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  });
}
