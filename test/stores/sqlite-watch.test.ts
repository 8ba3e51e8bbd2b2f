/**
 * A follower on SQLite hears a release through a watch on the database's directory. A commit
 * writes its WAL frames (the change the watch sees), syncs them, and only then becomes visible
 * (through the shared-memory index, which no watch sees). A look in between found nothing, and
 * with no later change the release went unheard until the follower's expiry sleep: in CI a
 * waiting `leasehold run` took over at the 6s expiry instead of at once. Under an fsync-heavy
 * load, 18 of 51 looks made 5ms after a commit's change missed it (and the last commit was
 * never seen).
 *
 * Here the look is made to miss every time: the watcher's own connection holds a read
 * snapshot from before the release (what an unpublished commit looks like to it) until after
 * the look, then lets go without changing any file.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SqliteStore } from '../../src/backends/sqlite/store.js';

const dir = mkdtempSync(join(tmpdir(), 'lh-sqlite-watch-'));
after(() => rmSync(dir, { recursive: true, force: true }));

void describe('SQLite watchFreed', () => {
  void it('hears a release whose commit was not yet visible when the change was seen', async () => {
    const path = join(dir, 'leases.db');
    const holder = new SqliteStore({ path });
    const follower = new SqliteStore({ path });
    try {
      const [got] = await holder.claim([{ name: 'job', holder: 'h', ttlMs: 60_000, expect: null, nextNonce: 'n1' }]);
      assert.equal(got?.outcome, 'acquired');
      const heard: string[] = [];
      const stop = await follower.watchFreed!((name) => heard.push(name));
      try {
        // A read snapshot on the follower's connection, taken before the release.
        const db = follower.database;
        db.exec('BEGIN');
        db.prepare('SELECT count(*) FROM sqlite_master').get();
        assert.equal(await holder.release({ name: 'job', holder: 'h', expect: ['n1'] }), true);
        await sleep(100); // the watch fired and its look ran inside the old snapshot
        assert.deepEqual(heard, [], 'the look saw the release through an old snapshot: this test proves nothing');
        db.exec('COMMIT'); // ends the snapshot; no file changes
        const until = performance.now() + 3000;
        while (heard.length === 0 && performance.now() < until) await sleep(20);
        assert.deepEqual(heard, ['job'], 'the release was never heard: no look after the one that missed it');
      } finally {
        await stop();
      }
    } finally {
      await follower.close();
      await holder.close();
    }
  });
});
