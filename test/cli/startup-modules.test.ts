import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { Sandbox } from './helpers.js';
import { TEST_PG_URL } from '../helpers/stores.js';

// Start-up cost is mostly what gets loaded (bench/startup.ts measures it): `leasehold run` on a
// store loads that store's driver and no other, and node:tls only when the URL names TLS files.
const sb = new Sandbox('startup-modules');
after(() => sb.cleanup());
const bin = fileURLToPath(new URL('../../../bin/leasehold.js', import.meta.url));

/** Runs the CLI with a preload that writes, at exit, the builtins and CommonJS files it loaded. */
function loaded(args: string[]): { builtins: string[]; files: string[]; code: number | null; stderr: string } {
  const out = sb.path(`loaded-${Math.random().toString(36).slice(2)}.json`);
  const preload = sb.path('preload.mjs');
  writeFileSync(
    preload,
    `import { createRequire } from 'node:module';
     import { writeFileSync } from 'node:fs';
     const require = createRequire(import.meta.url);
     process.on('exit', () => writeFileSync(process.env.LH_LOADED_OUT, JSON.stringify({
       builtins: process.moduleLoadList.filter((m) => m.startsWith('NativeModule ')).map((m) => m.slice(13)),
       files: Object.keys(require.cache),
     })));`,
  );
  const r = spawnSync(process.execPath, ['--import', preload, bin, ...args], { env: { ...process.env, LH_LOADED_OUT: out }, encoding: 'utf8', timeout: 60_000 });
  const seen = JSON.parse(readFileSync(out, 'utf8')) as { builtins: string[]; files: string[] };
  return { ...seen, code: r.status, stderr: r.stderr };
}

const drivers = ['pg', 'ioredis', 'redis', '@redis/client', 'etcd3', '@grpc/grpc-js'];
const driversIn = (files: string[]): string[] => drivers.filter((d) => files.some((f) => f.includes(`/node_modules/${d}/`)));

void describe('leasehold run loads only what its store needs', () => {
  void it('on SQLite: no network driver and no node:tls', () => {
    const r = loaded(['run', '--store', `sqlite:${sb.path('s.db')}`, '--name', 'startup', '--quiet', '--', 'true']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(driversIn(r.files), []);
    assert.ok(!r.builtins.includes('tls'), 'node:tls was loaded for a store URL with no TLS files');
  });

  void it('on PostgreSQL: pg and nothing of Redis or etcd', () => {
    const url = TEST_PG_URL;
    // `status` on a schema nobody migrated: it connects (pg is loaded) and answers 0 or 3.
    const r = loaded(['status', '--store', `${url}${url.includes('?') ? '&' : '?'}schema=lh_startup_modules`]);
    assert.ok(r.code === 0 || r.code === 3, r.stderr);
    assert.deepEqual(driversIn(r.files), ['pg']);
  });
});
