/**
 * Proxies the per-slot fake-clock tests put between a replica and the world's stores: a ledger
 * whose store time lags (etcd's lower bound from its HTTP Date header), and a lease store whose
 * claims are decided late (a loaded host or store).
 */
import type { SlotLedgerPort } from '../../src/scheduler/ledger.js';
import type { LeasePort } from '../../src/core/port.js';
import type { World } from '../unit/harness.js';

/** `ledger` as one replica sees it: every store time in its answers `lagMs` behind (etcd's lower bound). */
export function lagging(ledger: SlotLedgerPort, lagMs: number): SlotLedgerPort {
  const back = (v: unknown): unknown => {
    if (Array.isArray(v) || v === null || typeof v !== 'object') return v;
    const o = v as Record<string, unknown>;
    return typeof o.storeNowMs === 'number' ? { ...o, storeNowMs: o.storeNowMs - lagMs } : v;
  };
  return new Proxy(ledger, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function' || prop === 'constructor') return v;
      return async (...args: unknown[]) => back(await (v as (...a: unknown[]) => unknown).apply(target, args));
    },
  });
}

/** The world's store with this replica's lease claims decided `delay.ms` after they are sent (0: at once). */
export function lateClaims(cw: World, delay: { ms: number }): LeasePort {
  const store = cw.store as LeasePort;
  return new Proxy(store, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      const f = (...args: unknown[]): unknown => (v as (...a: unknown[]) => unknown).apply(target, args);
      if (prop !== 'claim') return f;
      return (...args: unknown[]) => (delay.ms === 0 ? f(...args) : new Promise((resolve) => cw.clock.setTimeout(() => resolve(f(...args)), delay.ms)));
    },
  });
}

/** `ledger` with its first `interruptStale` (a replica's first ledger call) answered `ms` late on the world's clock: a slow store at startup. */
export function slowFirstCall(ledger: SlotLedgerPort, cw: World, ms: number): SlotLedgerPort {
  let slow = true;
  return new Proxy(ledger, {
    get(target, prop) {
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      const f = (...args: unknown[]): unknown => (v as (...a: unknown[]) => unknown).apply(target, args);
      if (prop !== 'interruptStale') return f;
      return async (...args: unknown[]) => {
        if (slow) {
          slow = false;
          await new Promise<void>((resolve) => cw.clock.setTimeout(() => resolve(), ms));
        }
        return await f(...args);
      };
    },
  });
}
