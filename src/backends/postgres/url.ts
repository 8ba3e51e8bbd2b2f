/** postgres:// URLs: what they may carry, one host or libpq's list, TLS files, notify_url=. */
import { checkQueryParameters, checkUrlParts, readTlsFiles, redactUrl } from '../url.js';
import { ConfigError } from '../../core/errors.js';
import { validateSchemaName } from './schema.js';
import { describeHosts, parseHostEntry, parseTargetSessionAttrs, type PgTarget } from './multi-host.js';

/**
 * What a postgres:// URL may carry: leasehold's `schema`, the parameters the pg driver acts
 * on, and libpq's target_session_attrs (./multi-host.ts implements it). libpq options pg does
 * not implement (connect_timeout, keepalives)
 * are refused rather than ignored, and so are pg's own settings that would override
 * leasehold's (query_timeout) or make a connection that cannot run queries (replication).
 */
const POSTGRES_URL_PARAMETERS = [
  'schema',
  'host',
  'port',
  'user',
  'password',
  'sslmode',
  'ssl',
  'sslcert',
  'sslkey',
  'sslrootcert',
  'sslnegotiation',
  'uselibpqcompat',
  'application_name',
  'fallback_application_name',
  'options',
  'client_encoding',
  'statement_timeout',
  'lock_timeout',
  'idle_in_transaction_session_timeout',
  'target_session_attrs',
  'notify_url',
] as const;


/**
 * notify_url=: a postgres:// URL of its own (the LISTEN connection, straight to the primary
 * when the store's URL goes through PgBouncer; several hosts as in the store URL), or `none`.
 * @throws {ConfigError}
 */
export function parseNotifyUrl(value: string): { connectionString: string; target: PgTarget } | 'none' {
  if (value === 'none') return value;
  if (!/^postgres(?:ql)?:\/\//i.test(value)) {
    throw new ConfigError(
      `notify_url=${JSON.stringify(redactUrl(value))} is not a postgres:// URL; give a direct URL of the same primary (%-encode its & as %26), or notify_url=none`,
    );
  }
  const inner = parsePostgresUrl(value, true);
  return { connectionString: inner.connectionString, target: inner.target };
}

/**
 * libpq's host list in the authority (`u@h1:5432,h2:5433/db`), which is not a WHATWG URL: the
 * URL of the first host, to check as any other, and every host of the list. Undefined for one host.
 */
function splitAuthorityHosts(url: string): { first: string; hosts: { host: string; port: string }[] } | undefined {
  const m = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)(.*)$/is.exec(url);
  if (m === null || !m[3]!.includes(',')) return undefined;
  const hosts = m[3]!.split(',').map((e) => parseHostEntry(e, m[3]!));
  const h = hosts[0]!;
  return { first: `${m[1]}${m[2] ?? ''}${h.host}${h.port === '' ? '' : `:${h.port}`}${m[4]}`, hosts };
}

/**
 * Checks a postgres:// URL and splits it into what pg connects to (one connection string per
 * host: several for libpq's `h1:5432,h2:5433` or `?host=h1,h2&port=5432,5433`), leasehold's
 * own parameters, and a description without the password.
 * @param inner a notify_url= value: no schema= or notify_url= of its own
 * @throws {ConfigError}
 */
export function parsePostgresUrl(
  url: string,
  inner = false,
): { connectionString: string; schema: string | undefined; description: string; notifyUrl?: string; target: PgTarget; notifyTarget?: { target: PgTarget } | 'none' } {
  const authority = splitAuthorityHosts(url);
  let u: URL;
  try {
    u = new URL(authority?.first ?? url);
  } catch (err) {
    throw new ConfigError(`store URL ${JSON.stringify(redactUrl(url))} is not a URL; write postgres://user@host:5432/database`, { cause: err });
  }
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') {
    throw new ConfigError(`store URL scheme "${u.protocol}" is not PostgreSQL; write postgres://user@host:5432/database`);
  }
  if (u.hostname === '' && !u.searchParams.has('host')) {
    throw new ConfigError(`store URL ${JSON.stringify(redactUrl(url))} has no host; write postgres://user@host:5432/database`);
  }
  checkUrlParts(u, redactUrl(url));
  checkQueryParameters(u.searchParams, POSTGRES_URL_PARAMETERS, 'the PostgreSQL store');
  if (inner && (u.searchParams.has('notify_url') || u.searchParams.has('schema'))) {
    throw new ConfigError('notify_url= takes a plain connection URL: no schema= or notify_url= of its own (the store URL sets the schema)');
  }
  const schema = u.searchParams.get('schema') ?? undefined;
  if (schema !== undefined) validateSchemaName(schema);
  u.searchParams.delete('schema');
  checkSslFiles(u.searchParams);
  const notifyParam = u.searchParams.get('notify_url') ?? undefined;
  const notify = notifyParam === undefined ? undefined : parseNotifyUrl(notifyParam);
  u.searchParams.delete('notify_url');
  const hostParam = u.searchParams.get('host');
  if (authority !== undefined && hostParam !== null) {
    throw new ConfigError(`store URL ${JSON.stringify(redactUrl(url))} names hosts twice (in the URL and in host=); give the list in one place`);
  }
  const listed = hostParam !== null && hostParam.includes(',') ? queryHosts(hostParam, u.searchParams.get('port')) : authority?.hosts;
  const attrs = parseTargetSessionAttrs(u.searchParams.get('target_session_attrs'), listed !== undefined);
  u.searchParams.delete('target_session_attrs');
  const connectionString = u.toString();
  let urls = [connectionString];
  if (listed !== undefined) {
    urls = listed.map(({ host, port }) => {
      const one = new URL(connectionString);
      if (authority !== undefined) {
        one.hostname = host;
        one.port = port;
      } else {
        one.searchParams.set('host', host);
        if (port === '') one.searchParams.delete('port');
        else one.searchParams.set('port', port);
      }
      return one.toString();
    });
  }
  const target: PgTarget = { urls, attrs };
  // With several hosts the string keeps the list as written (it is for messages; pg gets `urls`).
  const whole = authority === undefined ? connectionString : withHostList(connectionString, u.host, authority.hosts.map((h) => (h.port === '' ? h.host : `${h.host}:${h.port}`)).join(','));
  const via = notify === undefined ? '' : notify === 'none' ? ', no LISTEN' : `, LISTEN at ${redactUrl(notify.connectionString)}`;
  const hosts = listed === undefined && attrs === 'any' ? '' : `, hosts in order ${describeHosts(target)}, target_session_attrs=${attrs}`;
  return {
    connectionString: whole,
    schema,
    description: `postgres ${redactUrl(whole)} (schema ${schema ?? 'leasehold'}${hosts}${via})`,
    target,
    ...(notify === undefined ? {} : { notifyUrl: notify === 'none' ? 'none' : notify.connectionString, notifyTarget: notify === 'none' ? 'none' : { target: notify.target } }),
  };
}

/** `s` (a URL whose host is `host`) with the host list in its place. */
function withHostList(s: string, host: string, list: string): string {
  const start = s.indexOf('//') + 2;
  const pathAt = s.indexOf('/', start);
  const end = pathAt === -1 ? s.length : pathAt;
  const at = s.lastIndexOf('@', end);
  const hostAt = at >= start ? at + 1 : start;
  return s.slice(0, hostAt) + list + s.slice(hostAt + host.length);
}

/** libpq's `?host=h1,h2&port=5432,5433`: one port for all, or one per host. @throws {ConfigError} */
function queryHosts(hostParam: string, portParam: string | null): { host: string; port: string }[] {
  const hosts = hostParam.split(',');
  if (hosts.some((h) => h.trim() === '')) throw new ConfigError(`the host list host=${JSON.stringify(hostParam)} has an empty entry; write host=h1,h2`);
  const ports = portParam === null ? [] : portParam.split(',');
  if (ports.length > 1 && ports.length !== hosts.length) {
    throw new ConfigError(`host= lists ${hosts.length} hosts and port= ${ports.length} ports; give one port for all, or one per host`);
  }
  return hosts.map((host, i) => {
    const port = ports.length === 0 ? '' : ports.length === 1 ? ports[0]! : ports[i]!;
    if (port !== '' && !(/^\d+$/.test(port) && Number(port) >= 1 && Number(port) <= 65535)) {
      throw new ConfigError(`port= ${JSON.stringify(port)} for host ${JSON.stringify(host)} is not a port; give the port the server listens on (1-65535)`);
    }
    return { host, port };
  });
}

/**
 * pg reads sslrootcert=, sslcert= and sslkey= itself, at each connection: a missing file would
 * surface as a bare ENOENT from the first query. Read them once now, so a wrong path or a key
 * that does not match its certificate is a ConfigError naming the parameter and the file.
 * @throws {ConfigError}
 */
function checkSslFiles(params: URLSearchParams): void {
  const cacert = params.get('sslrootcert') ?? undefined;
  const cert = params.get('sslcert') ?? undefined;
  const key = params.get('sslkey') ?? undefined;
  if ((cert === undefined) !== (key === undefined)) {
    throw new ConfigError(`PostgreSQL store URL has ${cert === undefined ? 'sslkey= without sslcert=' : 'sslcert= without sslkey='}; a client certificate needs both, as PEM files`);
  }
  // libpq's sslrootcert=system (the system's roots) names no file.
  const paths = { ...(cacert === undefined || cacert === 'system' ? {} : { cacert }), ...(cert === undefined ? {} : { cert, key }) };
  readTlsFiles(paths, 'PostgreSQL store', { cacert: 'sslrootcert', cert: 'sslcert', key: 'sslkey' });
}
