import type Database from 'better-sqlite3';
import { embeddedDriver } from '../backends/index.js';
import { createSqliteFenceTable } from '../fence/index.js';
import { DEMO_TABLE, DEMO_TABLE_DDL, type WriteRow } from './protocol.js';

/**
 * The demo's protected resource: a table in a SQLite file, with leasehold's fence table beside
 * it. Each process opens its own connection, as separate services would. With the embedded
 * store it is the store's own file; with any other store it is a file of its own, because the
 * fence lives with the resource, not with the lease.
 */
export function openResource(path: string): Database.Database {
  // Loaded when used, not imported: better-sqlite3 is optional, and a missing one gets one line.
  const db = new (embeddedDriver().load() as unknown as typeof Database)(path);
  db.pragma('journal_mode = WAL');
  // Three writers and a reader share the file; waiting beats failing a unit of work.
  db.pragma('busy_timeout = 5000');
  db.exec(DEMO_TABLE_DDL);
  createSqliteFenceTable(db);
  return db;
}

export function readWrites(db: Database.Database, run: string): WriteRow[] {
  const rows = db
    .prepare(`SELECT id, worker, token, seq, at FROM ${DEMO_TABLE} WHERE run = ? ORDER BY id`)
    .safeIntegers(true)
    .all(run) as { id: bigint; worker: string; token: bigint; seq: bigint; at: bigint }[];
  return rows.map((r) => ({ id: Number(r.id), worker: r.worker, token: r.token, seq: Number(r.seq), at: Number(r.at) }));
}
