/**
 * The LISTEN connection behind PostgresStore.watchFreed: one per store instance, however many
 * leases wait on it. When it drops it reconnects with backoff (./reconnect.ts) and calls
 * `onReconnect`, so waiters look again: a notification sent while it was away is gone.
 */
import type { FreedListener } from '../../core/port.js';
import type { PgListenClientLike } from './store.js';
import { closeListenClient } from './driver.js';
import { listenReconnectDelayMs } from './reconnect.js';

interface ListenSetup {
  /** The schema's NOTIFY channel. */
  channel: string;
  /** A new LISTEN connection. */
  connect(): Promise<PgListenClientLike>;
  /** Whether a NOTIFY reaches `c`: asked once, on the first connection. */
  probe(c: PgListenClientLike): Promise<boolean>;
  /** What a failed probe left to throw (the store's ConfigError). */
  broken(): unknown;
}

/** Where the store keeps the listener's stop, so that its close() can call it. */
interface ListenRegistry {
  register(stop: () => Promise<void>): void;
  unregister(stop: () => Promise<void>): void;
}

/**
 * Listens on `setup.channel` and calls `listener` with each payload. Resolves with a stop once
 * the first connection is set up (or has failed and is being retried); rejects with
 * `setup.broken()` when the first probe shows that notifications do not arrive.
 */
export async function listenForFreed(setup: ListenSetup, listener: FreedListener, onReconnect: (() => void) | undefined, registry: ListenRegistry): Promise<() => Promise<void>> {
  const { channel } = setup;
  let probed = false;
  let stopped = false;
  let client: PgListenClientLike | undefined;
  let timer: NodeJS.Timeout | undefined;
  let attempt = 0;

  /** The set-up under way, if any: stop() waits for it, so close() leaves no connection open. */
  let connecting: Promise<void> | undefined;
  /**
   * Connections that ended or failed. One that ends while it is still being set up (its server
   * killed during the probe) must not be installed: its 'end' came before it was the listener's,
   * so nothing would reconnect, and every follower of this store would wait for expiry from then
   * on (test/topologies/pg-multi-host: the follower's LISTEN never came back after a promotion).
   */
  const dead = new WeakSet<PgListenClientLike>();

  const connect = async (): Promise<void> => {
    if (stopped) return;
    let c: PgListenClientLike | undefined;
    try {
      c = await setup.connect();
      const mine = c;
      mine.on('notification', (msg) => {
        if (msg.channel === channel && msg.payload !== undefined) listener(msg.payload);
      });
      mine.on('error', () => {
        dropped(mine);
      });
      mine.on('end', () => {
        dropped(mine);
      });
      await mine.query(`LISTEN "${channel}"`);
      if (!probed && !stopped) {
        if (!(await setup.probe(mine))) {
          await mine.query(`UNLISTEN "${channel}"`).catch(() => {});
          stopped = true;
          throw setup.broken();
        }
        probed = true;
      }
      // Stopped (the store closed) while this connection was being set up: it is not kept.
      if (stopped) {
        c = undefined;
        await closeListenClient(mine, true);
        return;
      }
      if (dead.has(mine)) throw new Error('the LISTEN connection ended while it was being set up');
      // An idle LISTEN socket must not keep the process alive on its own (waiters hold refs).
      (mine as unknown as { connection?: { stream?: { unref?: () => void } } }).connection?.stream?.unref?.();
      client = mine;
      c = undefined;
      if (attempt > 0) onReconnect?.();
      attempt = 0;
    } catch (err) {
      // A connection whose set-up failed is closed, whatever failed: left open, its socket
      // (not yet unref'd) would hold the process open, and a pool's client would stay checked out.
      // Not waited for: the reconnect does not depend on how a failed connection's close goes.
      if (c !== undefined) void closeListenClient(c, err === setup.broken());
      if (err === setup.broken() && err !== undefined) throw err;
      scheduleReconnect();
    }
  };
  const track = (): Promise<void> => {
    const p = connect();
    connecting = p;
    void p.then(
      () => (connecting === p ? (connecting = undefined) : undefined),
      () => (connecting === p ? (connecting = undefined) : undefined),
    );
    return p;
  };
  const dropped = (c: PgListenClientLike): void => {
    dead.add(c);
    if (client !== c) return;
    client = undefined;
    void closeListenClient(c, false);
    scheduleReconnect();
  };
  const scheduleReconnect = (): void => {
    if (stopped || timer !== undefined) return;
    attempt++;
    const delay = listenReconnectDelayMs(attempt, Math.random());
    timer = setTimeout(() => {
      timer = undefined;
      void track();
    }, delay);
    timer.unref();
  };
  const stop = async (): Promise<void> => {
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    const c = client;
    client = undefined;
    registry.unregister(stop);
    if (c !== undefined) await closeListenClient(c, true);
    // A set-up under way closes its own connection once it sees `stopped`.
    await connecting?.catch(() => undefined);
  };

  // Registered before the first set-up, so that a close() during it stops it (registered after,
  // close() found nothing to stop and the set-up kept its connection).
  registry.register(stop);
  try {
    await track();
  } catch (err) {
    registry.unregister(stop);
    throw err;
  }
  return stop;
}
