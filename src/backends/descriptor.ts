import type { FleetPort } from '../fleet/port.js';
import type { SlotLedgerPort } from '../scheduler/ledger.js';
import type { LeaseStore } from './store.js';

/**
 * What a backend folder tells the rest of leasehold about itself: one object, exported from the
 * folder's `descriptor.ts` and listed once in the registry (./index.ts). The CLI, the fleet, the
 * scheduler, the demo and doctor reach a store only through this, so a new store is its folder
 * plus one line in the registry (in the spirit of kysely's `Dialect`).
 *
 * Every factory loads the folder's modules (and so its driver) on first use: importing the
 * registry costs nothing for the stores a process does not use.
 *
 * What a store can do that the engine adapts to (a handover, a freed channel that also reports
 * expiries, a settings check, a restore check) is declared on the store object itself, as the
 * documented optional members of `LeasePort` and `LeaseAdmin` (./store.ts): the engine holds a
 * store, not a descriptor. What the descriptor adds is what exists around the store: a fleet
 * registry, a slot ledger, checks before opening.
 */
export interface BackendDescriptor {
  /** The `kind` of the stores it opens (`LeaseStore.kind`). */
  readonly kind: string;
  /** For people: `PostgreSQL`, `SQLite`, ... */
  readonly label: string;
  /** URL schemes it opens, lower case, without the colon. */
  readonly schemes: readonly string[];
  /** One URL shown in errors that list what would work. */
  readonly exampleUrl: string;

  /** Opens a lease store from a URL with one of `schemes`. @throws {ConfigError} for a malformed URL. */
  openStore(url: string, options: BackendOpenOptions): Promise<LeaseStore>;

  /**
   * The fleet registry beside the leases of `store` (which this backend opened). Absent when the
   * backend has none; `undefined` when `store` is not one of this backend's own objects.
   */
  openFleet?(store: LeaseStore): Promise<FleetPort | undefined>;

  /**
   * The slot ledger (cron, `run --once-per`) in the store's own database: its claims check the
   * lease rows. `url` is the store's URL, for a backend that opens a connection of its own.
   * Absent when the backend has none; `undefined` for a store that is not this backend's.
   */
  openSlotLedger?(store: LeaseStore, url: string): Promise<SlotLedgerPort | undefined>;

  /**
   * Checks `leasehold doctor` runs before it opens the store at `url`, for what opening would
   * hide or change (SQLite: the driver, file modes, an integrity check; opening a damaged file
   * writes to it). `open: false` tells doctor not to open the store, and why.
   */
  preflight?(url: string): Promise<BackendPreflight>;

  /** An embedded backend (SQLite): its driver, for a process that opens a file of its own beside the store (the demo's resource). */
  readonly embedded?: EmbeddedDriver;
}

export interface BackendOpenOptions {
  /** PostgreSQL: the schema for leasehold's tables (`?schema=` in the URL also sets it). */
  schema?: string;
}

export interface PreflightCheck {
  check: string;
  status: 'ok' | 'warn' | 'fail' | 'skip';
  detail: string;
  [extra: string]: unknown;
}

export interface BackendPreflight {
  checks: PreflightCheck[];
  /** False when the store must not be opened; `reason` says why, for the skipped 'store' check. */
  open: boolean;
  reason?: string;
}

export interface EmbeddedDriver {
  /** Which driver would open a file here, without opening one. @throws {ConfigError} when none can, saying what to install. */
  probe(): { name: string; version: string; sqliteVersion: string };
  /** The driver's database constructor (`new (load())(path)`), loaded on first use. */
  load(): unknown;
  /** The local file `store` lives in, or `undefined` when it lives in memory or is not this backend's. */
  fileOf(store: LeaseStore): string | undefined;
}
