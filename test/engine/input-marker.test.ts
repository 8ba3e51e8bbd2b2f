/**
 * Leadership markers in a directory other users can write to: nothing another user planted is
 * followed, and a directory anyone can write to without the sticky bit is refused.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError } from '../../src/core/errors.js';
import { revokeMarker, writeMarker, type MarkerContent } from '../../src/core/marker.js';
import { makeTestStore } from '../helpers/stores.js';

const content: MarkerContent = { name: 'm', holder: 'h', token: '7', pid: process.pid, writtenAt: new Date(0).toISOString() };

void describe('leadership markers do not follow links someone else planted', () => {
  const root = mkdtempSync(join(tmpdir(), 'lh-marker-'));
  after(() => rmSync(root, { recursive: true, force: true }));
  let n = 0;
  const setup = (): { dir: string; marker: string; victim: string } => {
    const dir = join(root, `case${n++}`);
    mkdirSync(dir);
    const victim = join(dir, 'victim.conf');
    writeFileSync(victim, 'precious\n', { mode: 0o600 });
    const shared = join(dir, 'shared');
    mkdirSync(shared);
    return { dir, marker: join(shared, 'leader.json'), victim };
  };

  void it('a link planted at the temp name the writer used to pick (PATH.PID.tmp) is left alone', () => {
    const { marker, victim } = setup();
    const planted = `${marker}.${process.pid}.tmp`;
    symlinkSync(victim, planted);
    writeMarker(marker, content);
    assert.equal(readFileSync(victim, 'utf8'), 'precious\n', 'the link target was not overwritten');
    assert.equal(readlinkSync(planted), victim, 'the planted link is untouched');
    assert.ok(lstatSync(marker).isFile(), 'the marker is a file of its own, not the planted link renamed into place');
    assert.deepEqual(JSON.parse(readFileSync(marker, 'utf8')), content);
  });

  void it('a link planted at PATH itself is replaced by the marker, not written through', () => {
    const { marker, victim } = setup();
    symlinkSync(victim, marker);
    writeMarker(marker, content);
    assert.equal(readFileSync(victim, 'utf8'), 'precious\n');
    assert.ok(lstatSync(marker).isFile());
  });

  void it('revoking an inherited marker that is a link deletes the link, not its target', () => {
    const { marker, victim } = setup();
    symlinkSync(victim, marker);
    assert.equal(revokeMarker(marker), true);
    assert.throws(() => lstatSync(marker), { code: 'ENOENT' });
    assert.equal(readFileSync(victim, 'utf8'), 'precious\n');
  });

  void it('leaves no temp file behind, and the marker is readable by the tools it is for', () => {
    const { marker } = setup();
    writeMarker(marker, content);
    writeMarker(marker, { ...content, token: '8' });
    assert.deepEqual(readdirSync(join(marker, '..')), ['leader.json']);
    assert.equal(statSync(marker).mode & 0o777, 0o644);
  });
});

void describe('a marker directory anyone can write to needs the sticky bit', () => {
  const root = mkdtempSync(join(tmpdir(), 'lh-marker-dir-'));
  after(() => rmSync(root, { recursive: true, force: true }));

  void it('is refused with a ConfigError before contending, and by writeMarker', async () => {
    const open = join(root, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    const marker = join(open, 'leader.json');
    const sqlite = await makeTestStore('sqlite');
    const lh = new Leasehold({ store: sqlite.store });
    try {
      const unsafe = (e: unknown): boolean =>
        e instanceof ConfigError && e.code === 'CONFIG' && e.message.includes(open) && /writable by every user and has no sticky bit \(mode 777\)/.test(e.message) && /chmod \+t/.test(e.message);
      assert.throws(() => lh.lease('m', { marker }), unsafe);
      assert.throws(() => writeMarker(marker, content), unsafe);
      assert.throws(() => lstatSync(marker), { code: 'ENOENT' }, 'nothing was written');
    } finally {
      await lh.close();
      await sqlite.cleanup();
    }
  });

  void it('is accepted with the sticky bit (as /tmp has it)', () => {
    const sticky = join(root, 'sticky');
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    const marker = join(sticky, 'leader.json');
    writeMarker(marker, content);
    assert.equal(revokeMarker(marker), true);
  });
});
