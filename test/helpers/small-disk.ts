/**
 * A small filesystem a test can fill: a tmpfs of a given size on a fresh directory (root only),
 * for the "disk full" faults. Unmount it in `after`; `fill` writes until ENOSPC.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmdirSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface SmallDisk {
  dir: string;
  unmount(): void;
}

/** The mounted disk, or why there cannot be one here (a reason to print with the skip). */
export function smallDisk(size: string): SmallDisk | string {
  if (process.getuid?.() !== 0) return 'mounting a tmpfs needs root';
  const dir = mkdtempSync(join(tmpdir(), 'lh-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (e) {
    rmdirSync(dir);
    return `cannot mount a tmpfs: ${(e as Error).message}`;
  }
  return {
    dir,
    unmount() {
      // Lazy: a store a failed test left open must not keep the mount (and the test) alive.
      execFileSync('umount', ['-l', dir], { stdio: 'pipe' });
      rmdirSync(dir);
    },
  };
}

/** Writes `path` until the filesystem refuses (ENOSPC); returns the bytes written. */
export function fill(path: string): number {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(64 * 1024, 1);
  let n = 0;
  try {
    for (;;) n += writeSync(fd, chunk);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
  } finally {
    closeSync(fd);
  }
  return n;
}
