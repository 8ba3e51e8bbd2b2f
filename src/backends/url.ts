import { readFileSync } from 'node:fs';
import { ConfigError } from '../core/errors.js';

/**
 * A URL with its password masked, safe to put in an error message or a log line. Also the
 * passwords of URLs inside its parameters (PostgreSQL's notify_url=), plain or %-encoded.
 */
export function redactUrl(url: string): string {
  let out: string;
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    out = u.toString();
  } catch {
    out = url.replace(/:[^:@/]*@/, ':***@');
  }
  return out.replace(/([?&][^=&#]*=[a-z][a-z0-9+.-]*(?::|%3A)(?:\/\/|%2F%2F)[^:@/?#&%]*(?::|%3A))[^@/?#&]*?(@|%40)/gi, '$1***$2');
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

/** Paths from a store URL's TLS parameters: a CA to trust (`cacert`), a client certificate and its key. */
export type TlsFilePaths = Partial<Record<'cacert' | 'cert' | 'key', string>>;

/** The files' contents, under the names Node's tls and the drivers use. */
export interface TlsMaterial {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

/**
 * The TLS parameters a store URL may carry (etcds://, rediss://): a CA to trust instead of the
 * system's roots, and a client certificate with its key (both or neither).
 * @throws {ConfigError} for an empty path, or a certificate without its key
 */
export function tlsFilePaths(params: URLSearchParams, store: string): TlsFilePaths | undefined {
  const paths: TlsFilePaths = {};
  for (const k of ['cacert', 'cert', 'key'] as const) {
    const v = params.get(k);
    if (v === null) continue;
    if (v.trim() === '') throw new ConfigError(`${store} URL parameter ${k}= is empty; give the path of a PEM file`);
    paths[k] = v;
  }
  if ((paths.cert === undefined) !== (paths.key === undefined)) {
    throw new ConfigError(`${store} URL has ${paths.cert === undefined ? 'key= without cert=' : 'cert= without key='}; a client certificate needs both, as PEM files`);
  }
  return Object.keys(paths).length === 0 ? undefined : paths;
}

/**
 * Reads the files named by a URL's TLS parameters and checks they make a TLS context (PEM, a
 * key that matches its certificate), so a wrong file is a ConfigError naming it now, not a
 * handshake that fails for ever later as "unavailable". Synchronous, as the pg driver's own
 * reading of the same files is; they are small.
 * @param names what the URL calls each parameter, where not cacert=, cert=, key= (PostgreSQL's sslrootcert=, ...)
 * @throws {ConfigError}
 */
export function readTlsFiles(paths: TlsFilePaths, store: string, names: Partial<Record<keyof TlsFilePaths, string>> = {}): TlsMaterial {
  const n = (k: keyof TlsFilePaths): string => names[k] ?? k;
  const read = (k: keyof TlsFilePaths): Buffer | undefined => {
    const p = paths[k];
    if (p === undefined) return undefined;
    try {
      return readFileSync(p);
    } catch (err) {
      const why = (err as { code?: string }).code ?? (err as Error).message;
      throw new ConfigError(`${store} URL ${n(k)}=${p} cannot be read (${why}); give the path of a PEM file this process can read`, { cause: err });
    }
  };
  const material: TlsMaterial = {};
  const ca = read('cacert');
  const cert = read('cert');
  const key = read('key');
  if (ca !== undefined) material.ca = ca;
  if (cert !== undefined) material.cert = cert;
  if (key !== undefined) material.key = key;
  // Node's tls skips a CA file with no PEM certificate in it without a word: then the system's
  // roots would be trusted instead of the one the URL names.
  for (const k of ['cacert', 'cert'] as const) {
    const body = k === 'cacert' ? ca : cert;
    if (body !== undefined && !body.includes('-----BEGIN CERTIFICATE-----')) {
      throw new ConfigError(`${store} URL ${n(k)}=${paths[k]} holds no PEM certificate (-----BEGIN CERTIFICATE-----); give a PEM file`);
    }
  }
  for (const [k, opts] of [
    ['cacert', { ca }],
    ['cert', { cert, key }],
  ] as const) {
    if (Object.values(opts).every((v) => v === undefined)) continue;
    try {
      // node:tls is loaded here, not at the top: most store URLs have no TLS files, and every
      // `leasehold` command imports this module on its start-up path.
      process.getBuiltinModule('node:tls').createSecureContext(opts);
    } catch (err) {
      const files = k === 'cacert' ? `${n('cacert')}=${paths.cacert}` : `${n('cert')}=${paths.cert} with ${n('key')}=${paths.key}`;
      throw new ConfigError(`${store} URL ${files} is not usable for TLS (${(err as Error).message}); give PEM files (a key that matches its certificate)`, {
        cause: err,
      });
    }
  }
  return material;
}
