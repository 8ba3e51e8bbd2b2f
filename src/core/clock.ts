import { performance } from 'node:perf_hooks';

/**
 * Monotonic milliseconds for local deadlines. It does not jump with NTP, but a suspended VM's
 * monotonic clock does not count the suspension either: that is why every deadline here is
 * derived from the store's answer, and why suspension has detectors of its own.
 */
export function monoNow(): number {
  return performance.now();
}

export function wallNow(): number {
  return Date.now();
}

export function jitter(maxMs: number): number {
  return Math.random() * Math.max(0, maxMs);
}
