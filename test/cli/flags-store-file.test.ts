/**
 * `--store-file` / LEASEHOLD_STORE_FILE: the store URL from a file, so a password stays out of
 * `ps`; and the warning when a password is on the command line after all.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { after, afterEach, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, assertOneLineError, dropSchema, freshSchema, pgUrl } from './helpers.js';

const sb = new Sandbox('store-file');
afterEach(() => assertNoLeftovers());
after(() => sb.cleanup());

const WARNING = 'leasehold: warning: the password in --store is visible to other users in ps; use --store-file or LEASEHOLD_STORE';

/** A lease named `name` in the SQLite store at `url`, taken and released by a real runner. */
async function seed(url: string, name: string): Promise<void> {
  const r = await sb.run(['run', '--name', name, '--store', url, '--ttl', '2s', '--quiet', '--', 'true']);
  assert.equal(r.code, 0, r.stderr);
}

async function leaseNames(args: string[], env: NodeJS.ProcessEnv = {}): Promise<string[]> {
  const r = await sb.run([...args, '--json'], env);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as Array<{ name: string }>).map((l) => l.name);
}

void describe('--store-file and LEASEHOLD_STORE_FILE on SQLite', () => {
  const url = `sqlite:${sb.path('from-file.db')}`;
  const file = sb.path('store-url');
  // Blank lines and spaces around the URL are not part of it.
  writeFileSync(file, `\n   \n  ${url}  \r\nignored second line\n`, { mode: 0o600 });

  void it('status, history and doctor read the store URL from the first non-empty line of the file', async () => {
    await seed(url, 'in-file');
    assert.deepEqual(await leaseNames(['status', '--store-file', file]), ['in-file']);
    const h = await sb.run(['history', 'in-file', '--store-file', file, '--json']);
    assert.equal(h.code, 0, h.stderr);
    assert.deepEqual((JSON.parse(h.stdout) as Array<{ event: string }>).map((e) => e.event), ['acquired', 'released']);
    const d = await sb.run(['doctor', '--store-file', file, '--json']);
    assert.equal(d.code, 0, d.stdout + d.stderr);
    assert.match((JSON.parse(d.stdout) as { store: string }).store, /from-file\.db/);
    assert.equal(d.stderr, '');
  });

  void it('LEASEHOLD_STORE_FILE does the same; --store and --store-file on the command line win over it', async () => {
    assert.deepEqual(await leaseNames(['status'], { LEASEHOLD_STORE_FILE: file }), ['in-file']);
    const other = `sqlite:${sb.path('other.db')}`;
    await seed(other, 'in-other');
    assert.deepEqual(await leaseNames(['status', '--store', other], { LEASEHOLD_STORE_FILE: file }), ['in-other']);
    const otherFile = sb.path('other-url');
    writeFileSync(otherFile, `${other}\n`);
    assert.deepEqual(await leaseNames(['status', '--store-file', otherFile], { LEASEHOLD_STORE: url }), ['in-other']);
  });

  void it('LEASEHOLD_STORE_FILE with LEASEHOLD_STORE: fine when they agree (a runner\'s child inherits both), exit 2 when not', async () => {
    assert.deepEqual(await leaseNames(['status'], { LEASEHOLD_STORE_FILE: file, LEASEHOLD_STORE: url }), ['in-file']);
    const r = await sb.run(['status'], { LEASEHOLD_STORE_FILE: file, LEASEHOLD_STORE: `sqlite:${sb.path('third.db')}` });
    assertOneLineError(r, 2, /LEASEHOLD_STORE and LEASEHOLD_STORE_FILE name different stores/);
  });

  void it('`leasehold run` reads LEASEHOLD_STORE_FILE too, and hands its command the URL', async () => {
    const r = await sb.run(['run', '--name', 'runner-env', '--ttl', '2s', '--quiet', '--', 'sh', '-c', 'echo "$LEASEHOLD_STORE"'], { LEASEHOLD_STORE_FILE: file });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), url);
  });

  void it('demo takes --store-file (checked up to its usage error, so no workers start)', async () => {
    const r = await sb.run(['demo', '--store-file', file, '--workers', '1']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--workers must be a whole number from 2/);
  });

  const bad: Array<[string, string[], RegExp, NodeJS.ProcessEnv?]> = [
    ['a missing file', ['status', '--store-file', sb.path('nope')], /--store-file ".*nope" does not exist; create it with the store URL/],
    ['a missing file named by LEASEHOLD_STORE_FILE', ['history'], /LEASEHOLD_STORE_FILE ".*nope" does not exist/, { LEASEHOLD_STORE_FILE: sb.path('nope') }],
    ['an empty file', ['status', '--store-file', sb.path('empty')], /--store-file ".*empty" is empty; put the store URL on its first line/],
    ['a file of blank lines', ['release', 'x', '--force', '--reason', 'r', '--store-file', sb.path('blank')], /is empty/],
    ['a directory', ['status', '--store-file', sb.path('a-dir')], /is a directory/],
    ['an empty --store-file', ['status', '--store-file', ''], /--store-file is empty/],
    ['both --store and --store-file', ['status', '--store', 'sqlite::memory:', '--store-file', sb.path('store-url')], /--store and --store-file contradict each other/],
    ['a file holding a bad URL', ['status', '--store-file', sb.path('bad-url')], /unknown scheme "foo"/],
  ];
  writeFileSync(sb.path('empty'), '');
  writeFileSync(sb.path('blank'), '\n  \n\t\n');
  writeFileSync(sb.path('bad-url'), 'foo://x\n');
  mkdirSync(sb.path('a-dir'));
  for (const [what, args, pattern, env] of bad) {
    void it(`${what}: one line, exit 2, nothing on stdout`, async () => {
      const r = await sb.run(args, env);
      assertOneLineError(r, 2, pattern);
      assert.equal(r.stdout, '');
    });
  }

  void it('an unreadable file: exit 2, permission denied', async (t) => {
    if (process.getuid?.() === 0) {
      t.skip('running as root, which reads any file: permission denied cannot happen');
      return;
    }
    const p = sb.path('locked');
    writeFileSync(p, `${url}\n`);
    chmodSync(p, 0o000);
    assertOneLineError(await sb.run(['status', '--store-file', p]), 2, /cannot be read \(permission denied\)/);
  });

  void it('doctor reports a bad store file as a failed store check, exit 2, still one JSON object', async () => {
    const r = await sb.run(['doctor', '--json', '--store-file', sb.path('nope')]);
    assert.equal(r.code, 2, r.stdout + r.stderr);
    const report = JSON.parse(r.stdout) as { ok: boolean; checks: Array<{ check: string; status: string; detail: string }> };
    assert.equal(report.ok, false);
    const store = report.checks.find((c) => c.check === 'store');
    assert.equal(store?.status, 'fail');
    assert.match(store.detail, /does not exist/);
  });
});

void describe('a password on the command line, on PostgreSQL', () => {
  const schema = freshSchema();
  // Trust authentication: the server never asks, so the password is accepted and unused.
  const withPassword = pgUrl(schema, 'postgres://postgres:hunter2@127.0.0.1:5432/test');
  after(async () => dropSchema(schema));

  void it('--store with a password works, and warns once on stderr', async () => {
    const m = await sb.run(['migrate', '--store', withPassword]);
    assert.equal(m.code, 0, m.stderr);
    for (const args of [['status', '--json'], ['history', '--json'], ['doctor', '--json']]) {
      const r = await sb.run([...args, '--store', withPassword]);
      assert.equal(r.code, 0, r.stdout + r.stderr);
      JSON.parse(r.stdout);
      assert.deepEqual(r.stderr.split('\n').filter((l) => l !== ''), [WARNING], `${args[0]} warns once`);
    }
  });

  void it('a password in a password= query parameter is warned about too', async () => {
    const u = new URL(pgUrl(schema));
    u.searchParams.set('password', 'hunter2');
    const r = await sb.run(['status', '--store', u.toString()]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr.trim(), WARNING);
  });

  void it('no warning from --store-file, LEASEHOLD_STORE, or a URL without a password', async () => {
    const f = sb.path('pg-url');
    writeFileSync(f, `${withPassword}\n`, { mode: 0o600 });
    for (const [args, env] of [
      [['status', '--store-file', f], {}],
      [['status'], { LEASEHOLD_STORE: withPassword }],
      [['status'], { LEASEHOLD_STORE_FILE: f }],
      [['status', '--store', pgUrl(schema)], {}],
    ] as Array<[string[], NodeJS.ProcessEnv]>) {
      const r = await sb.run(args, env);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stderr, '', `${args.join(' ')} ${JSON.stringify(env)}`);
    }
  });

  void it('a store file with a password that other users can read is warned about; chmod 600 silences it', async () => {
    const f = sb.path('pg-url-open');
    writeFileSync(f, `${withPassword}\n`);
    chmodSync(f, 0o644);
    const r = await sb.run(['status', '--store-file', f]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr.trim(), /^leasehold: warning: --store-file ".*pg-url-open" holds a password and other users can read it; chmod 600 it$/);
    chmodSync(f, 0o600);
    const quiet = await sb.run(['status', '--store-file', f]);
    assert.equal(quiet.stderr, '');
    // No password, nothing to hide: a world-readable file is fine.
    const plain = sb.path('pg-url-plain');
    writeFileSync(plain, `${pgUrl(schema)}\n`);
    chmodSync(plain, 0o644);
    assert.equal((await sb.run(['status', '--store-file', plain])).stderr, '');
  });

  void it('with --log-format json the warning is a JSON object', async () => {
    const r = await sb.run(['status', '--store', withPassword, '--log-format', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stderr.split('\n').filter((l) => l !== '');
    assert.equal(lines.length, 1, r.stderr);
    const w = JSON.parse(lines[0]!) as { level: string; command: string; msg: string; time: string };
    assert.equal(w.level, 'warn');
    assert.equal(w.command, 'status');
    assert.match(w.msg, /the password in --store is visible to other users in ps/);
    assert.ok(!Number.isNaN(Date.parse(w.time)));
  });
});
