import type { BackendDescriptor } from '../descriptor.js';
import type { LeaseStore } from '../store.js';
// Light: it finds and loads a driver only when called (better-sqlite3 is optional).
import { loadSqliteDriver, resolveSqliteDriver } from './driver.js';

/** SQLite, the embedded default: one file, shared by the processes of one machine. */
export const sqlite: BackendDescriptor = {
  kind: 'sqlite',
  label: 'SQLite',
  schemes: ['sqlite'],
  exampleUrl: 'sqlite:/path/file.db',
  async openStore(url) {
    const { SqliteStore } = await import('./store.js');
    return SqliteStore.create({ url });
  },
  async openFleet(store) {
    const { SqliteStore } = await import('./store.js');
    if (!(store instanceof SqliteStore)) return undefined;
    const { SqliteFleet } = await import('./fleet.js');
    return new SqliteFleet(store);
  },
  async openSlotLedger(store) {
    const { SqliteStore } = await import('./store.js');
    if (!(store instanceof SqliteStore)) return undefined;
    const { SqliteSlotLedger } = await import('./slots.js');
    return new SqliteSlotLedger(store.database);
  },
  async preflight(url) {
    const { sqlitePreflight } = await import('./preflight.js');
    return sqlitePreflight(url);
  },
  embedded: {
    probe() {
      const d = resolveSqliteDriver();
      return { name: d.name, version: d.version, sqliteVersion: d.sqliteVersion };
    },
    load: () => loadSqliteDriver(),
    fileOf(store: LeaseStore) {
      // Structural, so that asking costs no import: a SqliteStore has a path; ':memory:' has no file.
      if (store.kind !== 'sqlite') return undefined;
      const path = (store as { path?: unknown }).path;
      return typeof path === 'string' && path !== '' && path !== ':memory:' ? path : undefined;
    },
  },
};
