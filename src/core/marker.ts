import { randomBytes } from 'node:crypto';
import { closeSync, constants, fchmodSync, mkdirSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { ConfigError, errorMessage } from './errors.js';

/**
 * An optional on-disk "I am the leader" marker, for tools that want to see it (a shell prompt,
 * a sidecar). It is never read back by leasehold: a disk is copied by every fork and snapshot,
 * so a marker found at start is an inherited claim and is deleted before contending.
 *
 * The marker's directory may be shared with other users, so nothing here follows a link
 * someone else planted: the temp file is created exclusively under a random name (a planted
 * `leader.json.<pid>.tmp -> /etc/passwd` is never opened), rename() replaces a link at PATH
 * rather than writing through it, and rm() of a link removes the link. A directory anyone can
 * write to without the sticky bit is refused outright: there, another user could rename or
 * delete the marker (or a leasehold process's temp file) at will.
 */
export interface MarkerContent {
  name: string;
  holder: string;
  token: string;
  pid: number;
  writtenAt: string;
}

/**
 * Refuses a marker directory that is world-writable without the sticky bit (/tmp has it; a
 * `chmod 777` directory does not). Judged by the mode bits, not by access(2), so running as
 * root does not hide the problem. A directory that does not exist yet is fine: writeMarker
 * creates it, writable by this user only.
 * @throws {ConfigError}
 */
function checkMarkerDirectory(path: string): void {
  const dir = dirname(path);
  let mode: number;
  try {
    mode = statSync(dir).mode;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new ConfigError(`cannot inspect the directory ${dir} of the leadership marker: ${errorMessage(err)}; fix its permissions`, { cause: err });
  }
  if ((mode & 0o002) !== 0 && (mode & 0o1000) === 0) {
    throw new ConfigError(
      `the leadership marker directory ${dir} is writable by every user and has no sticky bit (mode ${(mode & 0o7777).toString(8)}), ` +
        `so anyone could replace or delete the marker; choose a directory only you can write to, or run chmod +t ${dir}`,
    );
  }
}

/**
 * Deletes a marker left on disk; true when one was there (an inherited claim).
 * @throws {ConfigError} when the directory is unsafe (see checkMarkerDirectory) or the marker cannot be deleted.
 */
export function revokeMarker(path: string): boolean {
  checkMarkerDirectory(path);
  try {
    rmSync(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw new ConfigError(`cannot delete the leadership marker ${path}: ${(err as Error).message}; fix its permissions`, { cause: err });
  }
}

/**
 * Writes the marker atomically (temp file + rename) so a reader never sees half of it.
 * @throws {ConfigError} when the directory is unsafe; the caller logs it and leads on without a marker.
 */
export function writeMarker(path: string, content: MarkerContent): void {
  // Never world-writable, even under umask 0, or the check below would refuse our own directory.
  mkdirSync(dirname(path), { recursive: true, mode: 0o755 });
  checkMarkerDirectory(path);
  // A name nobody can guess, opened only if it does not exist and is not a link: a file or a
  // link planted in its place makes the open fail instead of redirecting the write.
  const tmp = join(dirname(path), `.${basename(path)}.${randomBytes(12).toString('hex')}.tmp`);
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    try {
      writeSync(fd, `${JSON.stringify(content)}\n`);
      // Readable by the tools it is for (they may run as another user); nothing in it is
      // secret, the token is in every child's environment. Made so only once fully written.
      fchmodSync(fd, 0o644);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}
