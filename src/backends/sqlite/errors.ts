/**
 * How SQLite's errors reach the engine: which are retryable (lock contention, I/O, a full disk, a
 * read-only file) and which say to change something, and the wait for a write lock.
 */
import { ConfigError, LeaseholdError, SchemaError, StoreError, StoreUnavailableError } from '../../core/errors.js';

export function isBusy(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

/** Sleeps `ms`, or rejects (retryable) when `signal` aborts first. */
export function pause(ms: number, signal: AbortSignal | undefined, lastError: unknown): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(new StoreUnavailableError('gave up waiting for the SQLite write lock (the call was aborted); this is retryable', { cause: lastError }));
    };
    // Not unref'd: a CLI command waiting for the lock must not exit as if it had finished.
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal?.aborted === true) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Lock contention, I/O errors, a full disk and a read-only file are retryable: each clears
 * without changing leasehold's configuration (the lock is released, space is freed, the
 * filesystem is remounted read-write or the file made writable again), and an I/O error leaves
 * the outcome unknown. A waiting contender outlasts them; a holder that meets one cannot renew
 * and stands down by its deadline, as in any outage. A path that cannot be opened at all, a
 * file that is not a database, and anything else (an SQL error, a corrupt file) are not.
 */
export function mapSqliteError(err: unknown): Error {
  if (err instanceof LeaseholdError) return err;
  const e = err as { code?: string; message?: string };
  const code = e.code ?? '';
  const msg = e.message ?? String(err);
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED') || code.startsWith('SQLITE_IOERR') || code === 'SQLITE_PROTOCOL') {
    return new StoreUnavailableError(`SQLite database is busy or unreadable (${msg}); this is retryable`, { cause: err });
  }
  if (/no such table|no such column/.test(msg)) {
    return new SchemaError(`leasehold's tables are missing or out of date (${msg}); run \`leasehold migrate --store sqlite:PATH\``, { cause: err });
  }
  if (code.startsWith('SQLITE_FULL')) {
    return new StoreUnavailableError(`SQLite database cannot grow (${msg}); this is retryable: free disk space on its filesystem`, { cause: err });
  }
  if (code.startsWith('SQLITE_READONLY')) {
    return new StoreUnavailableError(
      `SQLite database is read-only (${msg}); this is retryable: make the file, its directory and its -wal and -shm files writable ` +
        'by this user, or remount the filesystem read-write',
      { cause: err },
    );
  }
  if (code.startsWith('SQLITE_CANTOPEN') || code === 'SQLITE_NOTADB' || code === 'SQLITE_PERM' || code === 'SQLITE_AUTH') {
    return new ConfigError(`SQLite database cannot be used (${msg}); check the path and its permissions`, { cause: err });
  }
  return new StoreError(`SQLite refused leasehold's statement (${code === '' ? '' : `${code}: `}${msg}); this is not retried: report it if it persists`, {
    cause: err,
  });
}
