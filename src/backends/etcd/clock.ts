/**
 * etcd's clock, as far as a client can read it. etcd's gRPC API carries no time, but the same
 * client port answers HTTP, and Go's HTTP server stamps every answer with a `Date` header from
 * the member's clock, in whole seconds. One `GET /version` (unauthenticated, cheap) bounds
 * etcd's time: at some instant between sending and receiving it read D..D+999 ms, so
 *   etcd's time now >= D + (our monotonic time now - our monotonic time at receipt).
 * That lower bound is what the slot ledger calls "the store's time": a slot judged due or missed
 * by it is behind etcd's clock for certain, whatever this host's clock says. It lags etcd's true
 * time by up to a second plus the round trip; every probe at another phase of the second can
 * only raise it (the best bound of the last minute is kept), so after a few calls the lag is
 * about the round trip.
 *
 * Kept on the monotonic clock: a step of this host's wall clock (NTP, libfaketime) moves nothing.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { StoreUnavailableError, errorMessage } from '../../core/errors.js';
import { realClock, type Clock } from './time.js';
import { readTlsFiles } from '../url.js';
import type { parseEtcdUrl } from './client.js';

/** A store-side time source: resolves with a lower bound of the store's clock, in epoch ms. */
export type StoreClock = () => Promise<number>;

/** Bounds older than this are dropped: two clocks drift, and etcd's host may step its own. */
const KEEP_MS = 60_000;
/** A probe this recent is reused instead of sending another (bursts of ledger calls). */
const REUSE_MS = 250;

export interface EtcdClockOptions {
  /** `host:port` or `https://host:port`, as in the store URL. */
  hosts: string[];
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  timeoutMs?: number;
  /** Our side's monotonic clock (default the process's own). */
  clock?: Clock;
}

/** The clock of the cluster at `parsed` (the store URL's hosts and TLS files). */
export function etcdClockOf(parsed: ReturnType<typeof parseEtcdUrl>): StoreClock {
  const tls = parsed.tlsFiles === undefined ? {} : readTlsFiles(parsed.tlsFiles, 'etcd store');
  return etcdClock({
    hosts: parsed.hosts,
    ...(tls.ca === undefined ? {} : { ca: tls.ca }),
    ...(tls.cert === undefined ? {} : { cert: tls.cert }),
    ...(tls.key === undefined ? {} : { key: tls.key }),
    ...(parsed.callTimeoutMs === undefined ? {} : { timeoutMs: parsed.callTimeoutMs }),
  });
}

/**
 * A {@link StoreClock} reading etcd's `Date` header (see the file's comment). Rejects with a
 * retryable StoreUnavailableError when no member answers with one.
 */
export function etcdClock(options: EtcdClockOptions): StoreClock {
  const timeoutMs = options.timeoutMs ?? 5000;
  const clock = options.clock ?? realClock;
  /** etcd's epoch ms minus our monotonic ms, as a lower bound, with when it was measured. */
  const bounds: Array<{ atMono: number; low: number }> = [];
  let next = 0;
  return async () => {
    const mono = clock.monoNow();
    while (bounds.length > 0 && mono - bounds[0]!.atMono > KEEP_MS) bounds.shift();
    const last = bounds.at(-1);
    if (last === undefined || mono - last.atMono > REUSE_MS) {
      const errors: string[] = [];
      for (let i = 0; i < options.hosts.length; i++) {
        const host = options.hosts[(next + i) % options.hosts.length]!;
        try {
          bounds.push(await probe(host, options, timeoutMs, clock));
          break;
        } catch (e) {
          errors.push(`${host}: ${errorMessage(e)}`);
        }
      }
      next++;
      if (errors.length === options.hosts.length) {
        throw new StoreUnavailableError(
          `etcd: could not read etcd's clock (the Date header of GET /version on its client port): ${errors.join('; ')}. ` +
            'The slot ledger judges a slot due or missed by the store\'s clock; this is retryable',
        );
      }
    }
    let low = -Infinity;
    for (const b of bounds) low = Math.max(low, b.low);
    return Math.floor(clock.monoNow() + low);
  };
}

function probe(host: string, options: EtcdClockOptions, timeoutMs: number, clock: Clock): Promise<{ atMono: number; low: number }> {
  const url = new URL('/version', /^https?:\/\//.test(host) ? host : `http://${host}`);
  const https = url.protocol === 'https:';
  return new Promise((resolve, reject) => {
    const onResponse = (res: IncomingMessage): void => {
      const atMono = clock.monoNow();
      res.resume();
      const date = Date.parse(res.headers.date ?? '');
      if (Number.isNaN(date)) return reject(new Error(`HTTP ${res.statusCode ?? '?'} without a Date header`));
      resolve({ atMono, low: date - atMono });
    };
    // No keep-alive: an idle pooled socket would hold a stopping process open; probes are rare.
    const common = { method: 'GET', timeout: timeoutMs, agent: false as const };
    const req = https
      ? httpsRequest(url, { ...common, ...(options.ca === undefined ? {} : { ca: options.ca }), ...(options.cert === undefined ? {} : { cert: options.cert }), ...(options.key === undefined ? {} : { key: options.key }) }, onResponse)
      : httpRequest(url, common, onResponse);
    req.on('timeout', () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}
