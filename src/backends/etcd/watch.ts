import type { FreedListener } from '../store.js';
import type { EtcdWatchBuilderLike, EtcdWatcherLike } from './client.js';
import type { EtcdKeys } from './keys.js';

/**
 * Watches the term-key prefix for deletes. A term key is deleted on release, on revoke, on a
 * clone conflict (claim.ts), and by etcd when the term's etcd lease runs out, so every way a lease becomes free reaches followers
 * within one watch notification, not at their next poll.
 *
 * etcd3's watch manager reconnects by itself and resumes from the last revision it saw; we
 * still call `onReconnect` after any gap, because a resume can fail (compaction) and because
 * the first connection may only have come up after deletes we never saw. A listener that throws
 * is contained here: etcd3 would rethrow it on a fresh tick, as an uncaught exception.
 *
 * `onDown` fires when the watch stops being established (a dropped stream, a cancelled watch,
 * or no connection within the timeout): from then until `onReconnect`, deletes may be missed.
 * `up()` says whether it is established right now.
 */
export async function watchTermDeletes(
  client: { watch(): EtcdWatchBuilderLike },
  keys: EtcdKeys,
  listener: FreedListener,
  onReconnect: (() => void) | undefined,
  connectTimeoutMs: number,
  onDown?: () => void,
): Promise<{ stop(): Promise<void>; up(): boolean }> {
  let stopped = false;
  let watcher: EtcdWatcherLike | undefined;
  let missed = false;
  let connected = false;
  let restartTimer: NodeJS.Timeout | undefined;
  let firstConnected: (() => void) | undefined;

  const safely = (f: () => void): void => {
    try {
      f();
    } catch {
      // a listener's own failure must not take the watch (or the process) down
    }
  };

  /** The watch is no longer established: deletes from now until it is may be missed. */
  const lost = (): void => {
    missed = true;
    if (!connected) return;
    connected = false;
    if (onDown !== undefined && !stopped) safely(onDown);
  };

  const start = (): void => {
    if (stopped) return;
    let w: EtcdWatcherLike;
    try {
      w = client.watch().prefix(keys.termPrefix).only('delete').watcher();
    } catch {
      // Runs from a timer too: never throw from here. Try again shortly.
      lost();
      restartTimer = setTimeout(start, 1000);
      restartTimer.unref();
      return;
    }
    watcher = w;
    w.on('delete', (kv) => {
      if (watcher !== w) return;
      const name = keys.nameIn(kv.key, keys.termPrefix);
      if (name !== null) safely(() => listener(name));
    });
    w.on('connected', () => {
      if (watcher !== w) return;
      connected = true;
      firstConnected?.();
      if (missed) {
        missed = false;
        if (onReconnect !== undefined) safely(onReconnect);
      }
    });
    w.on('disconnected', () => {
      if (watcher === w) lost();
    });
    w.on('error', () => {
      // etcd cancelled the watch (for example, its resume revision was compacted away).
      // Replace it with a fresh one; the 'error' listener stays, so nothing is ever unhandled.
      if (watcher !== w || stopped) return;
      lost();
      watcher = undefined;
      void w.cancel().catch(() => {});
      restartTimer = setTimeout(start, 250);
      restartTimer.unref();
    });
  };

  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      // etcd is unreachable: return anyway, and report the gap when the watch gets through.
      firstConnected = undefined;
      missed = true;
      if (onDown !== undefined) safely(onDown);
      resolve();
    }, connectTimeoutMs);
    timer.unref();
    firstConnected = () => {
      firstConnected = undefined;
      clearTimeout(timer);
      resolve();
    };
    start();
  });

  return {
    up: () => connected && !stopped,
    async stop(): Promise<void> {
      if (stopped) return;
      stopped = true;
      connected = false;
      if (restartTimer !== undefined) clearTimeout(restartTimer);
      const w = watcher;
      watcher = undefined;
      if (w === undefined) return;
      // cancel() waits for etcd to confirm; do not let a dead connection hold close() up.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        w.cancel().catch(() => {}),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, connectTimeoutMs);
          timer.unref();
        }),
      ]);
      if (timer !== undefined) clearTimeout(timer);
    },
  };
}
