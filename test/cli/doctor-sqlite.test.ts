/**
 * `leasehold doctor` on the embedded store: it reports a store file or directory that another
 * user could write, and runs SQLite's quick_check, which fails on a damaged file (a page of
 * garbage used to go unnoticed: the store answered, the schema read fine).
 */
import assert from 'node:assert/strict';
import { chmodSync, closeSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { Sandbox, assertNoLeftovers } from './helpers.js';

interface DoctorJson {
  exitCode: number;
  checks: { check: string; status: string; detail: string }[];
}

const sandboxes: Sandbox[] = [];
function sandbox(): Sandbox {
  const s = new Sandbox('doctor-sqlite');
  sandboxes.push(s);
  return s;
}
afterEach(() => assertNoLeftovers());
after(() => {
  for (const s of sandboxes) s.cleanup();
});

/** A real store file with some history: 20 leases taken and released. */
async function storeWithRows(path: string): Promise<void> {
  const store = new SqliteStore({ path });
  const lh = new Leasehold({ store });
  try {
    for (let i = 0; i < 20; i++) {
      const lease = lh.lease(`job-${i}`, { ttl: 5000 });
      await lease.acquire();
      await lease.release();
    }
  } finally {
    await lh.close();
    await store.close();
  }
}

function garbage(path: string, offset: number, length: number): void {
  const fd = openSync(path, 'r+');
  try {
    writeSync(fd, Buffer.alloc(length, 0xab), 0, length, offset);
  } finally {
    closeSync(fd);
  }
}

async function doctor(s: Sandbox, path: string): Promise<DoctorJson & { code: number | null }> {
  const r = await s.run(['doctor', '--json', '--store', `sqlite:${path}`]);
  assert.equal(r.stderr, '');
  return { ...(JSON.parse(r.stdout) as DoctorJson), code: r.code };
}

function check(report: DoctorJson, name: string): { status: string; detail: string } {
  const c = report.checks.find((x) => x.check === name);
  assert.ok(c, `doctor reported no "${name}" check: ${JSON.stringify(report.checks)}`);
  return c;
}

void describe('leasehold doctor: the SQLite file', () => {
  void it('a store leasehold created passes both checks', async () => {
    const s = sandbox();
    const path = s.path('private/leases.db');
    await storeWithRows(path);
    const r = await doctor(s, path);
    assert.equal(r.code, 0);
    assert.equal(check(r, 'sqlite-files').status, 'ok');
    assert.equal(check(r, 'quick-check').status, 'ok');
  });

  void it('warns about a store file writable by its group and a directory writable by everyone', async () => {
    const s = sandbox();
    const dir = s.path('open');
    const path = join(dir, 'leases.db');
    await storeWithRows(path);
    chmodSync(path, 0o664);
    let r = await doctor(s, path);
    assert.equal(r.code, 0, 'a warning is not a failure');
    assert.equal(check(r, 'sqlite-files').status, 'warn');
    assert.match(check(r, 'sqlite-files').detail, new RegExp(`${path} \\(0664\\).*reset the tokens.*chmod 600`));

    chmodSync(path, 0o600);
    chmodSync(dir, 0o777);
    r = await doctor(s, path);
    assert.equal(check(r, 'sqlite-files').status, 'warn');
    assert.match(check(r, 'sqlite-files').detail, new RegExp(`directory ${dir} \\(0777\\).*chmod 700 ${dir}`));
    chmodSync(dir, 0o700);
  });

  void it('fails (exit 1) on a file with garbage at offset 4096, without opening it as a store', async () => {
    const s = sandbox();
    const path = s.path('damaged/leases.db');
    await storeWithRows(path);
    garbage(path, 4096, 64);
    const r = await doctor(s, path);
    assert.equal(r.code, 1, JSON.stringify(r.checks));
    assert.equal(check(r, 'quick-check').status, 'fail');
    assert.match(check(r, 'quick-check').detail, /malformed|page|btree/i);
    assert.match(check(r, 'quick-check').detail, /restore it from a backup/);
    assert.equal(check(r, 'store').status, 'skip');
  });

  void it('fails (exit 1) on a damaged index page that the store itself never reads on open', async () => {
    const s = sandbox();
    const path = s.path('damaged/leases.db');
    await storeWithRows(path);
    // Page 4 (offset 12288) is the leases table's primary-key index: opening the store and
    // reading its schema version never touch it, so before quick_check doctor said "ok".
    garbage(path, 3 * 4096, 16);
    const r = await doctor(s, path);
    assert.equal(r.code, 1, JSON.stringify(r.checks));
    assert.equal(check(r, 'quick-check').status, 'fail');
  });
});
