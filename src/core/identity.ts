import { closeSync, openSync, readSync } from 'node:fs';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';

/**
 * Fresh bytes from the kernel. A userspace RNG pool (OpenSSL's, or Node's cached UUID buffer)
 * lives in the heap, so a memory snapshot restored twice hands both copies the same "random"
 * bytes. /dev/urandom is read through the kernel every time, and Linux reseeds it on a VM
 * generation change.
 */
function kernelRandomBytes(n: number): Buffer {
  const buf = Buffer.alloc(n);
  let fd: number | undefined;
  try {
    fd = openSync('/dev/urandom', 'r');
    let off = 0;
    while (off < n) off += readSync(fd, buf, off, n - off, null);
    return buf;
  } catch {
    // Not Linux-like (or /dev is not mounted): the best we can do is the crypto RNG.
    return randomBytes(n);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * A holder id for one process instance: a readable label (host, pid) and 128 kernel-random
 * bits. Never persisted, never read from disk: a hostname, machine-id or file baked into an
 * image is shared by every clone of that image, which turns contention into renewal.
 */
export function newHolderId(label?: string): string {
  const prefix = label ?? `${hostname()}:${process.pid}`;
  return `${prefix}:${kernelRandomBytes(16).toString('hex')}`;
}

/** A per-renewal value the store compare-and-swaps, so two clones of one term cannot both renew. */
export function newNonce(): string {
  return kernelRandomBytes(16).toString('base64url');
}

/** Many nonces from one kernel read (a process renewing 10,000 leases per tick). */
export function newNonces(count: number): string[] {
  const bytes = kernelRandomBytes(16 * count);
  const out: string[] = new Array<string>(count);
  // toString with bounds encodes the same 16 bytes without a Buffer view per nonce (a subarray
  // is an object: at 10,000 leases a tick, making them was a third of this function's time).
  for (let i = 0; i < count; i++) out[i] = bytes.toString('base64url', i * 16, i * 16 + 16);
  return out;
}
