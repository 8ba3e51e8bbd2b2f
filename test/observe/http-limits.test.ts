/**
 * The metrics and health servers of `leasehold run` (issue 28 row 4): clients that connect and
 * send a request a byte at a time (slowloris) take at most maxConnections sockets, and only
 * until the headers deadline; then the server is free again. Against a real SQLite store.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { Leasehold } from '../../src/core/leasehold.js';
import { startProbeServers } from '../../src/health/serve.js';
import { resolveHttpLimits } from '../../src/observe/http-limits.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';
import { until } from '../cli/helpers.js';

/** Connects and sends part of a request's headers, never the blank line that ends them. */
function slowloris(port: number): Promise<{ socket: Socket; closed: () => boolean; answer: () => string }> {
  return new Promise((resolve, reject) => {
    let closed = false;
    let answer = '';
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-Slow: `);
      resolve({ socket, closed: () => closed, answer: () => answer });
    });
    socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    socket.on('close', () => (closed = true));
    socket.once('error', reject);
  });
}

void describe('metrics and health servers: bounded connections and request time (sqlite)', () => {
  let ts: TestStore;
  before(async () => {
    ts = await makeTestStore('sqlite');
  });
  after(async () => {
    await ts.cleanup();
  });

  void it('slowloris clients fill at most maxConnections, are cut off at the headers deadline, and the probes answer again', async () => {
    const lh = new Leasehold({ store: await ts.open() });
    const lease = lh.lease(`probe-${randomBytes(4).toString('hex')}`, { ttl: 2000 });
    const limits = { maxConnections: 3, headersTimeoutMs: 500, requestTimeoutMs: 500 };
    const probes = await startProbeServers({ leasehold: lh, lease, host: '127.0.0.1', metricsPort: 0, healthPort: 0, limits });
    const slow: Socket[] = [];
    try {
      for (const [what, base, path] of [
        ['metrics', probes.metricsUrl!, '/metrics'],
        ['health', probes.healthUrl!, '/healthz'],
      ] as const) {
        const port = Number(new URL(base).port);
        const stalled: Array<Awaited<ReturnType<typeof slowloris>>> = [];
        for (let i = 0; i < limits.maxConnections; i++) stalled.push(await slowloris(port));
        slow.push(...stalled.map((s) => s.socket));
        // Accepted in order: the three stalled connections are counted before this one arrives.
        await assert.rejects(fetch(`${base}${path}`), `${what}: no connection beyond maxConnections`);
        // The headers deadline plus the check interval (a quarter of it); ten times that for a loaded machine.
        await until(`${what}: the stalled requests are cut off`, () => stalled.every((s) => s.closed()), 10 * limits.headersTimeoutMs);
        for (const s of stalled) assert.match(s.answer(), /^HTTP\/1\.1 408/, `${what}: told why: ${s.answer()}`);
        const r = await fetch(`${base}${path}`);
        assert.ok(r.status === 200 || r.status === 503, `${what} answers again: ${r.status}`);
        await r.text();
      }
    } finally {
      for (const s of slow) s.destroy();
      await probes.close();
      await lh.close();
    }
  });

  void it('defaults: 64 connections, 10s for a request; a bad limit is a ConfigError', async () => {
    assert.deepEqual(resolveHttpLimits(), { maxConnections: 64, headersTimeoutMs: 10_000, requestTimeoutMs: 10_000 });
    assert.deepEqual(resolveHttpLimits({ headersTimeoutMs: 20_000, requestTimeoutMs: 5000 }).headersTimeoutMs, 5000, 'headers within the request deadline');
    const lh = new Leasehold({ store: await ts.open() });
    try {
      const started = startProbeServers({ leasehold: lh, lease: lh.lease('x'), host: '127.0.0.1', healthPort: 0, limits: { maxConnections: 0 } });
      await assert.rejects(started, /maxConnections must be a whole number of at least 1/);
      await started.then((p) => p.close(), () => {});
    } finally {
      await lh.close();
    }
  });
});
