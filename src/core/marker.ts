import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { ConfigError } from './errors.js';

/**
 * An optional on-disk "I am the leader" marker, for tools that want to see it (a shell prompt,
 * a sidecar). It is never read back by leasehold: a disk is copied by every fork and snapshot,
 * so a marker found at start is an inherited claim and is deleted before contending.
 */
export interface MarkerContent {
  name: string;
  holder: string;
  token: string;
  pid: number;
  writtenAt: string;
}

/** Deletes a marker left on disk; true when one was there (an inherited claim). */
export function revokeMarker(path: string): boolean {
  try {
    rmSync(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw new ConfigError(`cannot delete the leadership marker ${path}: ${(err as Error).message}; fix its permissions`, { cause: err });
  }
}

/** Writes the marker atomically (temp file + rename) so a reader never sees half of it. */
export function writeMarker(path: string, content: MarkerContent): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(content)}\n`, { mode: 0o644 });
  renameSync(tmp, path);
}
