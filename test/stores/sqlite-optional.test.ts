/**
 * better-sqlite3 is an optional dependency (a native build): a PostgreSQL, Redis or etcd user
 * installs leasehold with `--omit=optional` and never compiles it. Proved on a copy of the
 * built package in a temp dir whose node_modules has no better-sqlite3 at all (nothing up the
 * tree provides one either), and on one whose better-sqlite3 installed but failed to build.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { dropSchema, freshSchema, pgUrl } from '../cli/helpers.js';
import { selectedStores } from '../helpers/stores.js';

/** dist/test/stores/x.js -> the repository root. */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const LINE = /^leasehold(?: demo: cannot open the store)?: the SQLite store needs the optional package better-sqlite3, which is not installed or failed to build: run `npm install better-sqlite3`, or use another store/;
const withPostgres = selectedStores().includes('postgres');

let tmp: string;
const schema = freshSchema();

/** `node_modules/leasehold` as npm would install it from the packed tarball (`files`: dist/src, bin). */
function installCopy(app: string, driver: 'absent' | 'unbuilt'): void {
  const pkg = join(app, 'node_modules', 'leasehold');
  mkdirSync(pkg, { recursive: true });
  cpSync(join(ROOT, 'dist', 'src'), join(pkg, 'dist', 'src'), { recursive: true });
  cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  // A peer the user installed; its own dependencies resolve from its real path.
  symlinkSync(join(ROOT, 'node_modules', 'pg'), join(app, 'node_modules', 'pg'), 'dir');
  if (driver === 'unbuilt') {
    // The JavaScript of better-sqlite3 and its loader, without the compiled addon: what a
    // failed node-gyp build leaves behind.
    const d = join(app, 'node_modules', 'better-sqlite3');
    cpSync(join(ROOT, 'node_modules', 'better-sqlite3', 'package.json'), join(d, 'package.json'));
    cpSync(join(ROOT, 'node_modules', 'better-sqlite3', 'lib'), join(d, 'lib'), { recursive: true });
    for (const dep of ['bindings', 'file-uri-to-path']) {
      cpSync(join(ROOT, 'node_modules', dep), join(app, 'node_modules', dep), { recursive: true });
    }
  }
}

function env(app: string): NodeJS.ProcessEnv {
  const e: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LEASEHOLD_') && k !== 'NODE_PATH' && k !== 'NODE_OPTIONS') e[k] = v;
  e['XDG_STATE_HOME'] = join(app, 'state');
  // better-sqlite3's absence is what this file proves; on Node 22.13+ the default driver is
  // node:sqlite, which needs no package (test/stores/sqlite-driver-node.test.ts).
  e['LEASEHOLD_SQLITE_DRIVER'] = 'better-sqlite3';
  return e;
}

function cli(app: string, args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [join(app, 'node_modules', 'leasehold', 'bin', 'leasehold.js'), ...args], {
    cwd: app,
    env: env(app),
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function assertTheLine(r: { code: number | null; stderr: string }, what: string): void {
  assert.equal(r.code, 2, `${what}: exit ${r.code}; stderr: ${r.stderr}`);
  const lines = r.stderr.split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 1, `${what}: one line on stderr, got:\n${r.stderr}`);
  assert.match(lines[0]!, LINE, what);
}

/** Runs `code` as an ES module inside `app`, where `import 'leasehold'` finds the copy. */
function script(app: string, code: string): Record<string, unknown> {
  writeFileSync(join(app, 'check.mjs'), code);
  const r = spawnSync(process.execPath, [join(app, 'check.mjs')], { cwd: app, env: env(app), encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

const LIBRARY_CHECK = (pg: string | undefined, sqlitePath: string): string => `
  import { ConfigError, SqliteStore, openStore } from 'leasehold';
  import { idempotencyKey } from 'leasehold/fence';
  const out = { fence: idempotencyKey('job', 1n) };
  let resolved = true;
  try { (await import('node:module')).createRequire(import.meta.url).resolve('better-sqlite3'); } catch { resolved = false; }
  out.driverResolves = resolved;
  const pg = ${JSON.stringify(pg ?? null)};
  if (pg !== null) {
    const store = await openStore(pg);
    await store.migrate();
    const [r] = await store.claim([{ name: 'job', holder: 'h', ttlMs: 5000, expect: null, nextNonce: 'n' }]);
    out.postgres = r.outcome + ' ' + r.token;
    await store.close();
  }
  const path = ${JSON.stringify(sqlitePath)};
  for (const [how, open] of [['openStore', () => openStore('sqlite:' + path)], ['new SqliteStore', async () => new SqliteStore({ path })]]) {
    try {
      await open();
      out[how] = 'opened';
    } catch (e) {
      out[how] = { configError: e instanceof ConfigError, code: e.code, message: e.message, cause: e.cause !== undefined };
    }
  }
  process.stdout.write(JSON.stringify(out));
`;

before(() => {
  tmp = mkdtempSync(join(tmpdir(), 'lh-sqlite-optional-'));
});
after(async () => {
  rmSync(tmp, { recursive: true, force: true });
  if (withPostgres) await dropSchema(schema);
});

void describe('installed without better-sqlite3', () => {
  void it('package.json lists better-sqlite3 as an optional dependency, not a required one', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
    assert.equal(pkg['dependencies']?.['better-sqlite3'], undefined);
    assert.ok(pkg['optionalDependencies']?.['better-sqlite3'] !== undefined);
  });

  for (const driver of ['absent', 'unbuilt'] as const) {
    void describe(driver === 'absent' ? 'not installed' : 'installed but its native build failed', () => {
      let app: string;
      before(() => {
        app = join(tmp, driver);
        installCopy(app, driver);
      });

      void it(`importing leasehold works${withPostgres ? ', a PostgreSQL store opens and claims' : ''}, and asking for SQLite is one ConfigError naming the package`, (t) => {
        if (!withPostgres) t.diagnostic('postgres not selected (LEASEHOLD_TEST_STORES): the PostgreSQL part is not run');
        const db = join(app, 'never', 'leases.db');
        const out = script(app, LIBRARY_CHECK(withPostgres ? pgUrl(schema) : undefined, db));
        assert.equal(out['driverResolves'], driver === 'unbuilt', 'the test tree is what it claims to be');
        assert.equal(out['fence'], 'leasehold:job:1');
        if (withPostgres) assert.match(String(out['postgres']), /^(acquired|busy) \d+$/);
        for (const how of ['openStore', 'new SqliteStore']) {
          const e = out[how] as { configError: boolean; code: string; message: string; cause: boolean };
          assert.equal(e.configError, true, `${how}: ${JSON.stringify(e)}`);
          assert.equal(e.code, 'CONFIG');
          assert.match(`leasehold: ${e.message}`, LINE);
          assert.ok(!e.message.includes('\n'), 'one line');
          assert.equal(e.cause, true, 'the driver error is kept as the cause');
        }
        assert.equal(existsSync(join(app, 'never')), false, 'nothing was created for a store that cannot open');
      });

      void it('the CLI: a SQLite store (named or the default) exits 2 with that one line; demo too', () => {
        assertTheLine(cli(app, ['status', '--store', `sqlite:${join(app, 'x.db')}`]), 'status --store sqlite:');
        assertTheLine(cli(app, ['status']), 'status on the default store');
        assertTheLine(cli(app, ['run', '--name', 'job', '--', 'true']), 'run on the default store');
        assertTheLine(cli(app, ['demo']), 'demo');
        const doctor = cli(app, ['doctor', '--store', `sqlite:${join(app, 'x.db')}`]);
        assert.equal(doctor.code, 2, doctor.stdout + doctor.stderr);
        assert.match(doctor.stdout, /^fail\s+store\s+the SQLite store needs the optional package better-sqlite3/m);
      });

      void it('the CLI on PostgreSQL works', (t) => {
        if (!withPostgres) {
          t.skip('postgres not selected (LEASEHOLD_TEST_STORES)');
          return;
        }
        const url = pgUrl(schema);
        const m = cli(app, ['migrate', '--store', url]);
        assert.equal(m.code, 0, m.stderr);
        const s = cli(app, ['status', '--store', url]);
        assert.equal(s.code, 0, s.stderr);
        const d = cli(app, ['doctor', '--store', url]);
        assert.equal(d.code, 0, d.stdout + d.stderr);
      });
    });
  }
});
