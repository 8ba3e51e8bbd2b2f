import { homedir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../core/errors.js';
import type { FleetPort } from '../fleet/port.js';
import type { SlotLedgerPort } from '../scheduler/ledger.js';
import type { BackendDescriptor, EmbeddedDriver } from './descriptor.js';
import type { LeaseStore } from './store.js';
import { redactUrl } from './url.js';
import { etcd } from './etcd/descriptor.js';
import { mysql } from './mysql/descriptor.js';
import { postgres } from './postgres/descriptor.js';
import { redis } from './redis/descriptor.js';
import { sqlite } from './sqlite/descriptor.js';

/**
 * The registry: every backend, one line each. A descriptor loads its store's modules (and its
 * driver) only when a factory is called, so listing a backend here costs nothing at start-up.
 */
export const BACKENDS: readonly BackendDescriptor[] = [postgres, sqlite, redis, etcd, mysql];

export type { BackendDescriptor, BackendOpenOptions, BackendPreflight, EmbeddedDriver, PreflightCheck } from './descriptor.js';

/**
 * Where the embedded default lives when no store is named: `$XDG_STATE_HOME/leasehold/`,
 * falling back to `~/.local/state/leasehold/`. State, not cache: it holds the token counters
 * that must never go backwards.
 */
export function defaultStoreUrl(env: NodeJS.ProcessEnv = process.env): string {
  const base = env['XDG_STATE_HOME'] !== undefined && env['XDG_STATE_HOME'] !== '' ? env['XDG_STATE_HOME'] : join(homedir(), '.local', 'state');
  return `sqlite:${join(base, 'leasehold', 'leasehold.db')}`;
}

/** The store URL to use: the explicit one, else `LEASEHOLD_STORE`, else the embedded default. */
export function resolveStoreUrl(explicit?: string, env: NodeJS.ProcessEnv = process.env): string {
  if (explicit !== undefined && explicit !== '') return explicit;
  const fromEnv = env['LEASEHOLD_STORE'];
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  return defaultStoreUrl(env);
}

export interface OpenStoreOptions {
  /** PostgreSQL: schema for leasehold's tables (also `?schema=` in the URL). */
  schema?: string;
}

/** The scheme of a store URL, lower case, or `undefined` when it has none. */
function schemeOf(url: string): string | undefined {
  return /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
}

/** The backend that opens `url`, or `undefined` for a scheme no backend has. */
export function backendForUrl(url: string): BackendDescriptor | undefined {
  const scheme = schemeOf(url);
  return scheme === undefined ? undefined : BACKENDS.find((b) => b.schemes.includes(scheme));
}

/** The backend whose stores have this `kind` (`LeaseStore.kind`). */
export function backendOfKind(kind: string): BackendDescriptor | undefined {
  return BACKENDS.find((b) => b.kind === kind);
}

/** The embedded backend's driver (SQLite's), for a process that opens a file of its own beside the store. */
export function embeddedDriver(): EmbeddedDriver {
  const b = BACKENDS.find((x) => x.embedded !== undefined);
  if (b?.embedded === undefined) throw new Error('no embedded backend is registered');
  return b.embedded;
}

/** The backends that have `what`, for people: "PostgreSQL, SQLite, Redis and etcd" (or "... or etcd"). */
function backendsWith(what: (b: BackendDescriptor) => boolean, joiner: 'and' | 'or'): string {
  const names = BACKENDS.filter(what).map((b) => b.label);
  return names.length <= 1 ? names.join('') : `${names.slice(0, -1).join(', ')} ${joiner} ${names[names.length - 1]!}`;
}

/**
 * Opens a store from a URL (every backend is also `XStore.create(options)`, the same shape): `postgres://...`, `sqlite:PATH`, `redis://...` (or `redis+sentinel://`), `etcd://host:port`.
 * Each driver is loaded only when its scheme is used.
 * @throws {ConfigError} for a missing URL, an unknown scheme or a malformed URL.
 */
export async function openStore(url: string, options: OpenStoreOptions = {}): Promise<LeaseStore> {
  // `openStore(process.env.LEASEHOLD_STORE!)` with the variable unset is the first thing a
  // newcomer tries; it must say what to do, not fail inside a string method.
  if (typeof url !== 'string' || url.trim() === '') {
    throw new ConfigError(
      `openStore needs a store URL, got ${url === '' ? 'an empty string' : typeof url === 'string' ? 'only spaces' : String(url)}: ` +
        `pass one (${BACKENDS.map((b) => `${b.schemes[0]!}:${b.embedded === undefined ? '//...' : '/path/file.db'}`).join(', ')}), or use openStore(resolveStoreUrl()) for LEASEHOLD_STORE or else the embedded default`,
    );
  }
  const backend = backendForUrl(url);
  if (backend === undefined) {
    const scheme = schemeOf(url);
    const examples = BACKENDS.map((b) => b.exampleUrl);
    throw new ConfigError(
      `store URL ${JSON.stringify(redactUrl(url))} has ${scheme === undefined ? 'no scheme' : `an unknown scheme "${scheme}"`}; ` +
        `use ${examples.slice(0, -1).join(', ')} or ${examples[examples.length - 1]!}`,
    );
  }
  return backend.openStore(url, options);
}

/**
 * The fleet registry's store-side half beside the leases of `store` (src/fleet/open.ts wraps it).
 * @throws {ConfigError} for a store whose backend has no fleet registry.
 */
export async function openFleetPort(store: LeaseStore): Promise<FleetPort> {
  const port = await backendOfKind(store.kind)?.openFleet?.(store);
  if (port === undefined) {
    throw new ConfigError(
      `the fleet registry runs on ${backendsWith((b) => b.openFleet !== undefined, 'and')}; ${redactUrl(store.description)} is a ${store.kind} store`,
    );
  }
  return port;
}

/**
 * The slot ledger (cron, `run --once-per`) in the database of `store`, opened from `url`.
 * @throws {ConfigError} for a store whose backend has no slot ledger.
 */
export async function openSlotLedger(store: LeaseStore, url: string): Promise<SlotLedgerPort> {
  const ledger = await backendOfKind(store.kind)?.openSlotLedger?.(store, url);
  if (ledger === undefined) {
    throw new ConfigError(
      `the slot ledger (cron, run --once-per) needs a ${backendsWith((b) => b.openSlotLedger !== undefined, 'or')} store; ${store.description} is ${store.kind}`,
    );
  }
  return ledger;
}
