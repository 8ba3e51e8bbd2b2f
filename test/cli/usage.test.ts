import assert from 'node:assert/strict';
import { after, afterEach, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, assertOneLineError } from './helpers.js';

const sb = new Sandbox('usage');
const store = `sqlite:${sb.path('x.db')}`;
afterEach(() => assertNoLeftovers());
after(() => sb.cleanup());

void describe('leasehold CLI: help, version, and bad input', () => {
  void it('--help lists every command and the exit codes, on stdout, exit 0', async () => {
    const r = await sb.run(['--help']);
    assert.equal(r.code, 0);
    for (const cmd of ['run', 'status', 'history', 'release', 'migrate', 'doctor', 'demo']) assert.match(r.stdout, new RegExp(`leasehold ${cmd}`));
    for (const code of ['75', '76', '3', '2']) assert.match(r.stdout, new RegExp(`^\\s+${code}\\s+\\S`, 'm'));
    const sub = await sb.run(['help', 'run']);
    assert.equal(sub.code, 0);
    assert.match(sub.stdout, /LEASEHOLD_IDEMPOTENCY_KEY/);
    assert.match((await sb.run(['run', '--help'])).stdout, /--no-wait/);
  });

  void it('--version prints the package version', async () => {
    const r = await sb.run(['--version']);
    assert.equal(r.code, 0);
    assert.match(r.stdout.trim(), /^\d+\.\d+\.\d+/);
  });

  void it('no command at all is a usage error that shows the usage', async () => {
    const r = await sb.run([]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /Usage:/);
  });

  const bad: Array<[string, string[], RegExp, NodeJS.ProcessEnv?]> = [
    ['an unknown command', ['frobnicate'], /unknown command "frobnicate"/],
    ['an unknown flag', ['run', '--name', 'a', '--store', store, '--bogus', '--', 'true'], /unknown option '--bogus'.*leasehold run --help/],
    ['an unknown flag on status', ['status', '--store', store, '--verbose'], /unknown option '--verbose'/],
    ['a missing `--` before the command', ['run', '--name', 'a', '--store', store, 'sh', '-c', 'exit 7'], /missing `--` before the command.*-- sh -c 'exit 7'/],
    ['no command after `--`', ['run', '--name', 'a', '--store', store, '--'], /needs a command after `--`/],
    ['a bad duration', ['run', '--name', 'a', '--store', store, '--ttl', '5x', '--', 'true'], /--ttl "5x" is not a duration/],
    ['a bad duration in the environment', ['run', '--name', 'a', '--store', store, '--', 'true'], /LEASEHOLD_RENEW "soon" is not a duration/, { LEASEHOLD_RENEW: 'soon' }],
    ['an unknown store scheme', ['run', '--name', 'a', '--store', 'foo://x', '--', 'true'], /unknown scheme "foo"/],
    ['a store URL without a scheme', ['status', '--store', 'just-a-path'], /no scheme/],
    ['a malformed PostgreSQL URL', ['status', '--store', 'postgres://'], /postgres:\/\/user@host/],
    ['an empty name', ['run', '--name', '', '--store', store, '--', 'true'], /lease name must be a non-empty string/],
    ['a name with a control character', ['run', '--name', 'a\tb', '--store', store, '--', 'true'], /control character/],
    ['no name at all', ['run', '--store', store, '--', 'true'], /needs --name NAME/],
    ['a renew interval above ttl/2', ['run', '--name', 'a', '--store', store, '--ttl', '3s', '--renew', '2s', '--', 'true'], /more than half the ttl/],
    ['a grace too large for the ttl', ['run', '--name', 'a', '--store', store, '--ttl', '3s', '--grace', '2s', '--', 'true'], /--grace 2000ms must be shorter than ttl - renew/],
    ['a grace that leaves no room for the margin', ['run', '--name', 'a', '--store', store, '--ttl', '3s', '--grace', '1900ms', '--', 'true'], /leaves no time to renew/],
    ['--wait with --no-wait', ['run', '--name', 'a', '--store', store, '--wait', '1s', '--no-wait', '--', 'true'], /contradict/],
    ['release without --force', ['release', 'a', '--reason', 'x', '--store', store], /add --force/],
    ['release without --reason', ['release', 'a', '--force', '--store', store], /needs --reason TEXT/],
    ['release without a name', ['release', '--force', '--reason', 'x', '--store', store], /needs the lease NAME/],
    ['history with a bad --limit', ['history', '--limit', 'lots', '--store', store], /--limit "lots" is not a count/],
    ['a bad schema name', ['migrate', '--store', 'postgres://postgres@127.0.0.1/test', '--schema', 'no-dashes'], /not a plain identifier/],
  ];
  for (const [what, args, pattern, env] of bad) {
    void it(`${what}: one line, exit 2, no stack trace`, async () => {
      const r = await sb.run(args, env);
      assertOneLineError(r, 2, pattern);
      assert.equal(r.stdout, '');
    });
  }

  void it('flags override LEASEHOLD_* variables, which fill in what the flags leave out', async () => {
    const env = { LEASEHOLD_TTL: 'not-a-duration', LEASEHOLD_NAME: 'from-env', LEASEHOLD_STORE: store };
    // --ttl wins over the broken LEASEHOLD_TTL; the name and store come from the environment.
    const r = await sb.run(['run', '--ttl', '2s', '--quiet', '--', 'sh', '-c', 'echo "$LEASEHOLD_NAME $LEASEHOLD_STORE"'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), `from-env ${store}`);
    assert.equal(r.stderr, '', '--quiet prints nothing on success');
    // Without the flag, the broken variable is reported by name.
    assertOneLineError(await sb.run(['run', '--', 'true'], env), 2, /LEASEHOLD_TTL "not-a-duration"/);
    // --name beats LEASEHOLD_NAME, --store beats LEASEHOLD_STORE.
    const other = `sqlite:${sb.path('other.db')}`;
    const r2 = await sb.run(['run', '--name', 'from-flag', '--store', other, '--ttl', '2s', '--quiet', '--', 'sh', '-c', 'echo "$LEASEHOLD_NAME $LEASEHOLD_STORE"'], env);
    assert.equal(r2.stdout.trim(), `from-flag ${other}`);
  });

  void it('a command that does not exist exits 127 without taking the lease', async () => {
    const r = await sb.run(['run', '--name', 'missing-cmd', '--store', store, '--ttl', '2s', '--', '/nonexistent/command']);
    assert.equal(r.code, 127, r.stderr);
    const s = await sb.run(['status', 'missing-cmd', '--store', store, '--json']);
    assert.deepEqual(JSON.parse(s.stdout), [], 'checked before contending: the store never saw the lease');
  });
});
