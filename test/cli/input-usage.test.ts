/**
 * What the CLI takes from the command line, as a real process: durations (compounds, days, one
 * refusal for a fraction of a millisecond shared with the library, a limit at the longest timer
 * Node.js can run), lease names that look like other names, and store URLs with a bad part.
 * Every refusal is exit 2 with one line on stderr and nothing contended.
 */
import { after, afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseDuration } from '../../src/core/config.js';
import { Sandbox, assertNoLeftovers, assertOneLineError } from './helpers.js';

void describe('leasehold run: durations', () => {
  const box = new Sandbox('input-durations');
  const store = `sqlite:${box.path('leases.db')}`;
  afterEach(() => assertNoLeftovers());
  after(() => box.cleanup());

  void it('--ttl 876000h is a usage error naming the limit, not a lease lost at once (exit 2, no TimeoutOverflowWarning)', async () => {
    const r = await box.run(['run', '--name', 'long', '--store', store, '--ttl', '876000h', '--', 'sh', '-c', 'echo ran']);
    assertOneLineError(r, 2, /^leasehold: --ttl 876000h is too long: the limit is 2147483647ms \(about 24\.8 days\)/);
    assert.doesNotMatch(r.stderr, /TimeoutOverflowWarning/);
    assert.equal(r.stdout, '', 'the command never ran');
  });

  void it('a long --renew, --grace, --wait or --progress-timeout, or one from the environment, is refused the same way', async () => {
    for (const [args, env, what] of [
      [['--ttl', '24d', '--renew', '30d'], {}, '--renew'],
      [['--grace', '30d'], {}, '--grace'],
      [['--wait', '30d'], {}, '--wait'],
      [['--progress-timeout', '30d'], {}, '--progress-timeout'],
      [[], { LEASEHOLD_TTL: '876000h' }, 'LEASEHOLD_TTL'],
    ] as Array<[string[], NodeJS.ProcessEnv, string]>) {
      const r = await box.run(['run', '--name', 'long', '--store', store, ...args, '--', 'sh', '-c', 'echo ran'], env);
      assertOneLineError(r, 2, new RegExp(`^leasehold: ${what} \\S+ is too long: the limit is 2147483647ms`));
      assert.equal(r.stdout, '', what);
    }
  });

  void it('--ttl at the limit runs the command and keeps the lease (no timer fires at once)', async () => {
    const r = await box.run(['run', '--name', 'at-limit', '--store', store, '--ttl', '24d', '--', 'sh', '-c', 'sleep 0.3; echo "$LEASEHOLD_TOKEN"']);
    assert.equal(r.code, 0, r.stderr);
    assert.ok(BigInt(r.stdout.trim()) > 0n);
    assert.doesNotMatch(r.stderr, /TimeoutOverflowWarning|lost|suspend/);
  });

  void it('compound durations and days are accepted', async () => {
    for (const ttl of ['1m30s', '1d', '1h30m', '1.5s']) {
      const r = await box.run(['run', '--name', 'compound', '--store', store, '--ttl', ttl, '--', 'true']);
      assert.equal(r.code, 0, `--ttl ${ttl}: ${r.stderr}`);
    }
  });

  void it('a fraction of a millisecond is refused with the words the library uses', async () => {
    for (const ttl of ['1.5', '1500.5ms']) {
      const r = await box.run(['run', '--name', 'frac', '--store', store, '--ttl', ttl, '--', 'true']);
      let library = '';
      try {
        parseDuration(ttl === '1.5' ? 1.5 : ttl, '--ttl');
      } catch (e) {
        library = (e as Error).message;
      }
      assert.notEqual(library, '');
      assertOneLineError(r, 2);
      assert.equal(r.stderr.trim(), `leasehold: ${library}`);
    }
  });
});

void describe('leasehold run and status: look-alike lease names', () => {
  const box = new Sandbox('input-names');
  const store = `sqlite:${box.path('leases.db')}`;
  afterEach(() => assertNoLeftovers());
  after(() => box.cleanup());

  void it('a bidirectional override, a zero-width space or only spaces is exit 2, the character spelled out', async () => {
    for (const [name, shown] of [
      ['billing\u202Enu', /"billing\\u\{202E\}nu" contains a bidirectional control \(U\+202E\)/],
      ['billing\u200B', /"billing\\u\{200B\}" contains an invisible character \(U\+200B\)/],
      ['   ', /"   " is only spaces/],
      ['billing ', /starts or ends with a space/],
    ] as Array<[string, RegExp]>) {
      const r = await box.run(['run', '--name', name, '--store', store, '--', 'sh', '-c', 'echo ran']);
      assertOneLineError(r, 2, shown);
      assert.doesNotMatch(r.stderr, /[\u200b\u202e]/u, 'the error line carries no raw hidden character');
      assert.equal(r.stdout, '');
    }
    const s = await box.run(['status', 'billing\u202Enu', '--store', store]);
    assertOneLineError(s, 2, /bidirectional control/);
  });
});

void describe('leasehold run: store URLs with a bad part are exit 2', () => {
  const box = new Sandbox('input-urls');
  afterEach(() => assertNoLeftovers());
  after(() => box.cleanup());

  void it('on every scheme, naming the bad part', async () => {
    for (const [url, said] of [
      // ioredis logs the refused SELECT and carries on in database 0: this ran, exit 0.
      ['redis://127.0.0.1:6379/99999', /database 99999 is out of range.*0-15/],
      ['redis://127.0.0.1:6379/0?prefix=a&prefix=b', /parameter "prefix" is given twice/],
      ['postgres://postgres@127.0.0.1:5432/test?connect_timeout=5', /parameter "connect_timeout" is not understood; the PostgreSQL store takes schema=/],
      ['etcd://127.0.0.1:2379,127.0.0.1:2379', /endpoint 127\.0\.0\.1:2379 is listed twice/],
      ['etcd://127.0.0.1:2379?timeout=99999999999', /timeout="99999999999" must be a whole number of milliseconds from 1 to 2147483647/],
      [`sqlite:${box.path('leases.db')}?mode=ro`, /takes no URL parameters/],
    ] as Array<[string, RegExp]>) {
      const r = await box.run(['run', '--name', 'u', '--store', url, '--no-wait', '--', 'sh', '-c', 'echo ran']);
      assertOneLineError(r, 2, said);
      assert.equal(r.stdout, '', url);
    }
    assert.equal(box.has('leases.db?mode=ro'), false, 'no file named after the parameter');
  });
});
