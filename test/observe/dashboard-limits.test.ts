/**
 * Bounded dashboard (issue 28 row 4): event-stream clients that never read cannot make the
 * dashboard buffer without limit. Raw sockets ask for /events and then stop reading; the test
 * drives real changes through a SQLite store and watches what the server holds for each of
 * them (the server-side socket's writableLength: bytes accepted by the server and not yet
 * taken by the kernel). At most one state waits per client, a client that takes none within
 * its timeout is disconnected, one client beyond the cap is answered 503, and a page that
 * reads keeps getting states throughout.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { get, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { Board, boardHandler } from '../../src/cli/dashboard.js';
import { limitedServer } from '../../src/observe/http-limits.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';
import { until } from '../cli/helpers.js';

/** A client that sends the request and, once the response starts, never reads again. */
function stalledClient(port: number): Promise<{ socket: Socket; head: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => {});
    socket.once('data', (d: Buffer) => {
      socket.pause(); // from here the kernel's buffers fill, then the server's would
      resolve({ socket, head: d.toString('latin1') });
    });
    socket.once('close', () => reject(new Error('closed before answering')));
    socket.write(`GET /events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
  });
}

void describe('dashboard limits (sqlite)', () => {
  let ts: TestStore;
  before(async () => {
    ts = await makeTestStore('sqlite');
  });
  after(async () => {
    await ts.cleanup();
  });

  const claim = async (name: string): Promise<void> => {
    const [r] = await ts.store.claim([{ name, holder: 'limits-test', ttlMs: 60_000, expect: null, nextNonce: randomBytes(16).toString('base64url') }]);
    assert.equal(r?.outcome, 'acquired');
  };

  void it('stalled event-stream clients: at most one state waits for each, they are dropped at the timeout, one over the cap gets 503', async () => {
    // ~200 KB per state: the history carries 150 revocations with 1 KB reasons.
    for (let i = 0; i < 150; i++) {
      await claim('filler');
      await ts.store.revoke('filler', `${i} ${'r'.repeat(1000)}`);
    }
    const clientTimeoutMs = 8000;
    const warnings: string[] = [];
    const board = new Board(ts.store, { maxClients: 3, clientTimeoutMs, warn: (m) => warnings.push(m) });
    await board.start();
    // Request deadlines far shorter than the streams (which live through the client timeout, 8 s,
    // and over twenty changes): they bound receiving a request, never an event stream. Longer than
    // a loaded host takes to read one: at 1 s a stressed run's stalled client was answered 408.
    const server: Server = limitedServer(boardHandler(board, true), { maxConnections: board.maxConnections, headersTimeoutMs: 3000, requestTimeoutMs: 3000 });
    const byPeerPort = new Map<number, Socket>();
    server.on('connection', (s: Socket) => byPeerPort.set(s.remotePort!, s));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    let reading: ReturnType<typeof get> | undefined;
    const stalled: Socket[] = [];
    let sampler: NodeJS.Timeout | undefined;
    try {
      for (let i = 0; i < 2; i++) {
        const c = await stalledClient(port);
        assert.match(c.head, /^HTTP\/1\.1 200/);
        stalled.push(c.socket);
      }
      let statesRead = 0;
      await new Promise<void>((resolve, reject) => {
        reading = get(`http://127.0.0.1:${port}/events`, (res) => {
          res.setEncoding('utf8').on('data', (d: string) => (statesRead += d.split('event: state\n').length - 1));
          resolve();
        });
        reading.on('error', reject);
      });
      await until('the board has its three clients', () => board.state().clients === 3);

      const fourth = await stalledClient(port);
      fourth.socket.destroy();
      assert.equal(fourth.head.split('\r\n')[0], 'HTTP/1.1 503 Service Unavailable', 'a client over --max-clients is refused');
      assert.match(fourth.head, /serves at most 3 live pages at once \(--max-clients\)/, fourth.head);
      assert.equal(board.state().refused, 1);

      const serverSide = stalled.map((s) => byPeerPort.get(s.localPort!)!);
      let maxBuffered = 0;
      sampler = setInterval(() => {
        for (const s of serverSide) if (!s.destroyed) maxBuffered = Math.max(maxBuffered, s.writableLength);
      }, 10);
      const change = async (): Promise<void> => {
        const seen = board.state().changes;
        await claim('busy');
        await ts.store.revoke('busy', 'tick');
        await until('the board sees the change', () => board.state().changes > seen);
      };
      // Until the kernel's buffers for both stalled clients are full and the server holds bytes for them...
      await until('the stalled clients stop taking what is sent', async () => {
        await change();
        return serverSide.every((s) => s.writableLength > 0);
      }, 60_000);
      // ...then fifteen more states, each of which the old code queued for every client.
      const readBefore = statesRead;
      for (let i = 0; i < 15; i++) await change();
      const stateBytes = Buffer.byteLength(JSON.stringify(board.state()));
      // One state being written and nothing more (a newer one replaces it): twice a state's size bounds it.
      assert.ok(maxBuffered <= 2 * stateBytes, `the server held ${maxBuffered} bytes for a client that reads nothing; a state is ${stateBytes}`);
      assert.ok(statesRead > readBefore, 'the page that reads kept getting states');

      // Dropped within the timeout and a sweep (a quarter of it); twice the timeout for a loaded machine.
      await until('both stalled clients are disconnected', () => serverSide.every((s) => s.destroyed), 2 * clientTimeoutMs);
      assert.equal(board.state().dropped, 2);
      assert.equal(board.state().clients, 1, 'the reading page stays');
      assert.ok(warnings.some((w) => /disconnected a dashboard client that took no update/.test(w)), warnings.join('\n'));
      assert.ok(warnings.some((w) => /refused a dashboard client: 3 live pages are open/.test(w)), warnings.join('\n'));
      const readAfter = statesRead;
      await change();
      await until('the reading page gets the next state', () => statesRead > readAfter);
    } finally {
      clearInterval(sampler);
      reading?.destroy();
      for (const s of stalled) s.destroy();
      server.closeAllConnections();
      await board.close();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });

  void it('bad limits are ConfigErrors', () => {
    assert.throws(() => new Board(ts.store, { maxClients: 0 }), /maxClients must be a whole number of at least 1/);
    assert.throws(() => new Board(ts.store, { clientTimeoutMs: 1.5 }), /clientTimeoutMs must be a whole number/);
    assert.throws(() => limitedServer(() => {}, { maxConnections: -1 }), /maxConnections must be a whole number/);
  });
});
