/**
 * Nonces and holder ids come from the kernel on every draw (src/core/identity.ts), through one
 * descriptor of /dev/urandom kept open. These check what keeping it open must not cost: a
 * descriptor closed under the library is opened again, and no bytes are held between draws.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { newHolderId, newNonce, newNonces } from '../../src/core/identity.js';

/** The descriptors of this process that are open on /dev/urandom (Linux's /proc). */
function urandomFds(): number[] {
  const out: number[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`) === '/dev/urandom') out.push(Number(fd));
    } catch {
      // the directory's own descriptor, gone by now
    }
  }
  return out;
}

void test('one /dev/urandom descriptor serves every draw; nonces are 16 bytes, base64url, never repeated', () => {
  newNonce();
  const before = urandomFds();
  assert.equal(before.length, 1, `one descriptor kept open, found ${before.length}`);
  const seen = new Set<string>();
  for (let i = 0; i < 2000; i++) seen.add(newNonce());
  for (const n of newNonces(500)) seen.add(n);
  assert.equal(seen.size, 2500, 'a nonce repeated');
  for (const n of seen) assert.match(n, /^[A-Za-z0-9_-]{22}$/);
  assert.deepEqual(urandomFds(), before, 'draws opened or closed descriptors');
});

void test('a descriptor closed under the library is opened again, and draws go on from the kernel', () => {
  newNonce();
  const [fd] = urandomFds();
  assert.ok(fd !== undefined);
  closeSync(fd);
  assert.deepEqual(urandomFds(), []);
  const a = newNonce();
  const b = newHolderId('x');
  assert.match(a, /^[A-Za-z0-9_-]{22}$/);
  assert.match(b, /^x:[0-9a-f]{32}$/);
  assert.equal(urandomFds().length, 1, 'the kernel source was not opened again (fell back to the userspace RNG)');
});

/** Read system calls this process has made so far (Linux's /proc/self/io). */
function readSyscalls(): number {
  const line = /^syscr: (\d+)$/m.exec(readFileSync('/proc/self/io', 'utf8'));
  assert.ok(line !== null, '/proc/self/io has no syscr line');
  return Number(line[1]);
}

void test('every nonce is its own read of the kernel: nothing drawn ahead and buffered in the heap, where two restored clones would share it', () => {
  newNonce();
  const draws = 1000;
  const before = readSyscalls();
  for (let i = 0; i < draws; i++) newNonce();
  const reads = readSyscalls() - before;
  // Other reads of this process only add to the count; a buffer of even two nonces halves it.
  assert.ok(reads >= draws, `${draws} nonces took ${reads} read system calls`);
});
