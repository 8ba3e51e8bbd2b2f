/** `mysql://` and `mariadb://` store URLs: what they may carry, checked before anything connects. */
import { ConfigError } from '../../core/errors.js';
import { checkQueryParameters, checkUrlParts, readTlsFiles, redactUrl, tlsFilePaths, type TlsMaterial } from '../url.js';

const EXAMPLE = 'mysql://user@host:3306/database';

/**
 * What a MySQL store URL may carry. `sslmode` as in PostgreSQL's URLs (the words users already
 * know): `disable` (the default on loopback), `require` (encrypted, certificate not checked),
 * `verify-ca` and `verify-full` (checked against `cacert=` or the system's roots; `verify-full`
 * also checks the host name). `cacert=`, `cert=`, `key=`: PEM files, as the etcd and Redis URLs.
 */
const MYSQL_URL_PARAMETERS = ['sslmode', 'cacert', 'cert', 'key', 'connect_timeout'] as const;
const SSL_MODES = ['disable', 'require', 'verify-ca', 'verify-full'] as const;
type SslMode = (typeof SSL_MODES)[number];

interface MysqlHost {
  host: string;
  port: number;
}

export interface MysqlTarget {
  /** In order: a multi-host URL (`h1:3306,h2:3307`) tries each until one is writable. */
  hosts: MysqlHost[];
  user: string;
  password: string | undefined;
  database: string;
  ssl: { mode: SslMode; material: TlsMaterial } | undefined;
  connectTimeoutMs: number | undefined;
}

/** Database names leasehold accepts: what needs no quoting anywhere (it is interpolated into DDL). */
const DATABASE_NAME = /^[A-Za-z0-9_$]{1,64}$/;

/**
 * Checks a `mysql://` / `mariadb://` URL and splits it into what mysql2 connects to.
 * @throws {ConfigError}
 */
export function parseMysqlUrl(url: string): { target: MysqlTarget; description: string } {
  const redacted = redactUrl(url);
  const m = /^(mysql|mariadb):\/\/([^@/?#]*@)?([^/?#]*)(.*)$/is.exec(url);
  if (m === null) throw new ConfigError(`store URL ${JSON.stringify(redacted)} is not a MySQL URL; write ${EXAMPLE}`);
  const entries = m[3]!.split(',');
  // The list first: a bad port on the first host is named as such, not as "not a URL".
  const hosts = entries.map((e) => parseHost(e, redacted));
  const seen = new Set<string>();
  for (const h of hosts) {
    const key = hostPort(h).toLowerCase();
    if (seen.has(key)) throw new ConfigError(`store URL ${JSON.stringify(redacted)} lists host ${key} twice; list each server once, the primary first`);
    seen.add(key);
  }
  let u: URL;
  try {
    // The first host stands in for the list while the URL is parsed; the list is read below.
    u = new URL(`${m[1]!}://${m[2] ?? ''}${entries[0]!}${m[4]!}`);
  } catch (err) {
    throw new ConfigError(`store URL ${JSON.stringify(redacted)} is not a URL; write ${EXAMPLE}`, { cause: err });
  }
  checkUrlParts(u, redacted);
  checkQueryParameters(u.searchParams, MYSQL_URL_PARAMETERS, 'the MySQL store');
  const database = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (database === '') throw new ConfigError(`store URL ${JSON.stringify(redacted)} names no database; write ${EXAMPLE} (leasehold's tables go in that database)`);
  if (!DATABASE_NAME.test(database)) {
    throw new ConfigError(`MySQL database name ${JSON.stringify(database)} is not supported; use letters, digits, _ and $ (at most 64)`);
  }
  const user = decodeURIComponent(u.username);
  if (user === '') throw new ConfigError(`store URL ${JSON.stringify(redacted)} names no user; write ${EXAMPLE}`);
  const password = u.password === '' ? undefined : decodeURIComponent(u.password);
  const modeParam = u.searchParams.get('sslmode');
  if (modeParam !== null && !(SSL_MODES as readonly string[]).includes(modeParam)) {
    throw new ConfigError(`sslmode=${JSON.stringify(modeParam)} is not one of ${SSL_MODES.join(', ')}`);
  }
  const paths = tlsFilePaths(u.searchParams, 'MySQL store');
  const mode: SslMode = (modeParam as SslMode | null) ?? (paths === undefined ? 'disable' : 'verify-full');
  if (mode === 'disable' && paths !== undefined) {
    throw new ConfigError('the MySQL store URL has sslmode=disable with TLS files (cacert=, cert=, key=); drop the files or choose sslmode=verify-full');
  }
  const ssl = mode === 'disable' ? undefined : { mode, material: paths === undefined ? {} : readTlsFiles(paths, 'MySQL store') };
  let connectTimeoutMs: number | undefined;
  const ct = u.searchParams.get('connect_timeout');
  if (ct !== null) {
    const s = Number(ct);
    if (!Number.isFinite(s) || s <= 0) throw new ConfigError(`connect_timeout=${JSON.stringify(ct)} is not a number of seconds > 0`);
    connectTimeoutMs = Math.round(s * 1000);
  }
  const hostList = hosts.map(hostPort).join(',');
  return {
    target: { hosts, user, password, database, ssl, connectTimeoutMs },
    description: `${m[1]!.toLowerCase()} ${redacted} (database ${database}${hosts.length > 1 ? `, hosts in order ${hostList}` : ''})`,
  };
}

/** `host:port`, an IPv6 address in brackets. */
function hostPort(h: MysqlHost): string {
  return `${h.host.includes(':') ? `[${h.host}]` : h.host}:${h.port}`;
}

function parseHost(entry: string, redacted: string): MysqlHost {
  const m = /^(\[[^\]]+\]|[^:]*)(?::(.*))?$/.exec(entry);
  const host = (m?.[1] ?? '').replace(/^\[|\]$/g, '');
  if (host === '') throw new ConfigError(`store URL ${JSON.stringify(redacted)} has no host${entry === '' ? '' : ` in ${JSON.stringify(entry)}`}; write ${EXAMPLE}`);
  const portText = m?.[2];
  if (portText === undefined || portText === '') return { host, port: 3306 };
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port < 1 || port > 65535) {
    throw new ConfigError(`port ${JSON.stringify(portText)} for host ${JSON.stringify(host)} is not a port; give the port the server listens on (1-65535)`);
  }
  return { host, port };
}
