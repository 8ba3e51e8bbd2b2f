/**
 * The embedded store's file holds the token counters: whoever can replace it can reset them.
 * Under umask 000 the directory used to be created 0777 and the file 0644 (-wal, -shm alike).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

const STORE_MODULE = new URL('../../src/backends/sqlite/store.js', import.meta.url).href;
const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'lh-sqlite-files-'));
  dirs.push(d);
  return d;
}

/**
 * In a process whose umask is 000 (set by the shell, as a user's would be): opens a store at
 * `path`, takes a lease so the -wal and -shm files exist, and reports the mode of each path
 * in `report` while the store is still open.
 */
function underUmask000(path: string, report: string[]): { umask: string; modes: Record<string, string> } {
  const script = `
    import { statSync } from 'node:fs';
    const { SqliteStore } = await import(${JSON.stringify(STORE_MODULE)});
    const store = new SqliteStore({ path: ${JSON.stringify(path)} });
    await store.claim([{ name: 'job', holder: 'h', ttlMs: 5000, expect: null, nextNonce: 'n' }]);
    const modes = {};
    for (const p of ${JSON.stringify(report)}) modes[p] = (statSync(p).mode & 0o7777).toString(8).padStart(4, '0');
    await store.close();
    process.stdout.write(JSON.stringify({ umask: process.umask().toString(8), modes }));
  `;
  const r = spawnSync('sh', ['-c', 'umask 000 && exec "$0" --input-type=module -e "$1"', process.execPath, script], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as { umask: string; modes: Record<string, string> };
}

void describe('SQLite store files', () => {
  void it('under umask 000, the directories it creates are 0700 and the database, -wal and -shm are 0600', () => {
    const base = tempDir();
    const state = join(base, 'state');
    const dir = join(state, 'leasehold');
    const db = join(dir, 'leasehold.db');
    const r = underUmask000(db, [state, dir, db, `${db}-wal`, `${db}-shm`]);
    assert.equal(r.umask, '0', 'the store really ran under umask 000');
    assert.deepEqual(r.modes, {
      [state]: '0700',
      [dir]: '0700',
      [db]: '0600',
      [`${db}-wal`]: '0600',
      [`${db}-shm`]: '0600',
    });
  });

  void it('a directory that already exists keeps its mode (a shared one may be deliberate; doctor reports it)', () => {
    const base = tempDir();
    const dir = join(base, 'shared');
    mkdirSync(dir);
    chmodSync(dir, 0o775);
    const db = join(dir, 'leases.db');
    const r = underUmask000(db, [dir, db]);
    assert.deepEqual(r.modes, { [dir]: '0775', [db]: '0600' });
    assert.equal(statSync(dir).mode & 0o777, 0o775);
  });
});
