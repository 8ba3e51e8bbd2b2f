import { ConfigError } from './errors.js';

/**
 * A duration as users write it: `30s`, `500ms`, `2m`, `1h`, `1d`, compounds such as `1h30m` or
 * `1m30s` (largest unit first, each unit once), a decimal fraction that lands on a whole
 * millisecond (`1.5s`), or a whole number of milliseconds (`1500` or `'1500'`).
 */
export type Duration = number | string;

/**
 * The longest duration leasehold takes: 2^31-1 ms (about 24.8 days), the longest delay a Node.js
 * timer can hold. A longer one fires at once (with a TimeoutOverflowWarning), which a lease would
 * take for a missed deadline: the term ends and a CLI child is killed. Refused at the edge instead.
 */
export const MAX_DURATION_MS = 2_147_483_647;

const UNITS = { d: 86_400_000n, h: 3_600_000n, m: 60_000n, s: 1000n, ms: 1n } as const;
type Unit = keyof typeof UNITS;
const ORDER: Unit[] = ['d', 'h', 'm', 's', 'ms'];
const SHAPE = 'write it like 30s, 500ms, 2m, 1h30m, 1d or a whole number of milliseconds';

/**
 * Parses a duration once, at the edge, to whole milliseconds. Rejects negatives, NaN, anything
 * longer than {@link MAX_DURATION_MS}, and fractions of a millisecond, whether written as a
 * number (`1.5`) or a string (`'1.5'`, `'1.5ms'`): the library and the CLI refuse them alike,
 * rather than one rounding what the other refuses.
 * @throws {ConfigError}
 */
export function parseDuration(value: Duration, what: string): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) {
      throw new ConfigError(`${what} must be a non-negative number of milliseconds, got ${value}`);
    }
    if (!Number.isInteger(value)) throw fractionError(what, String(value));
    return checkLimit(what, String(value), BigInt(value));
  }
  if (typeof value !== 'string') throw new ConfigError(`${what} must be a duration string or a number of milliseconds, got ${typeof value}`);
  const text = value.trim();
  // A bare number is milliseconds, as a number is; "1.5" is refused as 1.5 is (and it could
  // have been meant as seconds).
  const parts = /^\d+(?:\.\d+)?$/.test(text)
    ? [...`${text}ms`.matchAll(/(\d+)(?:\.(\d+))?(ms)/g)]
    : /^(?:\d+(?:\.\d+)?\s*(?:ms|[dhms])\s*)+$/.test(text)
      ? [...text.matchAll(/(\d+)(?:\.(\d+))?\s*(ms|[dhms])/g)]
      : [];
  if (parts.length === 0) throw new ConfigError(`${what} "${value}" is not a duration: ${SHAPE}`);
  // Largest unit first, each once: "30s1m" or "1m1m" is more likely a typo than a sum.
  let last = -1;
  let total = 0n;
  for (const [, whole, frac = '', unit] of parts) {
    const rank = ORDER.indexOf(unit as Unit);
    if (rank <= last) {
      throw new ConfigError(`${what} "${value}" is not a duration: name each unit once, largest first (1h30m, not 30m1h); ${SHAPE}`);
    }
    last = rank;
    // Exact decimal arithmetic: in floating point 1.1s is 1100.0000000000002ms.
    const scale = 10n ** BigInt(frac.length);
    const scaled = (BigInt(whole!) * scale + BigInt(frac === '' ? '0' : frac)) * UNITS[unit as Unit];
    if (scaled % scale !== 0n) throw fractionError(what, text);
    total += scaled / scale;
  }
  return checkLimit(what, text, total);
}

function fractionError(what: string, shown: string): ConfigError {
  // The same words for the number 1.5 and the string "1.5", so library and CLI read alike.
  return new ConfigError(
    `${what} ${shown} is not a whole number of milliseconds: ${SHAPE} (a fraction is fine where it lands on a whole millisecond, as in 1.5s)`,
  );
}

function checkLimit(what: string, shown: string, ms: bigint): number {
  if (ms > BigInt(MAX_DURATION_MS)) {
    throw new ConfigError(
      `${what} ${shown} is too long: the limit is ${MAX_DURATION_MS}ms (about 24.8 days), the longest a Node.js timer can wait; ` +
        `use at most 24d${/wait/i.test(what) ? ' (to wait for a lease without a limit, give no wait at all)' : ''}`,
    );
  }
  return Number(ms);
}

const MAX_NAME_LENGTH = 200;

/**
 * Characters that make two names look alike or hide what a name is: controls (Cc), format
 * characters such as zero-width spaces and bidirectional overrides (Cf), anything Unicode says
 * to render invisibly (Default_Ignorable_Code_Point: variation selectors, fillers), lone
 * surrogates (Cs: no encoding stores them, so the store would hold a different name), private
 * use (Co), and every space but U+0020 (a no-break space looks like a space). Unassigned code
 * points are let through: refusing them would tie a name's validity to the Unicode version of
 * the Node.js that reads it.
 */
const HIDDEN = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}]|(?! )\p{Zs}/u;
const HIDDEN_ALL = new RegExp(HIDDEN.source, 'gu');

/** The name with every hidden character spelled out, so the message itself shows it. */
function visible(name: string, also?: RegExp): string {
  // JSON.stringify already escapes controls and lone surrogates; spell out the rest.
  const spell = (c: string): string => `\\u{${c.codePointAt(0)!.toString(16).toUpperCase()}}`;
  const shown = JSON.stringify(name).replace(HIDDEN_ALL, spell);
  return also === undefined ? shown : shown.replace(also, spell);
}

function describeHidden(c: string): string {
  const at = `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
  if (/\p{Cc}/u.test(c)) return `a control character (${at})`;
  if (/[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/u.test(c)) return `a bidirectional control (${at}), which reorders how the name is shown`;
  if (/\p{Cs}/u.test(c)) return `a lone surrogate (${at}), which no store can hold`;
  if (/\p{Co}/u.test(c)) return `a private-use character (${at})`;
  if (/\p{Z}/u.test(c)) return `a space other than U+0020 (${at})`;
  return `an invisible character (${at})`;
}

/**
 * Lease names: 1-200 characters that read as what they are. Two names an operator cannot tell
 * apart in `status` or a log are two leases that look like one, so anything invisible or
 * misleading is refused, and so is a name not in Unicode NFC (an accent written as a combining
 * mark looks identical to the composed letter). Refused, not silently fixed: a fixed-up name
 * would be a different lease from the same bytes given to an older leasehold or to the store.
 * @throws {ConfigError}
 */
export function validateLeaseName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0) {
    throw new ConfigError('lease name must be a non-empty string, for example "nightly-billing"');
  }
  if ([...name].length > MAX_NAME_LENGTH) {
    throw new ConfigError(`lease name is ${[...name].length} characters; the limit is ${MAX_NAME_LENGTH}`);
  }
  const hidden = HIDDEN.exec(name);
  if (hidden !== null) {
    throw new ConfigError(
      `lease name ${visible(name)} contains ${describeHidden(hidden[0])}; use visible characters only, with plain spaces at most between words`,
    );
  }
  if (name.trim() === '') throw new ConfigError(`lease name ${visible(name)} is only spaces; give it a name you can read, for example "nightly-billing"`);
  if (name.trim() !== name) {
    throw new ConfigError(`lease name ${visible(name)} starts or ends with a space; remove it (names are compared exactly)`);
  }
  const nfc = name.normalize('NFC');
  if (nfc !== name) {
    throw new ConfigError(
      `lease name ${visible(name, /\p{M}/gu)} is not in Unicode NFC form (the same text has a canonical spelling that looks identical, such as a letter with its accent composed); ` +
        `write it as ${visible(nfc, /\P{ASCII}/gu)} (String.prototype.normalize('NFC') does it)`,
    );
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
