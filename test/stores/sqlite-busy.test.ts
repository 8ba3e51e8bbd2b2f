/**
 * SQLite's write lock held by another process must not block this process's event loop.
 * better-sqlite3 is synchronous: with SQLite's own busy wait, a claim on a file whose write lock
 * another process holds (a long fenced write, say) froze every timer here for up to the busy
 * timeout, and a healthy lease on another store missed its local deadline and stood down.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { createSqliteFenceTable, fencedWriteSync } from '../../src/backends/sqlite/fence.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import type { LeaseLostError } from '../../src/core/errors.js';

// The driver leasehold picks on this Node (node:sqlite on 22/24, better-sqlite3 on 20).
const DRIVER = new URL('../../src/backends/sqlite/driver.js', import.meta.url).href;
const dirs: string[] = [];
const children = new Set<ChildProcess>();

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'lh-sqlite-busy-'));
  dirs.push(d);
  return d;
}

after(() => {
  for (const c of children) c.kill('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/**
 * Another process that takes the file's write lock (BEGIN IMMEDIATE) and holds it for `holdMs`
 * without yielding, as a long synchronous fenced write would. Resolves once the lock is held;
 * `released` resolves when it has committed and exited.
 */
async function holdWriteLock(path: string, holdMs: number): Promise<{ released: Promise<void> }> {
  const child = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `const Database = (await import(${JSON.stringify(DRIVER)})).loadSqliteDriver();
       const db = new Database(${JSON.stringify(path)});
       db.pragma('busy_timeout = 10000');
       db.exec('BEGIN IMMEDIATE');
       process.stdout.write('locked\\n', () => {
         Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ${holdMs});
         db.exec('COMMIT');
         db.close();
       });`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  children.add(child);
  const released = new Promise<void>((resolve, reject) => {
    child.on('exit', (code) => {
      children.delete(child);
      if (code === 0) resolve();
      else reject(new Error(`the lock holder exited with ${code}`));
    });
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      if (d.includes('locked')) resolve();
    });
    released.catch(reject);
  });
  return { released };
}

/** The longest gap between ticks of a 5ms interval: how long the event loop was blocked. */
function stallProbe(): { stop(): number } {
  let last = performance.now();
  let worst = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last);
    last = now;
  }, 5);
  return {
    stop() {
      clearInterval(timer);
      return Math.round(worst);
    },
  };
}

void describe('SQLite: another process holding the write lock', () => {
  void it('a healthy leader keeps its term while another process holds the write lock for longer than the busy timeout', async (t) => {
    const dir = tempDir();
    // Lease "a" lives in the file another process locks; lease "b" in a healthy file of its own,
    // renewed by the same process. A blocked event loop costs "b" its term (its deadline timer
    // fires late, which is what a paused process looks like); an asynchronous wait does not.
    const contended = new SqliteStore({ path: join(dir, 'contended.db') });
    const healthy = new SqliteStore({ path: join(dir, 'healthy.db') });
    const lhA = new Leasehold({ store: contended });
    const lhB = new Leasehold({ store: healthy });
    try {
      const a = lhA.lease('a', { ttl: 6000, renewInterval: 1000 });
      const b = lhB.lease('b', { ttl: 1500 });
      const lost: string[] = [];
      let jeopardyA = 0;
      a.on('lost', (_term, e: LeaseLostError) => lost.push(`a: ${e.message}`));
      b.on('lost', (_term, e: LeaseLostError) => lost.push(`b: ${e.message}`));
      a.on('jeopardy', () => jeopardyA++);
      const termA = await a.acquire();
      const termB = await b.acquire();

      const probe = stallProbe();
      // 2.5s: longer than the old 2s busy timeout, and more than two of "a"'s renew intervals,
      // so a renewal of "a" runs into the lock with at least 1.5s of it left; far shorter than
      // "a"'s local deadline (6s - 600ms margin after its last renewal), so "a" can ride it out.
      const lock = await holdWriteLock(join(dir, 'contended.db'), 2500);
      await lock.released;
      // Wait for the next renewal of "a" (or its loss): the engine's own retry, not ours.
      const renewedAfter = await new Promise<boolean>((resolve) => {
        a.once('renewed', () => resolve(true));
        a.once('lost', () => resolve(false));
      });
      const worstStall = probe.stop();
      t.diagnostic(`longest event-loop stall while the lock was held: ${worstStall}ms; "a" entered jeopardy ${jeopardyA} time(s)`);

      assert.deepEqual(lost, [], 'no term was lost');
      assert.equal(termA.signal.aborted, false);
      assert.equal(termB.signal.aborted, false);
      assert.ok(renewedAfter, '"a" renewed once the lock was released');
      assert.ok(jeopardyA >= 1, 'a renewal of "a" ran into the lock (jeopardy: its outcome was unknown)');
      assert.equal(a.currentTerm?.token, termA.token, '"a" kept its token');
      assert.equal(b.currentTerm?.token, termB.token, '"b" kept its token');
      await a.release();
      await b.release();
    } finally {
      await lhA.close();
      await lhB.close();
      await contended.close();
      await healthy.close();
    }
  });

  void it('a claim waits for the lock on timers: other callbacks run while it waits, and it lands once the lock is released', async () => {
    const dir = tempDir();
    const store = new SqliteStore({ path: join(dir, 'l.db'), busyTimeoutMs: 10_000 });
    try {
      const lock = await holdWriteLock(join(dir, 'l.db'), 400);
      let ticks = 0;
      const timer = setInterval(() => ticks++, 5);
      const claim = store.claim([{ name: 'job', holder: 'h1', ttlMs: 5000, expect: null, nextNonce: 'n1' }]);
      let settled = false;
      void claim.finally(() => (settled = true));
      // With SQLite's busy wait the claim ran to its end inside the call above: nothing else
      // could run before it settled.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const ticksWhileWaiting = ticks;
      const settledEarly = settled;
      const [r] = await claim;
      clearInterval(timer);
      await lock.released;
      assert.equal(settledEarly, false, 'the claim was still waiting for the lock');
      assert.ok(ticksWhileWaiting > 0, 'timers fired while the claim waited');
      assert.equal(r?.outcome, 'acquired');
      assert.equal(r?.token, 1n);
    } finally {
      await store.close();
    }
  });

  void it('a claim that cannot get the lock within its budget is a retryable StoreUnavailableError, and changes nothing', async () => {
    const dir = tempDir();
    const store = new SqliteStore({ path: join(dir, 'l.db'), busyTimeoutMs: 150 });
    try {
      const lock = await holdWriteLock(join(dir, 'l.db'), 1500);
      await assert.rejects(store.claim([{ name: 'job', holder: 'h1', ttlMs: 5000, expect: null, nextNonce: 'n1' }]), (e: unknown) => {
        assert.ok(e instanceof StoreUnavailableError, String(e));
        assert.equal(e.retryable, true);
        assert.match(e.message, /locked by another process/);
        return true;
      });
      // The caller's signal ends the wait too (the engine aborts a renewal after one interval).
      const controller = new AbortController();
      const pending = store.claim([{ name: 'job', holder: 'h1', ttlMs: 5000, expect: null, nextNonce: 'n2' }], { signal: controller.signal });
      setTimeout(() => controller.abort(), 20);
      await assert.rejects(pending, StoreUnavailableError);
      await lock.released;
      assert.deepEqual(await store.list(), [], 'neither claim wrote anything');
    } finally {
      await store.close();
    }
  });

  void it("a synchronous fenced write on the store's own connection still waits for a briefly held lock", async () => {
    const dir = tempDir();
    const store = new SqliteStore({ path: join(dir, 'l.db') });
    try {
      createSqliteFenceTable(store.database);
      const lock = await holdWriteLock(join(dir, 'l.db'), 300);
      // Synchronous by contract: it blocks for the connection's busy timeout (2s), as before.
      const wrote = fencedWriteSync(store.database, { resource: 'r', token: 1n }, () => 'written');
      await lock.released;
      assert.equal(wrote, 'written');
    } finally {
      await store.close();
    }
  });
});
