/**
 * `leasehold demo --store postgres://...` where the demo's resource (always a SQLite file) has
 * no driver: on Node 20 without better-sqlite3. Proved on a copy of the built package in a temp
 * dir whose node_modules has no better-sqlite3 (as test/stores/sqlite-optional.test.ts does).
 * The demo must say what it needs in one line before it touches the named database: no
 * leasehold schema may be left behind in PostgreSQL.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PG_URL, ROOT, dropSchema, freshSchema, pgUrl } from './helpers.js';

let app: string;
const schema = freshSchema();

before(() => {
  app = mkdtempSync(join(tmpdir(), 'leasehold-demo-nodriver-'));
  const pkg = join(app, 'node_modules', 'leasehold');
  mkdirSync(pkg, { recursive: true });
  cpSync(join(ROOT, 'dist', 'src'), join(pkg, 'dist', 'src'), { recursive: true });
  cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  symlinkSync(join(ROOT, 'node_modules', 'pg'), join(app, 'node_modules', 'pg'), 'dir');
});

after(async () => {
  rmSync(app, { recursive: true, force: true });
  await dropSchema(schema);
});

async function schemaExists(name: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    const r = await c.query('SELECT 1 FROM information_schema.schemata WHERE schema_name = $1', [name]);
    return r.rowCount !== 0;
  } finally {
    await c.end();
  }
}

void describe('demo --store postgres:// without a SQLite driver for its resource', () => {
  void it('refuses in one line naming what it needs, before creating any leasehold table', async () => {
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LEASEHOLD_') && k !== 'NODE_PATH' && k !== 'NODE_OPTIONS') env[k] = v;
    env['XDG_STATE_HOME'] = join(app, 'state');
    // What Node 20 picks by default; forced so the test means the same on Node 22+.
    env['LEASEHOLD_SQLITE_DRIVER'] = 'better-sqlite3';
    const r = spawnSync(process.execPath, [join(app, 'node_modules', 'leasehold', 'bin', 'leasehold.js'), 'demo', '--store', pgUrl(schema)], {
      cwd: app,
      env,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.notEqual(r.status, 0, `demo cannot run its resource without a SQLite driver; stdout: ${r.stdout}`);
    const lines = r.stderr.split('\n').filter((l) => l !== '');
    assert.equal(lines.length, 1, `one line on stderr, got:\n${r.stderr}`);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
    assert.match(lines[0]!, /^leasehold demo: /);
    assert.match(lines[0]!, /resource/, 'says it is the resource, not the store, that needs SQLite');
    assert.match(lines[0]!, /better-sqlite3/);
    assert.doesNotMatch(lines[0]!, /use another store/, '--store was given: another store would not help');
    assert.equal(await schemaExists(schema), false, "demo created leasehold's schema in the named database before refusing");
  });
});
