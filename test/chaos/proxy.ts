import { createServer, connect, type Server, type Socket } from 'node:net';

export type ChaosProxyMode = { kind: 'pass' } | { kind: 'delay'; ms: number } | { kind: 'blackhole' } | { kind: 'reset' };

interface Pair {
  client: Socket;
  upstream: Socket;
  /** Bytes held back by a blackhole or a delay, per direction, in order. */
  held: { up: Buffer[]; down: Buffer[] };
  /** Delivery times of delayed chunks: a later chunk never overtakes an earlier one. */
  lastAt: { up: number; down: number };
  timers: Set<NodeJS.Timeout>;
}

/**
 * A loopback TCP proxy between the workers and the lease store, with the faults a network
 * really produces:
 *  - `delay`: every chunk is delivered `ms` late, in order;
 *  - `blackhole`: nothing is delivered, but nothing is lost either: bytes are HELD, the way a
 *    partition holds them in TCP retransmission, and `heal('flush')` delivers them (the
 *    partition ended before TCP gave up) while `heal('reset')` kills the connections (it did
 *    not). Dropping bytes on a live connection, which TCP never does, would make pipelined
 *    protocols (Redis) pair replies with the wrong commands and test nothing real;
 *  - `reset`: every connection is destroyed and new ones are refused (a crashed server).
 * Listens on 127.0.0.1 only and connects only to a loopback target.
 */
export class ChaosProxy {
  private server: Server | undefined;
  private readonly pairs = new Set<Pair>();
  private mode: ChaosProxyMode = { kind: 'pass' };
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {
    if (!isLoopback(targetHost)) throw new Error(`the chaos proxy only forwards to loopback addresses, not ${targetHost}`);
  }

  async start(): Promise<this> {
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(0, '127.0.0.1', () => resolve());
    });
    const addr = this.server.address();
    this.port = typeof addr === 'object' && addr !== null ? addr.port : 0;
    return this;
  }

  get modeName(): string {
    return this.mode.kind === 'delay' ? `delay ${this.mode.ms}ms` : this.mode.kind;
  }

  private accept(client: Socket): void {
    if (this.mode.kind === 'reset') {
      client.destroy();
      return;
    }
    const upstream = connect(this.targetPort, this.targetHost);
    const pair: Pair = { client, upstream, held: { up: [], down: [] }, lastAt: { up: 0, down: 0 }, timers: new Set() };
    this.pairs.add(pair);
    const drop = (): void => this.destroy(pair);
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.on('data', (d: Buffer) => this.forward(pair, 'up', d));
    upstream.on('data', (d: Buffer) => this.forward(pair, 'down', d));
  }

  private forward(pair: Pair, dir: 'up' | 'down', data: Buffer): void {
    const to = dir === 'up' ? pair.upstream : pair.client;
    const mode = this.mode;
    if (mode.kind === 'blackhole') {
      pair.held[dir].push(data);
      return;
    }
    if (mode.kind === 'reset') return; // the pair is being destroyed
    const now = performance.now();
    const at = Math.max(now + (mode.kind === 'delay' ? mode.ms : 0), pair.lastAt[dir]);
    if (at <= now && pair.held[dir].length === 0) {
      to.write(data);
      return;
    }
    pair.lastAt[dir] = at;
    pair.held[dir].push(data);
    const timer = setTimeout(() => {
      pair.timers.delete(timer);
      const next = pair.held[dir].shift();
      if (next !== undefined && !to.destroyed) to.write(next);
    }, at - now);
    pair.timers.add(timer);
  }

  private destroy(pair: Pair): void {
    for (const t of pair.timers) clearTimeout(t);
    pair.timers.clear();
    pair.client.destroy();
    pair.upstream.destroy();
    this.pairs.delete(pair);
  }

  /** Delay every chunk both ways by `ms`. */
  delay(ms: number): void {
    this.mode = { kind: 'delay', ms };
  }

  /** Hold every byte both ways until `heal`. */
  blackhole(): void {
    this.mode = { kind: 'blackhole' };
  }

  /** Destroy every connection and refuse new ones until `heal`. */
  reset(): void {
    this.mode = { kind: 'reset' };
    for (const p of [...this.pairs]) this.destroy(p);
  }

  /**
   * Back to forwarding. After a blackhole: 'flush' delivers what was held (in order, before
   * anything new), 'reset' destroys the connections that were caught in it.
   */
  heal(after: 'flush' | 'reset' = 'flush'): void {
    const wasBlackhole = this.mode.kind === 'blackhole';
    this.mode = { kind: 'pass' };
    if (!wasBlackhole) return;
    for (const p of [...this.pairs]) {
      const caught = p.held.up.length > 0 || p.held.down.length > 0;
      if (after === 'reset' && caught) {
        this.destroy(p);
        continue;
      }
      for (const d of p.held.up.splice(0)) p.upstream.write(d);
      for (const d of p.held.down.splice(0)) p.client.write(d);
    }
  }

  async stop(): Promise<void> {
    this.mode = { kind: 'reset' };
    for (const p of [...this.pairs]) this.destroy(p);
    await new Promise<void>((resolve) => (this.server === undefined ? resolve() : this.server.close(() => resolve())));
  }
}

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}
