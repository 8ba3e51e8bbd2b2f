import { ConfigError } from '../../core/errors.js';

/**
 * `sqlite:PATH` (relative to the working directory, or absolute), `sqlite:///abs/path` or
 * `sqlite::memory:`. The rest is the file name as written: no %-decoding, and no parameters,
 * so `?` and `#` are refused rather than becoming part of a file name nobody meant.
 * @throws {ConfigError}
 */
export function parseSqliteUrl(url: string): string {
  const m = /^sqlite:(?:\/\/)?(.+)$/i.exec(url);
  if (m === null || m[1]!.trim() === '') {
    throw new ConfigError(`store URL ${JSON.stringify(url)} is not a SQLite URL; write sqlite:/path/to/leases.db`);
  }
  const path = m[1]!;
  if (/[?#]/.test(path)) {
    throw new ConfigError(
      `store URL ${JSON.stringify(url)} has a "${/[?#]/.exec(path)![0]}" in it; the SQLite store takes no URL parameters, only sqlite:/path/to/leases.db ` +
        '(for a file whose name has one, pass { path } to new SqliteStore)',
    );
  }
  // sqlite://host/file reads as a host and a path; sqlite:// followed by anything but "/" is
  // not the relative path it would silently have been.
  if (/^sqlite:\/\/[^/]/i.test(url)) {
    throw new ConfigError(`store URL ${JSON.stringify(url)} names a host; write sqlite:/absolute/path.db, sqlite:///absolute/path.db or sqlite:relative/path.db`);
  }
  return path;
}
