import { ConfigError } from '../../core/errors.js';
import { checkQueryParameters, tlsFilePaths, type TlsFilePaths, type TlsMaterial } from '../url.js';

/**
 * Redis behind Sentinel: `redis+sentinel://[user:password@]host1:26379,host2:26379/mymaster[/db]`.
 * The hosts are Sentinels, not Redis servers; the client asks them which server is the primary
 * of `mymaster`, connects there, and asks again after every disconnect and on every
 * `+switch-master`. The user and password are the Redis servers' (Sentinels without AUTH are
 * the common set-up; for Sentinels with their own password, pass your own ioredis client).
 */
export const SENTINEL_SCHEME = /^rediss?\+sentinel:/i;

export const SENTINEL_EXAMPLE =
  'write redis+sentinel://[user:password@]host1:26379,host2:26379,host3:26379/mymaster[/0]?prefix=leasehold ' +
  '(the hosts are the Sentinels, mymaster the name they monitor; rediss+sentinel:// for TLS, with ?cacert=ca.pem[&cert=client.pem&key=client-key.pem])';

/** Redis's default `databases 16`; the range a URL can name without the server telling us its own. */
export const MAX_REDIS_DB = 15;

export const TLS_PARAMETERS = ['cacert', 'cert', 'key'] as const;

const DEFAULT_SENTINEL_PORT = 26379;

interface SentinelTarget {
  tls: boolean;
  sentinels: { host: string; port: number }[];
  /** The master name the Sentinels monitor. */
  name: string;
  db: number | undefined;
  username: string | undefined;
  password: string | undefined;
  tlsPaths: TlsFilePaths | undefined;
  prefix: string | undefined;
  /** The URL without prefix=, for createOwnedDriver. */
  url: string;
  /** The URL with any password replaced by ***: safe to log. */
  redacted: string;
}

function refuse(what: string): never {
  throw new ConfigError(`${what}; ${SENTINEL_EXAMPLE}`);
}

function decode(part: string, what: string, redacted: string): string {
  try {
    return decodeURIComponent(part);
  } catch (err) {
    throw new ConfigError(`store URL ${JSON.stringify(redacted)} has a malformed %-escape in its ${what}; ${SENTINEL_EXAMPLE}`, { cause: err });
  }
}

function parseHost(entry: string, redacted: string): { host: string; port: number } {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::([^:]*))?$/.exec(entry);
  if (m === null) {
    refuse(`store URL ${JSON.stringify(redacted)} has ${entry === '' ? 'an empty Sentinel address (a stray comma?)' : `a Sentinel address ${JSON.stringify(entry)} that is not host[:port]`}`);
  }
  const host = m[1]!.replace(/^\[(.*)\]$/, '$1');
  if (m[2] === undefined) return { host, port: DEFAULT_SENTINEL_PORT };
  if (!/^\d{1,5}$/.test(m[2]) || Number(m[2]) < 1 || Number(m[2]) > 65535) {
    refuse(`store URL ${JSON.stringify(redacted)} gives Sentinel ${host} the port ${JSON.stringify(m[2])}; a port is 1-65535 (Sentinel's default is ${DEFAULT_SENTINEL_PORT})`);
  }
  return { host, port: Number(m[2]) };
}

/**
 * Parses a `redis+sentinel://` or `rediss+sentinel://` URL. Not through `new URL()`: a list of
 * hosts is not a URL authority, and WHATWG parsing would refuse it (or, worse, keep the first).
 * @throws {ConfigError} for no Sentinel, a bad port, no master name, a bad database, an unknown
 * parameter, or TLS files on the plain scheme.
 */
export function parseSentinelUrl(url: string): SentinelTarget {
  const m = /^(rediss?)\+sentinel:\/\/([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/i.exec(url);
  const roughlyRedacted = url.replace(/^([^:]+:\/\/[^:@/]*:)[^@/]*@/, '$1***@');
  if (m === null) refuse(`store URL ${JSON.stringify(roughlyRedacted)} is not a Sentinel URL`);
  const scheme = m[1]!.toLowerCase();
  const authority = m[2]!;
  const path = m[3]!;
  const query = m[4] ?? '';
  const at = authority.lastIndexOf('@');
  const userinfo = at < 0 ? undefined : authority.slice(0, at);
  const hostList = at < 0 ? authority : authority.slice(at + 1);
  const colon = userinfo?.indexOf(':') ?? -1;
  const rawUser = userinfo === undefined ? undefined : colon < 0 ? userinfo : userinfo.slice(0, colon);
  const rawPassword = userinfo === undefined || colon < 0 ? undefined : userinfo.slice(colon + 1);
  const maskedUserinfo = userinfo === undefined ? '' : `${rawUser ?? ''}${rawPassword === undefined ? '' : ':***'}@`;
  const rest = `${hostList}${path}${query}`;
  const redacted = `${scheme}+sentinel://${maskedUserinfo}${rest}${m[5] === undefined ? '' : '#...'}`;
  if (m[5] !== undefined) throw new ConfigError(`store URL ${JSON.stringify(redacted)} has a #fragment, which no store reads; remove it`);

  if (hostList === '') refuse(`store URL ${JSON.stringify(redacted)} names no Sentinel`);
  const sentinels = hostList.split(',').map((h) => parseHost(h, redacted));

  const segments = path.replace(/^\//, '').split('/');
  const name = decode(segments[0] ?? '', 'master name', redacted);
  if (name === '') refuse(`store URL ${JSON.stringify(redacted)} names no master: give the name the Sentinels monitor (sentinel monitor <name> ...) as the path`);
  if (!/^[A-Za-z0-9_.:-]{1,100}$/.test(name)) {
    refuse(`store URL ${JSON.stringify(redacted)} names the master ${JSON.stringify(name)}; a master name is 1-100 letters, digits and _ . : -`);
  }
  if (segments.length > 2) refuse(`store URL path "${path}" has more than a master name and a database number`);
  const dbText = segments[1] ?? '';
  if (dbText !== '' && !/^\d+$/.test(dbText)) refuse(`store URL path "${path}" has "${dbText}" where the database number goes`);
  // As for redis://: a SELECT the server refuses is not reported as a wrong URL by the drivers.
  if (dbText !== '' && Number(dbText) > MAX_REDIS_DB) {
    throw new ConfigError(
      `store URL database ${dbText} is out of range: a Redis server has databases 0-${MAX_REDIS_DB} unless configured otherwise; ` +
        `use 0-${MAX_REDIS_DB} (or pass your own client, already on its database, for a server with more)`,
    );
  }

  const params = new URLSearchParams(query);
  checkQueryParameters(params, ['prefix', ...TLS_PARAMETERS], 'the Redis store (pass a client for other settings)');
  const tlsPaths = tlsFilePaths(params, 'Redis store');
  const tls = scheme === 'rediss';
  if (tlsPaths !== undefined && !tls) {
    throw new ConfigError(`store URL ${JSON.stringify(redacted)} has TLS files (cacert=, cert=, key=) but the redis+sentinel:// scheme; write rediss+sentinel:// to use TLS`);
  }
  const prefix = params.get('prefix') ?? undefined;
  params.delete('prefix');
  const cleanQuery = params.size === 0 ? '' : `?${params.toString()}`;
  const cleanRest = `${hostList}${path}${cleanQuery}`;
  return {
    tls,
    sentinels,
    name,
    db: dbText === '' ? undefined : Number(dbText),
    username: rawUser === undefined || rawUser === '' ? undefined : decode(rawUser, 'user name', redacted),
    password: rawPassword === undefined ? undefined : decode(rawPassword, 'password', redacted),
    tlsPaths,
    prefix,
    url: `${scheme}+sentinel://${userinfo === undefined ? '' : `${userinfo}@`}${cleanRest}`,
    redacted: `${scheme}+sentinel://${maskedUserinfo}${cleanRest}`,
  };
}

/**
 * ioredis options for a Sentinel target, on top of the store's usual ones. ioredis asks the
 * Sentinels for the primary on every (re)connect, checks the server's role before using it
 * (a replica is dropped and the Sentinels asked again), and with failoverDetector drops the
 * connection on +switch-master. A demoted primary that still holds our connection answers
 * writes with READONLY: that command fails (the store maps READONLY to "unavailable", never a
 * renewal) and the connection is dropped so the next one asks the Sentinels again. Never 2
 * (resend): a renewal replayed later would land after the engine decided what its failure meant.
 */
export function ioredisSentinelOptions(t: SentinelTarget, tls: TlsMaterial | undefined, timeoutMs: number, backoff: (n: number) => number): Record<string, unknown> {
  return {
    sentinels: t.sentinels,
    name: t.name,
    role: 'master',
    db: t.db ?? 0,
    ...(t.username === undefined ? {} : { username: t.username }),
    ...(t.password === undefined ? {} : { password: t.password }),
    failoverDetector: true,
    reconnectOnError: (err: Error) => (/^READONLY\b/.test(err.message) ? 1 : false),
    sentinelCommandTimeout: timeoutMs,
    // ioredis gives up for good when this returns no number: never, as for the servers.
    sentinelRetryStrategy: backoff,
    ...(t.tls ? { enableTLSForSentinelMode: true, tls: tls ?? {}, sentinelTLS: tls ?? {} } : {}),
  };
}
