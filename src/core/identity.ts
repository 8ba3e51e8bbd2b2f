import { closeSync, openSync, readSync } from 'node:fs';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';

/**
 * Fresh bytes from the kernel. A userspace RNG pool (OpenSSL's, or Node's cached UUID buffer)
 * lives in the heap, so a memory snapshot restored twice hands both copies the same "random"
 * bytes. /dev/urandom is read through the kernel every time, and Linux reseeds it on a VM
 * generation change.
 *
 * The descriptor stays open: an open /dev/urandom holds no bytes of its own (each read is the
 * kernel's, also after a restore), and opening and closing it per read was two thirds of a
 * nonce's cost (about 11 us of a fenced write's or a one-lease renewal's client time). Nothing
 * is buffered here: a buffer of bytes read ahead would be copied by a snapshot like any heap.
 */
let urandom: number | undefined;

function kernelRandomBytes(n: number): Buffer {
  const buf = Buffer.alloc(n);
  // A descriptor kept from before may have been closed under us (EBADF): opened again, once.
  for (let kept = urandom !== undefined; ; kept = false) {
    try {
      urandom ??= openSync('/dev/urandom', 'r');
      let off = 0;
      while (off < n) {
        const got = readSync(urandom, buf, off, n - off, null);
        if (got <= 0) throw new Error('/dev/urandom returned no bytes');
        off += got;
      }
      return buf;
    } catch {
      if (urandom !== undefined) {
        try {
          closeSync(urandom);
        } catch {
          // already closed
        }
        urandom = undefined;
      }
      // Not Linux-like (or /dev is not mounted): the best we can do is the crypto RNG.
      if (!kept) return randomBytes(n);
    }
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
