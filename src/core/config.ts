import { ConfigError } from './errors.js';

/** A duration as users write it: `30s`, `500ms`, `2m`, `1h`, or a number of milliseconds. */
export type Duration = number | string;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * Parses a duration once, at the edge. Rejects negatives, NaN, and unit-less strings with a
 * fraction ("1.5" is ambiguous: seconds or milliseconds?).
 */
export function parseDuration(value: Duration, what: string): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) {
      throw new ConfigError(`${what} must be a non-negative number of milliseconds, got ${value}`);
    }
    return Math.round(value);
  }
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(value);
  if (m === null || (m[2] === undefined && m[1]!.includes('.'))) {
    throw new ConfigError(
      `${what} "${value}" is not a duration: write it like 30s, 500ms, 2m, 1h or a whole number of milliseconds`,
    );
  }
  return Math.round(Number(m[1]) * UNITS[m[2] ?? 'ms']!);
}

export const MAX_NAME_LENGTH = 200;

/** Lease names: 1-200 characters, no control characters (they wreck logs and terminals). */
export function validateLeaseName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0) {
    throw new ConfigError('lease name must be a non-empty string, for example "nightly-billing"');
  }
  if ([...name].length > MAX_NAME_LENGTH) {
    throw new ConfigError(`lease name is ${[...name].length} characters; the limit is ${MAX_NAME_LENGTH}`);
  }
  if (/[\u0000-\u001f\u007f-\u009f]/.test(name)) {
    throw new ConfigError(`lease name ${JSON.stringify(name)} contains a control character; use printable characters only`);
  }
  return name;
}

export interface TimingOptions {
  /** How long the store grants each term or renewal for. Default 30s. */
  ttl?: Duration;
  /** How often the holder renews. Default ttl/3. Above ttl/2 is refused. */
  renewInterval?: Duration;
  /**
   * How long before the store-side expiry this process gives up leadership locally if no
   * renewal has landed. Default max(ttl/10, 50ms). The CLI adds its kill grace to this so a
   * child is dead before the store hands the lease to someone else.
   */
  safetyMargin?: Duration;
}

export interface Timing {
  ttlMs: number;
  renewMs: number;
  marginMs: number;
}

export const DEFAULT_TTL_MS = 30_000;

export function resolveTiming(opts: TimingOptions = {}): Timing {
  const ttlMs = parseDuration(opts.ttl ?? DEFAULT_TTL_MS, 'ttl');
  if (ttlMs < 100) throw new ConfigError(`ttl ${ttlMs}ms is too short; use at least 100ms (30s is the default)`);
  const renewMs = opts.renewInterval === undefined ? Math.floor(ttlMs / 3) : parseDuration(opts.renewInterval, 'renew interval');
  if (renewMs <= 0) throw new ConfigError('renew interval must be greater than 0');
  if (renewMs >= ttlMs) {
    throw new ConfigError(
      `renew interval ${renewMs}ms must be shorter than the ttl ${ttlMs}ms, or the lease expires before it is renewed; use ttl/3`,
    );
  }
  if (renewMs > ttlMs / 2) {
    throw new ConfigError(
      `renew interval ${renewMs}ms is more than half the ttl ${ttlMs}ms: a single slow or lost renewal would end a ` +
        `healthy term. Use ttl/3 (${Math.floor(ttlMs / 3)}ms) so two renewals can fail before the lease expires`,
    );
  }
  const marginMs =
    opts.safetyMargin === undefined ? Math.max(Math.floor(ttlMs / 10), 50) : parseDuration(opts.safetyMargin, 'safety margin');
  if (renewMs + marginMs >= ttlMs) {
    throw new ConfigError(
      `renew interval ${renewMs}ms plus safety margin ${marginMs}ms leaves no time to renew within the ttl ${ttlMs}ms; ` +
        'raise the ttl or lower the grace/margin',
    );
  }
  return { ttlMs, renewMs, marginMs };
}
