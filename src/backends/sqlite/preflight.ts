import { resolve } from 'node:path';
import { ConfigError, errorMessage } from '../../core/errors.js';
import type { BackendPreflight, PreflightCheck } from '../descriptor.js';
import { SQLITE_DRIVER_ENV, resolveSqliteDriver } from './driver.js';
import { quickCheck, storeFileModes } from './files.js';
import { parseSqliteUrl } from './url.js';

/**
 * What `leasehold doctor` checks on a SQLite store before opening it: opening migrates, which
 * writes, so a damaged file is reported and left alone.
 */
export async function sqlitePreflight(url: string): Promise<BackendPreflight> {
  const checks: PreflightCheck[] = [sqliteDriverCheck()];
  const damaged = sqliteFileChecks(url, checks) === 'damaged';
  return damaged ? { checks, open: false, reason: 'the SQLite file failed its integrity check (opening it writes to it)' } : { checks, open: true };
}

/** SQLite only: which driver opens the file, and why that one (see backends/sqlite/driver.ts). */
function sqliteDriverCheck(): PreflightCheck {
  try {
    const d = resolveSqliteDriver();
    const why =
      d.chosenBy === 'env'
        ? `${SQLITE_DRIVER_ENV}=${d.name}`
        : d.name === 'node:sqlite'
          ? `built into Node ${d.version}, nothing to build`
          : `Node ${process.version} has no node:sqlite, 22.13+ does`;
    const pkg = d.name === 'better-sqlite3' && d.version !== '' ? ` ${d.version}` : '';
    return { check: 'sqlite-driver', status: 'ok', detail: `${d.name}${pkg} (SQLite ${d.sqliteVersion}; ${why})`, driver: d.name, sqliteVersion: d.sqliteVersion };
  } catch (e) {
    return { check: 'sqlite-driver', status: 'fail', detail: errorMessage(e) };
  }
}

/**
 * SQLite only, on the file itself before the store opens it (the open migrates, which writes):
 * its modes and SQLite's quick_check. Says 'damaged' when quick_check found damage, so the
 * caller does not open the store on it.
 */
function sqliteFileChecks(url: string, checks: PreflightCheck[]): 'damaged' | 'checked' {
  if (!/^sqlite:/i.test(url)) return 'checked';
  const path = parseSqliteUrl(url);
  if (path === ':memory:') return 'checked';
  const file = resolve(path);
  checks.push(sqliteFilesCheck(file));
  const integrity = sqliteIntegrityCheck(file);
  checks.push(integrity);
  return integrity.status === 'fail' && Array.isArray(integrity['findings']) ? 'damaged' : 'checked';
}

function sqliteFilesCheck(file: string): PreflightCheck {
  const modes = storeFileModes(file);
  const shown = modes.map((m) => ({ path: m.path, kind: m.kind, mode: m.mode.toString(8).padStart(4, '0') }));
  if (!modes.some((m) => m.kind === 'database')) {
    return { check: 'sqlite-files', status: 'ok', detail: `${file} does not exist yet; it will be created 0600 in a 0700 directory`, files: shown };
  }
  const open = modes.filter((m) => m.writableByOthers);
  if (open.length === 0) {
    return { check: 'sqlite-files', status: 'ok', detail: `${file} and its directory are writable by their owner only`, files: shown };
  }
  const list = open.map((m) => `${m.kind === 'directory' ? 'directory ' : ''}${m.path} (${m.mode.toString(8).padStart(4, '0')}${m.sticky ? ', sticky' : ''})`);
  const dir = open.find((m) => m.kind === 'directory');
  const fix = [dir === undefined ? undefined : `chmod 700 ${dir.path}`, open.some((m) => m.kind !== 'directory') ? `chmod 600 ${file}*` : undefined]
    .filter((x) => x !== undefined)
    .join(' and ');
  return {
    check: 'sqlite-files',
    status: 'warn',
    detail:
      `writable by group or others: ${list.join(', ')}; another local user could replace or rewrite the file and reset the tokens. ` +
      `Unless the group is shared on purpose, ${fix}${dir !== undefined ? ' (or move the store to a private directory)' : ''}`,
    files: shown,
  };
}

function sqliteIntegrityCheck(file: string): PreflightCheck {
  if (!storeFileModes(file).some((m) => m.kind === 'database')) {
    return { check: 'quick-check', status: 'skip', detail: 'no file yet' };
  }
  let findings: string[];
  try {
    findings = quickCheck(file);
  } catch (e) {
    // A missing driver or an unreadable file: the store's own open reports it, with its exit code.
    return { check: 'quick-check', status: e instanceof ConfigError ? 'skip' : 'fail', detail: errorMessage(e) };
  }
  if (findings.length === 1 && findings[0] === 'ok') return { check: 'quick-check', status: 'ok', detail: 'quick_check found no damage' };
  const shown = findings.slice(0, 3).map((f) => f.replace(/\s*\n\s*/g, ' ')).join('; ');
  return {
    check: 'quick-check',
    status: 'fail',
    detail:
      `quick_check: ${shown}${findings.length > 3 ? ` (and ${findings.length - 3} more)` : ''}. The file is damaged: stop the processes using it and ` +
      'restore it from a backup (a new empty file would restart tokens at 1, below what fenced resources have accepted)',
    findings,
  };
}
