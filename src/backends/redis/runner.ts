import { StoreUnavailableError } from '../../core/errors.js';
import type { RedisDriver } from './driver.js';
import { isNoScript, mapRedisError, type ErrorContext } from './errors.js';
import type { LuaScript } from './scripts.js';

/**
 * Runs leasehold's Lua scripts: EVALSHA first, EVAL once on NOSCRIPT (a restarted or flushed
 * Redis has an empty script cache; EVAL also re-caches the script), every call bounded by a
 * timeout and the caller's AbortSignal, every failure mapped to the error taxonomy.
 */
export class ScriptRunner {
  readonly driver: RedisDriver;
  readonly context: ErrorContext;
  readonly timeoutMs: number;

  constructor(driver: RedisDriver, context: ErrorContext, timeoutMs: number) {
    this.driver = driver;
    this.context = context;
    this.timeoutMs = timeoutMs;
  }

  /**
   * @throws {StoreUnavailableError} when Redis could not be reached or did not answer in time
   *   (the script may still have run: the outcome is unknown).
   */
  async run(script: LuaScript, keys: string[], args: string[], signal?: AbortSignal): Promise<unknown> {
    signal?.throwIfAborted();
    try {
      return await this.bounded(script, this.evalsha(script, keys, args), signal);
    } catch (err) {
      if (signal?.aborted === true && err === signal.reason) throw err;
      throw mapRedisError(err, this.context);
    }
  }

  private async evalsha(script: LuaScript, keys: string[], args: string[]): Promise<unknown> {
    try {
      return await this.driver.evalsha(script.sha, keys, args);
    } catch (err) {
      // Exactly one fallback: a second NOSCRIPT is reported, not retried in a loop.
      if (!isNoScript(err)) throw err;
      return await this.driver.eval(script.source, keys, args);
    }
  }

  /**
   * The clients leasehold creates have their own command timeout and no offline queue; a client
   * passed in may queue commands for ever while Redis is down, so every call also races a timer.
   */
  private async bounded<T>(script: LuaScript, p: Promise<T>, signal?: AbortSignal): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stop = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(
          new StoreUnavailableError(
            `Redis at ${this.context.where} did not answer the ${script.name} script within ${this.timeoutMs}ms; ` +
              'the outcome is unknown (the script may still have run); this is retryable',
          ),
        );
      }, this.timeoutMs);
      timer.unref();
      if (signal !== undefined) {
        onAbort = () => reject(signal.reason);
        signal.addEventListener('abort', onAbort, { once: true });
      }
    });
    // The loser of the race must not become an unhandled rejection.
    p.catch(() => {});
    try {
      return await Promise.race([p, stop]);
    } finally {
      clearTimeout(timer);
      if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort);
    }
  }
}
