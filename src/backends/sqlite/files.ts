import { chmodSync, closeSync, constants, existsSync, fchmodSync, mkdirSync, openSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { loadSqliteDriver } from './driver.js';
import type { SqliteDatabaseLike } from './store.js';

/**
 * The store file holds the token counters. Anyone who can replace or rewrite it can reset them
 * and hand out a token a fenced resource has already accepted, so the directory is created
 * 0700 and the file 0600 whatever the umask. SQLite gives the -wal and -shm files the mode of
 * the database file, so creating the file ourselves (before SQLite does, with its 0644 & ~umask)
 * covers them too. Existing files and directories are left alone: a group-shared store may be
 * deliberate, and `leasehold doctor` reports it.
 */
export function createPrivately(path: string): void {
  const missing: string[] = [];
  for (let dir = dirname(path); !existsSync(dir); dir = dirname(dir)) {
    missing.unshift(dir);
    if (dirname(dir) === dir) break;
  }
  for (const dir of missing) {
    try {
      mkdirSync(dir, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      continue; // another process made it first: its mode is its creator's business
    }
    chmodSync(dir, 0o700);
  }
  let fd: number;
  try {
    fd = openSync(path, constants.O_CREAT | constants.O_EXCL | constants.O_WRONLY, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return;
    throw err;
  }
  try {
    fchmodSync(fd, 0o600);
  } finally {
    closeSync(fd);
  }
}

interface StoreFileMode {
  path: string;
  kind: 'directory' | 'database' | 'wal' | 'shm';
  mode: number;
  /** Writable by the file's group or by every other user. */
  writableByOthers: boolean;
  /** The sticky bit, on a directory: others may add files but not replace ours. */
  sticky: boolean;
}

/** The modes of the store's directory, file, -wal and -shm (those that exist). */
export function storeFileModes(path: string): StoreFileMode[] {
  const entries: [string, StoreFileMode['kind']][] = [
    [dirname(path), 'directory'],
    [path, 'database'],
    [`${path}-wal`, 'wal'],
    [`${path}-shm`, 'shm'],
  ];
  const modes: StoreFileMode[] = [];
  for (const [p, kind] of entries) {
    let mode: number;
    try {
      mode = statSync(p).mode;
    } catch {
      continue;
    }
    modes.push({ path: p, kind, mode: mode & 0o7777, writableByOthers: (mode & 0o022) !== 0, sticky: (mode & 0o1000) !== 0 });
  }
  return modes;
}

/**
 * SQLite's `quick_check` on the file, through a read-only connection of its own so that a
 * damaged file is looked at, not written to (the store's open migrates, which writes). Returns
 * SQLite's findings: `['ok']` for a sound file. A page too damaged to read makes SQLite throw
 * SQLITE_CORRUPT or SQLITE_NOTADB; that is reported as a finding too.
 *
 * @throws {ConfigError} the SQLite driver does not load (see ./driver.ts).
 * @throws the driver's error when the file cannot be opened at all (missing, no permission).
 */
export function quickCheck(path: string): string[] {
  const Database = loadSqliteDriver();
  let db: SqliteDatabaseLike | undefined;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true, timeout: 1000 });
    const rows = db.pragma('quick_check') as { quick_check: string }[];
    return rows.map((r) => r.quick_check);
  } catch (err) {
    const code = (err as { code?: string }).code ?? '';
    if (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB') return [(err as Error).message];
    throw err;
  } finally {
    db?.close();
  }
}
