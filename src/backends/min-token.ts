import { ConfigError } from '../core/errors.js';

/** The largest token a bigint/INTEGER column holds, less one: the floor's next token must still fit. */
export const MAX_SQL_FLOOR = 2n ** 63n - 2n;

/**
 * Checks a `migrate({ minToken })` floor at the edge: a bigint, not negative, small enough that
 * the store can still issue the next token above it.
 * @throws {ConfigError}
 */
export function validateMinToken(minToken: unknown, max: bigint, store: string): bigint {
  if (typeof minToken !== 'bigint') throw new ConfigError(`minToken must be a bigint (for example 5000n), got ${typeof minToken}`);
  if (minToken < 0n) throw new ConfigError(`minToken must not be negative, got ${minToken}`);
  if (minToken > max) throw new ConfigError(`minToken ${minToken} is above what the ${store} store can issue tokens over (at most ${max})`);
  return minToken;
}
