import { isIPv4, isIPv6 } from 'node:net';
import { MAX_DURATION_MS } from '../../core/config.js';
import { ClosedError, ConfigError, LeaseholdError, StoreError, StoreUnavailableError } from '../../core/errors.js';
import { checkQueryParameters, readTlsFiles, tlsFilePaths, type TlsFilePaths } from '../url.js';
import { ETCD_SUBSPACES, nestingSegment } from './keys.js';
import { isTransient } from './errors.js';
import { MemberPool } from './members.js';
import { realClock, type Clock } from './time.js';

/**
 * The etcd store talks to etcd through the raw v3 RPCs of an `etcd3` client (`kv.txn`,
 * `leaseClient.leaseGrant`, `leaseClient.leaseTimeToLive`, `leaseClient.leaseKeepAlive`,
 * `watch()`), described here structurally so `etcd3` stays an optional peer dependency. We use
 * none of etcd3's higher-level helpers: not `Election` (known multi-leader bugs), not `Lease`
 * (its background keepalive would extend a term that a clone has taken over: our one keepalive
 * per tick goes with a compare-and-swap, session.ts), not `Namespace` (keys are prefixed here).
 */

/** bytes fields arrive as Buffers; int64 fields as decimal strings (etcd3 loads protos with longs: String). */
export interface EtcdKeyValue {
  key: Buffer;
  value: Buffer;
  create_revision: string;
  mod_revision: string;
  version: string;
  lease: string;
}

interface EtcdResponseHeader {
  revision: string;
}

export interface EtcdRangeRequest {
  key: Buffer;
  range_end?: Buffer;
  limit?: number;
  /** Enum names as spelled in etcd3's bundled rpc.proto (not etcd's upper-case ones). */
  sort_order?: 'None' | 'Ascend' | 'Descend';
  sort_target?: 'Key' | 'Version' | 'Create' | 'Mod' | 'Value';
  count_only?: boolean;
  keys_only?: boolean;
}

export interface EtcdRangeResponse {
  header?: EtcdResponseHeader | null;
  kvs: EtcdKeyValue[];
  more: boolean;
  count: string;
}

interface EtcdPutRequest {
  key: Buffer;
  value: Buffer;
  lease?: string | number;
  prev_kv?: boolean;
}

interface EtcdDeleteRangeRequest {
  key: Buffer;
  range_end?: Buffer;
  prev_kv?: boolean;
}

interface EtcdCompare {
  key: Buffer;
  /** Compares every key in [key, range_end) (a key absent compares as revision 0). */
  range_end?: Buffer;
  target: 'Version' | 'Create' | 'Mod' | 'Value' | 'Lease';
  result: 'Equal' | 'Greater' | 'Less' | 'NotEqual';
  create_revision?: string | number;
  mod_revision?: string | number;
  value?: Buffer;
  /** With target 'Lease': the key's etcd lease id ('0': none). */
  lease?: string | number;
}

export interface EtcdRequestOp {
  request_range?: EtcdRangeRequest;
  request_put?: EtcdPutRequest;
  request_delete_range?: EtcdDeleteRangeRequest;
  request_txn?: EtcdTxnRequest;
}

export interface EtcdTxnRequest {
  compare: EtcdCompare[];
  success: EtcdRequestOp[];
  failure: EtcdRequestOp[];
}

export interface EtcdResponseOp {
  response_range?: EtcdRangeResponse | null;
  response_put?: { prev_kv?: EtcdKeyValue | null } | null;
  response_delete_range?: { deleted: string; prev_kvs?: EtcdKeyValue[] } | null;
  response_txn?: EtcdTxnResponse | null;
}

export interface EtcdTxnResponse {
  header?: EtcdResponseHeader | null;
  succeeded: boolean;
  responses: EtcdResponseOp[];
}

/** Per-call gRPC options; leasehold always sets a deadline so no call outlives its timeout. */
export interface EtcdCallOptions {
  deadline?: Date | number;
}

export interface EtcdWatcherLike {
  on(event: 'delete' | 'put', handler: (kv: EtcdKeyValue) => void): unknown;
  on(event: 'connected', handler: (res: unknown) => void): unknown;
  on(event: 'disconnected' | 'error', handler: (err: Error) => void): unknown;
  on(event: 'end', handler: () => void): unknown;
  removeAllListeners(event?: string): unknown;
  cancel(): Promise<void>;
}

export interface EtcdWatchBuilderLike {
  prefix(key: string | Buffer): EtcdWatchBuilderLike;
  /** Server-side filter: with 'delete', etcd does not send the puts every renewal makes. */
  only(...operations: ('put' | 'delete')[]): EtcdWatchBuilderLike;
  /** Creates the watcher and starts connecting, without waiting for etcd (unlike `create()`). */
  watcher(): EtcdWatcherLike;
}

/** etcd3's duplex LeaseKeepAlive stream, as far as session.ts uses it. */
export interface EtcdKeepAliveStream {
  write(req: { ID: string }): unknown;
  on(event: 'data', handler: (res: { ID: string; TTL: string }) => void): unknown;
  on(event: 'error', handler: (err: Error) => void): unknown;
  end(): unknown;
  cancel?(): unknown;
}

/** The subset of an `etcd3` `Etcd3` client leasehold uses. Pass your own to share its connection. */
export interface Etcd3Like {
  readonly kv: {
    txn(req: EtcdTxnRequest, options?: EtcdCallOptions): Promise<EtcdTxnResponse>;
    range(req: EtcdRangeRequest, options?: EtcdCallOptions): Promise<EtcdRangeResponse>;
    deleteRange(req: EtcdDeleteRangeRequest, options?: EtcdCallOptions): Promise<unknown>;
  };
  readonly leaseClient: {
    leaseGrant(req: { TTL: number | string; ID?: number | string }, options?: EtcdCallOptions): Promise<{ ID: string; TTL: string; error?: string }>;
    leaseTimeToLive(req: { ID: string; keys?: boolean }, options?: EtcdCallOptions): Promise<{ ID: string; TTL: string; grantedTTL: string }>;
    /**
     * etcd3's LeaseKeepAlive stream. Optional for a client you pass in: without it, every
     * renewal moves its terms onto a fresh etcd lease (O(leases) writes per tick) instead of
     * keeping one session lease alive (session.ts).
     */
    leaseKeepAlive?(options?: EtcdCallOptions): Promise<EtcdKeepAliveStream>;
  };
  /**
   * Optional for a client you pass in: the member's Status, whose raft applied index against the
   * revision tells a restored snapshot from a live history (restore.ts). Without it, only a
   * process that saw a later revision notices a restore.
   */
  readonly maintenance?: {
    status(options?: EtcdCallOptions): Promise<EtcdStatusResponse>;
  };
  watch(): EtcdWatchBuilderLike;
  close(): void;
}

/** The part of etcd's StatusResponse the restore check reads (int64s as decimal strings). */
export interface EtcdStatusResponse {
  header?: EtcdResponseHeader | null;
  raftAppliedIndex?: string;
}

/** The etcd3 constructor options leasehold sets when it creates the client itself. */
interface Etcd3Options {
  hosts: string[];
  auth?: { username: string; password: string };
  /** grpc's createSsl arguments: no rootCertificate means the system's CA roots. */
  credentials?: { rootCertificate?: Buffer; privateKey?: Buffer; certChain?: Buffer };
  grpcOptions?: Record<string, number | string>;
  faultHandling?: {
    host?: (host: string) => PolicyLike;
    global?: PolicyLike;
    watchBackoff?: BackoffLike;
  };
}

/** cockatiel's IPolicy, as far as etcd3 calls it. */
interface PolicyLike {
  execute<T>(fn: (context: { signal: AbortSignal; attempt: number }) => PromiseLike<T> | T, signal?: AbortSignal): Promise<T>;
}

/** cockatiel's IBackoff, as far as etcd3's watch manager calls it. */
interface BackoffLike {
  readonly duration: number;
  next(context?: unknown): BackoffLike;
}

interface Etcd3Module {
  Etcd3: new (options: Etcd3Options) => Etcd3Like;
}

async function loadEtcd3(): Promise<Etcd3Module> {
  try {
    const mod = (await import('etcd3')) as unknown as { default?: Etcd3Module } & Etcd3Module;
    const Etcd3 = mod.Etcd3 ?? mod.default?.Etcd3;
    if (typeof Etcd3 !== 'function') throw new Error('the etcd3 module has no Etcd3 export');
    return { Etcd3 };
  } catch (err) {
    throw new ConfigError('the etcd store needs the "etcd3" package: npm install etcd3', { cause: err });
  }
}

const neverAborted = new AbortController().signal;

const TLS_FAILURE = /SSL routines|alert (?:bad|unknown|certificate)|certificate (?:verify|required|unknown|has expired)|verify the first certificate|self[- ]signed certificate|altnames|wrong version number|handshake/i;

/**
 * etcd3's defaults are a 3-attempt global retry and a per-host circuit breaker that stays open
 * for 5s. Leasehold retries on its own terms (members.ts: the next member, per-attempt
 * deadlines), and a breaker would keep failing calls for seconds after etcd comes back, so
 * each client etcd3 builds here neither retries nor breaks.
 */
const passThrough: PolicyLike = {
  async execute<T>(fn: (context: { signal: AbortSignal; attempt: number }) => PromiseLike<T> | T): Promise<T> {
    return fn({ signal: neverAborted, attempt: 0 });
  },
};

/** Watch reconnects: 100ms doubling to 2s, jittered, so a restarted etcd is watched again promptly. */
function watchBackoff(attempt = 0): BackoffLike {
  return {
    duration: Math.min(2000, 100 * 2 ** attempt) * (0.5 + Math.random() / 2),
    next: () => watchBackoff(Math.min(attempt + 1, 10)),
  };
}

interface ParsedEtcdUrl {
  hosts: string[];
  tls: boolean;
  /** etcds:// only: ?cacert= (instead of the system's roots), ?cert= and ?key= (a client certificate). */
  tlsFiles?: TlsFilePaths;
  username?: string;
  password?: string;
  prefix: string | undefined;
  callTimeoutMs: number | undefined;
  description: string;
}

const URL_SHAPE =
  'write etcd://host:2379 or etcd://host1:2379,host2:2379?prefix=leasehold (etcds:// for TLS, with ?cacert=ca.pem&cert=client.pem&key=client-key.pem as needed)';

/** Dot-separated labels of letters, digits and inner hyphens (RFC 1123), with an optional final dot. */
const DNS_NAME = /^(?=.{1,253}\.?$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$/;

/**
 * `etcd://[user:password@]host:port[,host:port...][?prefix=leasehold&timeout=5000]`, or
 * `etcds://` for TLS: the server's certificate checked against the system's CA roots, or the
 * PEM file `?cacert=`; `?cert=&key=` present a client certificate (etcd's --client-cert-auth).
 * The files are read when the client is made (createEtcd3Client). Parsed by hand: WHATWG URL
 * rejects a comma list of hosts.
 * @throws {ConfigError}
 */
export function parseEtcdUrl(url: string): ParsedEtcdUrl {
  const m = /^(etcds?):\/\/(?:([^@/?#]*)@)?([^/?#]*)\/?(?:\?([^#]*))?$/i.exec(url.trim());
  if (m === null) throw new ConfigError(`store URL ${JSON.stringify(redactEtcdUrl(url))} is not an etcd URL; ${URL_SHAPE}`);
  const tls = m[1]!.toLowerCase() === 'etcds';
  let username: string | undefined;
  let password: string | undefined;
  if (m[2] !== undefined) {
    const [u, ...p] = m[2].split(':');
    try {
      username = decodeURIComponent(u ?? '');
      password = decodeURIComponent(p.join(':'));
    } catch (err) {
      throw new ConfigError(`store URL ${JSON.stringify(redactEtcdUrl(url))} has a malformed %-escape in its user or password; ${URL_SHAPE}`, { cause: err });
    }
  }
  const hosts = m[3]!.split(',').map((h) => h.trim());
  if (hosts.length === 0 || hosts.some((h) => h === '')) {
    throw new ConfigError(`store URL ${JSON.stringify(redactEtcdUrl(url))} has no host; ${URL_SHAPE}`);
  }
  const normalised = hosts.map((h) => {
    const hm = /^(\[([^\]]*)\]|[^:]+)(?::(\d{1,5}))?$/.exec(h);
    const port = hm?.[3] === undefined ? 2379 : Number(hm[3]);
    if (hm === null || port < 1 || port > 65535) {
      throw new ConfigError(`etcd endpoint ${JSON.stringify(h)} is not host:port with a port 1-65535; ${URL_SHAPE}`);
    }
    // A name the resolver would refuse later (as "unreachable", retried for ever) is refused now.
    const valid = hm[2] !== undefined ? isIPv6(hm[2]) : isIPv4(hm[1]!) || (DNS_NAME.test(hm[1]!) && !/^[\d.]+$/.test(hm[1]!));
    if (!valid) {
      throw new ConfigError(`etcd endpoint ${JSON.stringify(h)} has no valid host name or IP address; ${URL_SHAPE}`);
    }
    return `${hm[1]!.toLowerCase()}:${port}`;
  });
  const twice = normalised.find((h, i) => normalised.indexOf(h) !== i);
  if (twice !== undefined) throw new ConfigError(`etcd endpoint ${twice} is listed twice; list each cluster member once`);
  const params = new URLSearchParams(m[4] ?? '');
  checkQueryParameters(params, ['prefix', 'timeout', 'cacert', 'cert', 'key'], 'the etcd store');
  const tlsFiles = tlsFilePaths(params, 'etcd store');
  if (tlsFiles !== undefined && !tls) {
    throw new ConfigError(`store URL ${JSON.stringify(redactEtcdUrl(url))} has TLS files (cacert=, cert=, key=) but the etcd:// scheme; write etcds:// to use TLS`);
  }
  let prefix: string | undefined;
  let callTimeoutMs: number | undefined;
  for (const [k, v] of params) {
    if (k === 'prefix') prefix = validatePrefix(v);
    else if (k === 'timeout') {
      callTimeoutMs = /^\d+$/.test(v) ? Number(v) : Number.NaN;
      if (!(callTimeoutMs >= 1 && callTimeoutMs <= MAX_DURATION_MS)) {
        throw new ConfigError(
          `etcd URL timeout=${JSON.stringify(v)} must be a whole number of milliseconds from 1 to ${MAX_DURATION_MS}, for example timeout=5000`,
        );
      }
    }
  }
  const who = username === undefined ? '' : `${username}:***@`;
  return {
    hosts: normalised.map((h) => (tls ? `https://${h}` : h)),
    tls,
    ...(tlsFiles === undefined ? {} : { tlsFiles }),
    ...(username === undefined ? {} : { username, password: password ?? '' }),
    prefix,
    callTimeoutMs,
    description: `etcd ${tls ? 'etcds' : 'etcd'}://${who}${normalised.join(',')}`,
  };
}

function redactEtcdUrl(url: string): string {
  return url.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
}

/**
 * Key prefixes: printable, no leading or trailing slash (added here), never empty, and never
 * inside another prefix's key space (keys.ts, ETCD_SUBSPACES): `nest/term` would lie inside
 * `nest`'s term keys, and `migrate --min-token` on `nest` deleted all of its keys.
 * @throws {ConfigError}
 */
export function validatePrefix(prefix: string): string {
  const p = prefix.replace(/^\/+|\/+$/g, '');
  if (p === '' || /[\u0000-\u001f\u007f]/.test(p)) {
    throw new ConfigError(`etcd key prefix ${JSON.stringify(prefix)} must be non-empty printable text, for example "leasehold"`);
  }
  const nested = nestingSegment(p);
  if (nested !== undefined) {
    throw new ConfigError(
      `etcd key prefix ${JSON.stringify(prefix)} is not allowed: its segment "${nested.segment}" is a name leasehold uses under every prefix ` +
        `(${ETCD_SUBSPACES.join(', ')}), so its keys would lie inside the store at prefix "${nested.outer}", whose reads and deletes ` +
        `(\`leasehold migrate --min-token\` ends every term under "${nested.outer}/term/") would reach them; ` +
        `rename that segment (for example "${nested.outer}/${nested.segment}-store")`,
    );
  }
  return p;
}

/**
 * One etcd3 client per member (members.ts picks the member per attempt), and for the watch one
 * client over all of them (etcd3's watch manager reconnects to whichever answers). `clock`: every
 * time the store reads (time.ts).
 */
export async function createEtcd3Client(parsed: ParsedEtcdUrl, clock: Clock = realClock): Promise<MemberPool> {
  const { Etcd3 } = await loadEtcd3();
  const tls = parsed.tlsFiles === undefined ? undefined : readTlsFiles(parsed.tlsFiles, 'etcd store');
  const credentials =
    tls === undefined
      ? undefined
      : {
          ...(tls.ca === undefined ? {} : { rootCertificate: tls.ca }),
          ...(tls.key === undefined ? {} : { privateKey: tls.key }),
          ...(tls.cert === undefined ? {} : { certChain: tls.cert }),
        };
  const make = (hosts: string[]): Etcd3Like =>
    new Etcd3({
      hosts,
      ...(parsed.username === undefined ? {} : { auth: { username: parsed.username, password: parsed.password ?? '' } }),
      ...(credentials === undefined ? {} : { credentials }),
      grpcOptions: {
        // Notice a dead connection (a partitioned member) in seconds, not at the next TCP timeout.
        // etcd refuses pings more often than every 5s (--grpc-keepalive-min-time).
        'grpc.keepalive_time_ms': 10_000,
        'grpc.keepalive_timeout_ms': 5_000,
        'grpc.keepalive_permit_without_calls': 1,
        'grpc.initial_reconnect_backoff_ms': 100,
        'grpc.max_reconnect_backoff_ms': 2_000,
      },
      faultHandling: { host: () => passThrough, global: passThrough, watchBackoff: watchBackoff() },
    });
  const members = parsed.hosts.map((h) => make([h]));
  const watcher = members.length === 1 ? members[0]! : make(parsed.hosts);
  requireLeader(watcher);
  return new MemberPool(members, watcher, members.length === 1 ? members : [...members, watcher], clock);
}

/**
 * Sends etcd's require-leader metadata (`hasleader: true`) on every call of `client`. Without
 * it, a watch served by a member cut off from its cluster stays open and silent: followers that
 * wait on the watch would hear of a release or an expiry only at their safety re-check, a
 * minute later. With it, etcd cancels the watch ("no leader") a few election timeouts after the
 * member loses its leader; etcd3's watch manager reconnects, possibly to another member, and
 * the gap reaches the engine as `onDown`, so followers poll meanwhile. Unary calls with it fail
 * at once on a leaderless member instead of waiting out their deadline, which is what a retry
 * on another member wants too.
 *
 * etcd3 has no option for call metadata, so this wraps its connection pool's authenticator
 * (an internal, checked here): if its shape ever changes, the client works as before, without
 * the early notice.
 */
function requireLeader(client: Etcd3Like): void {
  const auth = (client as unknown as { pool?: { authenticator?: { getMetadata?: () => Promise<unknown> } } }).pool?.authenticator;
  const original = auth?.getMetadata;
  if (auth === undefined || typeof original !== 'function') return;
  auth.getMetadata = function (this: unknown): Promise<unknown> {
    return original.call(auth).then((meta) => {
      const m = meta as { clone?: () => { set(k: string, v: string): void } };
      if (typeof m.clone !== 'function') return meta;
      const copy = m.clone();
      copy.set('hasleader', 'true');
      return copy;
    });
  };
}

/**
 * Maps an etcd3/gRPC error to leasehold's taxonomy. Only the transient gRPC failures (the
 * outcome of the call is unknown) are `StoreUnavailableError`; anything not recognised is a
 * `StoreError`, reported rather than retried in silence.
 */
export function mapEtcdError(err: unknown, where: string): Error {
  if (err instanceof LeaseholdError) return err;
  const name = typeof err === 'object' && err !== null ? err.constructor.name : '';
  const msg = err instanceof Error ? err.message : String(err);
  if (/too many operations in txn request/.test(msg)) {
    return new ConfigError(
      `etcd refused a transaction as too large (${msg}); lower the etcd store's maxOpsPerTxn to etcd's --max-txn-ops`,
      { cause: err },
    );
  }
  if (/request is too large/.test(msg)) {
    return new ConfigError(`etcd refused a request as too large (${msg}); claim fewer leases per batch or raise --max-request-bytes`, {
      cause: err,
    });
  }
  if (
    name === 'EtcdAuthenticationFailedError' ||
    name === 'EtcdPermissionDeniedError' ||
    name === 'GRPCUnauthenticatedError' ||
    /authentication failed|permission denied|user name is empty/.test(msg)
  ) {
    return new ConfigError(`etcd refused ${where} (${msg}); check the user, password and role permissions for the key prefix`, {
      cause: err,
    });
  }
  // A refused handshake (an unknown CA, no or a wrong client certificate, a name not in the
  // server's certificate) is retried like an outage, since a member may be mid-rotation, but
  // says what to check.
  if (TLS_FAILURE.test(msg)) {
    return new StoreUnavailableError(
      `the TLS handshake with etcd failed during ${where} (${msg}); check the etcds:// URL's cacert= (the CA that signed the server's certificate), ` +
        "cert= and key= (a client certificate the server's --trusted-ca-file signed) and that the host is named in the server's certificate",
      { cause: err },
    );
  }
  if (name === 'ClientClosedError') return new ClosedError(`the etcd client is closed (${where}); open a new store`, { cause: err });
  // "requested lease not found": the batch's etcd lease ran out between its grant and the Txn
  // (a stalled cluster); the next attempt grants a fresh one.
  if (isTransient(err) || /UNAVAILABLE|DEADLINE|ECONNREFUSED|No connection|timed out|timeout|requested lease not found/i.test(msg)) {
    return new StoreUnavailableError(`etcd is unavailable during ${where} (${msg}); this is retryable, check the etcd cluster`, {
      cause: err,
    });
  }
  return new StoreError(`etcd refused ${where} (${name === '' ? '' : `${name}: `}${msg}); this is not retried: check the etcd cluster and the store URL, and report it if it persists`, {
    cause: err,
  });
}
