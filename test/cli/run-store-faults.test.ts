/**
 * Transient store faults never end a waiting `leasehold run`: a SQLite database on a disk that
 * fills up while one runner holds the lease and another waits. The holder stands down (exit
 * 76: its renewals fail, so it cannot know it still leads); the waiter keeps waiting, says so
 * every few seconds, never leads while the store cannot take a write, and leads once space is
 * freed. The disk is a small tmpfs this test mounts (root only) and unmounts.
 */
import assert from 'node:assert/strict';
import { unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, afterEach, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, until } from './helpers.js';
import { selectedStores } from '../helpers/stores.js';
import { fill, smallDisk } from '../helpers/small-disk.js';

const sb = new Sandbox('run-faults');
const pids: number[] = [];
afterEach(() => assertNoLeftovers(pids.splice(0)));
after(() => sb.cleanup());

const disk = selectedStores().includes('sqlite') ? smallDisk('4m') : 'sqlite not selected';
after(() => {
  if (typeof disk !== 'string') disk.unmount();
});
if (typeof disk === 'string') console.log(`# run-store-faults skipped: ${disk}`);

void describe('leasehold run: a disk that fills up under SQLite', { skip: typeof disk === 'string' && disk }, () => {
  void it('the holder stands down (76); the waiter keeps waiting, says so every few seconds, and leads once space is freed', async () => {
    const { dir } = disk as { dir: string };
    const url = `sqlite:${join(dir, 'leases.db')}`;
    assert.equal((await sb.run(['migrate', '--store', url])).code, 0);
    const ttl = 2000;
    const holder = sb.start(['run', '--name', 'full', '--store', url, '--ttl', `${ttl}ms`, '--', 'sleep', '60']);
    pids.push(holder.pid);
    await until('the holder has the lease', () => /acquired token/.test(holder.stderr));
    const waiter = sb.start(['run', '--name', 'full', '--store', url, '--ttl', `${ttl}ms`, '--', 'sh', '-c', 'echo second-$LEASEHOLD_TOKEN']);
    pids.push(waiter.pid);
    await until('the waiter sees the holder', () => /waiting: held by/.test(waiter.stderr));

    const filler = join(dir, 'filler');
    assert.ok(fill(filler) > 0);
    try {
      // The holder's renewals cannot land: it stands down by its local deadline, within a TTL.
      const h = await holder.done;
      assert.equal(h.code, 76, h.stderr);
      // Then the waiter's claims need a write the disk refuses. It must outlast that, saying so
      // periodically (every 5s, the library's outage line), and never lead: 12s covers two lines.
      await until('the waiter reports the fault', () => /database or disk is full/.test(waiter.stderr), 5 * ttl);
      await sleep(12_000);
      assert.equal(waiter.proc.exitCode, null, `the waiter gave up on a full disk: ${waiter.stderr}`);
      assert.doesNotMatch(waiter.stderr, /acquired token/, 'led while the store could not take a write');
      const lines = waiter.stderr.split('\n').filter((l) => /disk is full/.test(l));
      assert.ok(lines.length >= 2 && lines.length <= 5, `expected one line every few seconds, got:\n${waiter.stderr}`);
    } finally {
      unlinkSync(filler);
    }
    // Space is back: the next claim (backed off to at most a TTL) leads.
    await until('the waiter leads and its command finishes', () => waiter.proc.exitCode !== null, 5 * ttl);
    const d = await waiter.done;
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, /second-\d+/);
  });
  void it('a run started while the disk is full waits (the open itself is refused), then runs once space is freed', async () => {
    const { dir } = disk as { dir: string };
    const url = `sqlite:${join(dir, 'late.db')}`;
    assert.equal((await sb.run(['migrate', '--store', url])).code, 0);
    const filler = join(dir, 'filler-late');
    assert.ok(fill(filler) > 0);
    let r;
    try {
      r = sb.start(['run', '--name', 'late', '--store', url, '--', 'sh', '-c', 'echo started-late']);
      pids.push(r.pid);
      const started = r;
      // Opening on a full disk is refused as an I/O error (the -wal and -shm files cannot be created).
      await until('the runner reports the fault', () => /disk is full|disk I\/O error/.test(started.stderr), 10_000);
      // Past the first retries (100ms doubling to 2s): it is still waiting, not exiting 3.
      await sleep(3000);
      assert.equal(r.proc.exitCode, null, `the runner gave up on a full disk: ${r.stderr}`);
    } finally {
      unlinkSync(filler);
    }
    // Retries are at most 2s apart once backed off: well within 10s.
    await until('the runner runs the command', () => r.proc.exitCode !== null, 10_000);
    const d = await r.done;
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, /started-late/);
    assert.match(d.stderr, /the store answers after/);
  });
});
