import { homedir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../core/errors.js';
import type { LeaseStore } from './store.js';
import { redactUrl } from './url.js';

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
        'pass one (postgres://..., sqlite:/path/file.db, redis://..., etcd://...), or use openStore(resolveStoreUrl()) for LEASEHOLD_STORE or else the embedded default',
    );
  }
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  switch (scheme) {
    case 'postgres':
    case 'postgresql': {
      const { PostgresStore } = await import('./postgres/store.js');
      return PostgresStore.create({ url, ...(options.schema === undefined ? {} : { schema: options.schema }) });
    }
    case 'sqlite': {
      const { SqliteStore } = await import('./sqlite/store.js');
      return SqliteStore.create({ url });
    }
    case 'redis':
    case 'rediss':
    case 'redis+sentinel':
    case 'rediss+sentinel': {
      const { RedisStore } = await import('./redis/store.js');
      return RedisStore.create({ url });
    }
    case 'etcd':
    case 'etcds': {
      const { EtcdStore } = await import('./etcd/store.js');
      return EtcdStore.create({ url });
    }
    default:
      throw new ConfigError(
        `store URL ${JSON.stringify(redactUrl(url))} has ${scheme === undefined ? 'no scheme' : `an unknown scheme "${scheme}"`}; ` +
          'use postgres://user@host/db, sqlite:/path/file.db, redis://host:6379 or etcd://host:2379',
      );
  }
}
