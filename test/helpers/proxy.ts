import { createServer, connect, type Server, type Socket } from 'node:net';

export type ProxyMode = 'pass' | 'blackhole' | 'reset';

/**
 * A loopback TCP proxy in front of a store, for fault tests. `pass` forwards; `blackhole` keeps
 * every socket open but drops all bytes both ways (a partition: calls hang until they time
 * out); `reset` destroys every connection and refuses new ones (a crashed server).
 */
export class TcpProxy {
  private server: Server | undefined;
  private readonly pairs = new Set<[Socket, Socket]>();
  mode: ProxyMode = 'pass';
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** Listens on `host` (another loopback address lets it take its target's port number). */
  async start(port = 0, host = '127.0.0.1'): Promise<this> {
    this.server = createServer((client) => {
      if (this.mode === 'reset') {
        client.destroy();
        return;
      }
      const upstream = connect(this.targetPort, this.targetHost);
      const pair: [Socket, Socket] = [client, upstream];
      this.pairs.add(pair);
      const drop = (): void => {
        client.destroy();
        upstream.destroy();
        this.pairs.delete(pair);
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      client.on('data', (d) => {
        if (this.mode === 'pass') upstream.write(d);
      });
      upstream.on('data', (d) => {
        if (this.mode === 'pass') client.write(d);
      });
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(port, host, () => resolve());
    });
    const addr = this.server.address();
    this.port = typeof addr === 'object' && addr !== null ? addr.port : 0;
    return this;
  }

  setMode(mode: ProxyMode): void {
    this.mode = mode;
    if (mode === 'reset') {
      for (const [a, b] of this.pairs) {
        a.destroy();
        b.destroy();
      }
      this.pairs.clear();
    }
  }

  async stop(): Promise<void> {
    this.setMode('reset');
    await new Promise<void>((resolve) => (this.server === undefined ? resolve() : this.server.close(() => resolve())));
  }
}
