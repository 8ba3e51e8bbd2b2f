import { ConfigError } from '../core/errors.js';

/** A URL with its password masked, safe to put in an error message or a log line. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return url.replace(/:[^:@/]*@/, ':***@');
  }
}

/**
 * Refuses query parameters a store would ignore or misread: an unknown one (a typo such as
 * `?prefx=`, or a libpq option the pg driver does not implement) would be silently dropped,
 * and a repeated one silently resolved to one of its values.
 * @param store what the message calls the store, e.g. "the Redis store"
 * @param allowed every parameter the store understands, as the message lists them
 * @throws {ConfigError}
 */
export function checkQueryParameters(params: URLSearchParams, allowed: readonly string[], store: string): void {
  const seen = new Set<string>();
  for (const key of params.keys()) {
    if (!allowed.includes(key)) {
      throw new ConfigError(
        `store URL parameter ${JSON.stringify(key)} is not understood; ${store} takes ${allowed.length === 0 ? 'no parameters' : allowed.map((a) => `${a}=`).join(', ')}`,
      );
    }
    if (seen.has(key)) throw new ConfigError(`store URL parameter ${JSON.stringify(key)} is given twice; give it once`);
    seen.add(key);
  }
}

/** Refuses what a store would silently drop from a parsed URL: a #fragment and port 0. */
export function checkUrlParts(u: URL, redacted: string): void {
  if (u.hash !== '' || redacted.includes('#')) {
    throw new ConfigError(`store URL ${JSON.stringify(redacted.replace(/#.*$/, '#...'))} has a #fragment, which no store reads; remove it`);
  }
  if (u.port === '0') throw new ConfigError(`store URL ${JSON.stringify(redacted)} has port 0; give the port the server listens on`);
}
