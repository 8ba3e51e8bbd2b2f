/**
 * The HTTP endpoints of `leasehold run` and `leasehold agent` with `--metrics-port P --health-port P`: `/metrics` for
 * Prometheus, `/healthz` and `/readyz` for probes. Read-only; GET and HEAD only. Each server
 * caps its connections and the time a request may take to arrive (observe/http-limits.ts):
 * clients that connect and send nothing cannot pile up in the process being probed.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError, errorMessage } from '../core/errors.js';
import type { Lease } from '../core/lease.js';
import type { Leasehold } from '../core/leasehold.js';
import { limitedServer, type HttpLimits } from '../observe/http-limits.js';
import { HealthCheck } from './index.js';

interface ProbeServerOptions {
  leasehold: Leasehold;
  lease: Lease;
  host: string;
  metricsPort?: number;
  healthPort?: number;
  /** More metrics on the same registry (the agent's fleet gauges), registered after leasehold's own. */
  registerMore?: (registry: import('prom-client').Registry) => void | Promise<void>;
  /** For each server. Default: 64 connections, 10s to send a request. */
  limits?: HttpLimits;
}

interface ProbeServers {
  /** `http://host:port` of each server started. */
  metricsUrl?: string;
  healthUrl?: string;
  close(): Promise<void>;
}

function listen(server: Server, host: string, port: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const onError = (e: NodeJS.ErrnoException): void => {
      reject(
        new ConfigError(
          e.code === 'EADDRINUSE'
            ? `${what} port ${port} on ${host} is in use; pick another port`
            : `cannot serve ${what} on ${host}:${port}: ${errorMessage(e)}; check the host and port`,
          { cause: e },
        ),
      );
    };
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      const a = server.address() as AddressInfo;
      resolve(`http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`);
    });
  });
}

const closeServer = (s: Server): Promise<void> =>
  new Promise((resolve) => {
    s.closeAllConnections();
    s.close(() => resolve());
  });

/**
 * Starts the servers asked for. Metrics need prom-client (an optional peer dependency).
 * @throws {ConfigError} prom-client missing, or a port that cannot be bound.
 */
export async function startProbeServers(o: ProbeServerOptions): Promise<ProbeServers> {
  const servers: Server[] = [];
  const result: ProbeServers = {
    close: async () => {
      await Promise.all(servers.map(closeServer));
    },
  };
  try {
    if (o.metricsPort !== undefined) {
      let promClient: typeof import('prom-client');
      let metricsEntry: typeof import('../metrics/index.js');
      try {
        promClient = await import('prom-client');
        metricsEntry = await import('../metrics/index.js');
      } catch (e) {
        throw new ConfigError('--metrics-port needs prom-client, an optional peer dependency: npm install prom-client', { cause: e });
      }
      const registry = new promClient.Registry();
      promClient.collectDefaultMetrics({ register: registry });
      metricsEntry.registerMetrics(o.leasehold, { registry, leases: [o.lease], instrumentNew: false });
      await o.registerMore?.(registry);
      const server = limitedServer((req: IncomingMessage, res: ServerResponse) => {
        const path = (req.url ?? '/').split('?')[0];
        if (path !== '/metrics') {
          res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics\n');
          return;
        }
        registry.metrics().then(
          (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
          (e: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${errorMessage(e)}\n`),
        );
      }, o.limits);
      servers.push(server);
      result.metricsUrl = await listen(server, o.host, o.metricsPort, 'metrics');
    }
    if (o.healthPort !== undefined) {
      const health = new HealthCheck(o.lease);
      const server = limitedServer(health.handler, o.limits);
      server.on('close', () => health.close());
      servers.push(server);
      result.healthUrl = await listen(server, o.host, o.healthPort, 'health');
    }
  } catch (e) {
    await result.close();
    throw e;
  }
  return result;
}
