/**
 * `npm run bench` checks every selected store before the first figure and names a missing one
 * in one line, exit 1, no stack: a closed loopback port, a malformed URL. `--stores` narrows
 * what is checked. Only the preflight runs here (each case fails before any figure), so the
 * machine is not loaded.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const runJs = fileURLToPath(new URL('../../bench/run.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'lh-bench-preflight-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function bench(args: string[], env: Record<string, string>): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [runJs, '--smoke', '--json', join(dir, 'out.json'), ...args], {
    encoding: 'utf8',
    env: { ...process.env, LEASEHOLD_BENCH_PORT_BASE: '26070', ...env },
    timeout: 60_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function assertRefused(r: { code: number | null; stdout: string; stderr: string }, pattern: RegExp): void {
  assert.equal(r.code, 1, `exit ${r.code}; stderr: ${r.stderr}`);
  const lines = r.stderr.split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 1, `one line on stderr, got:\n${r.stderr}`);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  assert.match(lines[0]!, /^bench: /);
  assert.match(lines[0]!, pattern);
  assert.doesNotMatch(r.stdout, /renewal:|handover:|failover:/, 'no figure ran before the refusal');
}

void describe('bench preflight', () => {
  void it('a store on a closed loopback port is named in one line before any figure, with how to leave it out', () => {
    const r = bench(['--stores', 'sqlite,redis'], { LEASEHOLD_TEST_REDIS_URL: 'redis://127.0.0.1:1/0' });
    assertRefused(r, /the redis store at redis:\/\/127\.0\.0\.1:1\/0 is not usable: .*LEASEHOLD_TEST_REDIS_URL.*--stores sqlite/);
  });

  void it('a malformed LEASEHOLD_TEST_ETCD_URL is refused before the PostgreSQL, SQLite and Redis figures', () => {
    const r = bench(['--stores', 'postgres,sqlite,redis,etcd'], { LEASEHOLD_TEST_ETCD_URL: 'etcd:/nohost' });
    assertRefused(r, /the etcd store .* is not usable: .*--stores postgres,sqlite,redis/);
  });

  void it('a MySQL store on a closed loopback port is named with LEASEHOLD_TEST_MYSQL_URL and how to leave it out', () => {
    const r = bench(['--stores', 'sqlite,mysql'], { LEASEHOLD_TEST_MYSQL_URL: 'mysql://root@127.0.0.1:1/test' });
    assertRefused(r, /the mysql store at mysql:\/\/root@127\.0\.0\.1:1\/test is not usable: .*LEASEHOLD_TEST_MYSQL_URL.*--stores sqlite/);
  });

  void it('--stores narrows the check: a broken store not selected is not looked at', () => {
    const p = bench(['--stores', 'postgres'], { LEASEHOLD_TEST_PG_URL: 'postgres://postgres@127.0.0.1:1/test', LEASEHOLD_TEST_REDIS_URL: 'redis://127.0.0.1:1/0' });
    assertRefused(p, /the postgres store at postgres:\/\/postgres@127\.0\.0\.1:1\/test is not usable/);
    assert.doesNotMatch(p.stderr, /redis/);
  });
});
