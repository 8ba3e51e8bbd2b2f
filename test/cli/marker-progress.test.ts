/**
 * `leasehold run --marker` and `--progress-timeout`: inherited leadership markers are revoked
 * on the way in, and a command that stops reporting progress loses the lease to a follower.
 */
import { after, afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { Sandbox, assertNoLeftovers } from './helpers.js';

void describe('leasehold run: markers and the progress watchdog (SQLite)', () => {
  const box = new Sandbox('marker');
  const store = `sqlite:${box.path('leases.db')}`;
  afterEach(() => assertNoLeftovers());
  after(() => box.cleanup());

  void it('deletes an inherited marker before contending, writes its own while leading, deletes it after', async () => {
    const marker = box.path('leader.json');
    // What a fork of a leading parent would find on its copied disk.
    writeFileSync(marker, JSON.stringify({ name: 'm', holder: 'parent-holder', token: '41' }));
    const r = await box.run(['run', '--name', 'm', '--store', store, '--ttl', '3s', '--marker', marker, '--', 'sh', '-c', `cat "${marker}"`]);
    assert.equal(r.code, 0, r.stderr);
    const seen = JSON.parse(r.stdout) as { name: string; holder: string; token: string };
    assert.equal(seen.name, 'm');
    assert.notEqual(seen.holder, 'parent-holder', 'the marker while leading is this process, not the inherited one');
    assert.notEqual(seen.token, '41');
    assert.equal(box.has('leader.json'), false, 'the marker is gone once the runner stood down');
    assert.match(r.stderr, /inherited leadership marker/);
  });

  void it('a command that stops touching LEASEHOLD_PROGRESS_FILE loses the lease to a follower', async () => {
    const stalled = box.start([
      'run', '--name', 'p', '--store', store, '--ttl', '1500ms', '--progress-timeout', '1s', '--',
      'sh', '-c', 'touch "$LEASEHOLD_PROGRESS_FILE"; sleep 0.3; touch "$LEASEHOLD_PROGRESS_FILE"; exec sleep 30',
    ]);
    await new Promise((r) => setTimeout(r, 300));
    const follower = box.start(['run', '--name', 'p', '--store', store, '--ttl', '1500ms', '--wait', '20s', '--', 'sh', '-c', 'echo "$LEASEHOLD_TOKEN"']);
    const s = await stalled.done;
    assert.equal(s.code, 76, `the stalled runner exits "lost": ${s.stderr}`);
    assert.match(s.stderr, /stalled/);
    const f = await follower.done;
    assert.equal(f.code, 0, f.stderr);
    assert.ok(Number(f.stdout.trim()) > 0, 'the follower ran with its own token');
  });
});
