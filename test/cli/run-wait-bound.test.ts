/**
 * `leasehold run --wait D` gives up when D ends, not when the attempt in flight ends: each
 * attempt, its connect included, is bounded by what is left of the wait. Against a closed
 * loopback port (refused at once) and against a listener that accepts and never answers (a
 * call hangs for the driver's whole timeout: 2s for etcd, 5s for PostgreSQL's connect and
 * Redis's commands), for each network store.
 *
 * The slack is derived, not guessed: a `--no-wait` run against the closed port, measured in the
 * same test under the same load, is the fixed cost of any run that gives up (starting node,
 * loading the CLI and the driver, one refused attempt, closing the store). A run that keeps to
 * its wait exits within D + that + 500ms of scheduling noise; one whose last attempt runs on
 * for the driver's timeout does not (seen before the fix: --wait 2s exited after 5.4-6.3s
 * against the silent listener, and after 3.5s against Redis's closed port).
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { Sandbox } from './helpers.js';
import { selectedStores, type StoreKind } from '../helpers/stores.js';

const sb = new Sandbox('run-wait-bound');
const servers: Server[] = [];
const held = new Set<Socket>();
after(async () => {
  for (const s of held) s.destroy();
  await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  sb.cleanup();
});

async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const addr = s.address();
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return typeof addr === 'object' && addr !== null ? addr.port : 0;
}

/** A listener that accepts every connection and never answers, nor closes one. */
async function silentListener(): Promise<number> {
  const server = createServer((socket) => {
    held.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => held.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  const addr = server.address();
  return typeof addr === 'object' && addr !== null ? addr.port : 0;
}

const URLS: Partial<Record<StoreKind, (port: number) => string>> = {
  postgres: (port) => `postgres://postgres@127.0.0.1:${port}/test`,
  redis: (port) => `redis://127.0.0.1:${port}/0`,
  etcd: (port) => `etcd://127.0.0.1:${port}`,
};

const WAIT_MS = 2000;
const NOISE_MS = 500;

void describe('leasehold run --wait D: an unreachable store ends the wait on time', () => {
  for (const kind of selectedStores()) {
    const url = URLS[kind];
    if (url === undefined) continue;
    void it(`${kind}: a closed port and a silent listener both exit 3 within the wait plus a give-up's fixed cost`, async () => {
      const closed = url(await closedPort());
      const base = await sb.run(['run', '--name', 'bound', '--store', closed, '--no-wait', '--', 'true']);
      assert.equal(base.code, 3, base.stderr);
      const bound = WAIT_MS + base.ms + NOISE_MS;
      for (const [what, target] of [
        ['closed port', closed],
        ['silent listener', url(await silentListener())],
      ] as const) {
        const r = await sb.run(['run', '--name', 'bound', '--store', target, '--wait', `${WAIT_MS}ms`, '--', 'true']);
        assert.equal(r.code, 3, `${what}: ${r.stderr}`);
        assert.ok(r.ms >= WAIT_MS, `${what}: gave up after ${Math.round(r.ms)}ms, before the ${WAIT_MS}ms wait`);
        assert.ok(r.ms <= bound, `${what}: exited after ${Math.round(r.ms)}ms; the wait was ${WAIT_MS}ms and a give-up costs ${Math.round(base.ms)}ms: ${r.stderr}`);
      }
    });
  }
});
