/**
 * Machine-readable output: `release --json`, every `--json` command's error path (one line on
 * stderr, nothing half-written on stdout), and `--log-format json` for the diagnostics.
 */
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { after, afterEach, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, assertOneLineError, readPid, sleeperScript, until } from './helpers.js';

const sb = new Sandbox('json');
const store = `sqlite:${sb.path('json.db')}`;
afterEach(() => assertNoLeftovers());
after(() => sb.cleanup());

interface ReleaseReport {
  name: string;
  revoked: boolean;
  token: string | null;
  holder: string | null;
  reason: string;
  detail: string;
}

async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

void describe('release --json', () => {
  void it('revoking a held lease prints what was revoked: name, token, holder, reason; the runner exits 76', async () => {
    const runner = sb.start(['run', '--name', 'held', '--store', store, '--ttl', '3s', '--quiet', '--', sleeperScript(sb, 'held')]);
    await until('the command runs', () => sb.has('held.pid'));
    const s = await sb.run(['status', 'held', '--json', '--store', store]);
    const [lease] = JSON.parse(s.stdout) as Array<{ holder: string; token: string }>;
    assert.ok(lease !== undefined, s.stdout);

    const r = await sb.run(['release', 'held', '--force', '--reason', 'maintenance window', '--json', '--store', store]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, '');
    const report = JSON.parse(r.stdout) as ReleaseReport;
    assert.deepEqual(report, { name: 'held', revoked: true, token: lease.token, holder: lease.holder, reason: 'maintenance window', detail: 'revoked' });
    const done = await runner.done;
    assert.equal(done.code, 76, done.stderr);
    await until('the command is gone', () => {
      try {
        process.kill(readPid(sb, 'held'), 0);
        return false;
      } catch {
        return true;
      }
    });
  });

  void it('a lease that is not held: revoked false with the last token, exit 1, one line on stderr', async () => {
    const r = await sb.run(['release', 'held', '--force', '--reason', 'again', '--json', '--store', store]);
    assertOneLineError(r, 1, /lease "held" is not held \(last token \d+\); nothing to revoke/);
    const report = JSON.parse(r.stdout) as ReleaseReport;
    assert.equal(report.revoked, false);
    assert.equal(report.detail, 'not-held');
    assert.match(report.token ?? '', /^\d+$/);
    assert.equal(report.holder, null);
  });

  void it('a lease that never existed: revoked false, token null, exit 1', async () => {
    const r = await sb.run(['release', 'ghost', '--force', '--reason', 'cleanup', '--json', '--store', store]);
    assertOneLineError(r, 1, /no lease named "ghost"/);
    assert.deepEqual(JSON.parse(r.stdout), { name: 'ghost', revoked: false, token: null, holder: null, reason: 'cleanup', detail: 'no-such-lease' });
  });
});

void describe('--json when the command fails: one line on stderr, stdout empty', () => {
  const failing: Array<[string, (dead: string) => string[], number, RegExp]> = [
    ['status, store unreachable', (dead) => ['status', '--json', '--store', dead], 3, /unavailable/],
    ['history, store unreachable', (dead) => ['history', '--json', '--store', dead], 3, /unavailable/],
    ['release, store unreachable', (dead) => ['release', 'x', '--force', '--reason', 'r', '--json', '--store', dead], 3, /unavailable/],
    ['status, bad store URL', () => ['status', '--json', '--store', 'foo://x'], 2, /unknown scheme "foo"/],
    ['history, bad --limit', () => ['history', '--json', '--limit', '0', '--store', store], 2, /--limit "0" is not a count/],
    ['release, no --force', () => ['release', 'x', '--reason', 'r', '--json', '--store', store], 2, /add --force/],
    ['doctor, unknown flag', () => ['doctor', '--json', '--verbose'], 2, /unknown option '--verbose'/],
  ];
  for (const [what, args, code, pattern] of failing) {
    void it(what, async () => {
      const dead = `postgres://postgres@127.0.0.1:${await deadPort()}/test`;
      const r = await sb.run(args(dead));
      assertOneLineError(r, code, pattern);
      assert.equal(r.stdout, '');
    });
  }

  void it('doctor --json with an unreachable store still prints its whole report, exit 3', async () => {
    const r = await sb.run(['doctor', '--json', '--store', `postgres://postgres@127.0.0.1:${await deadPort()}/test`]);
    assert.equal(r.code, 3, r.stderr);
    const report = JSON.parse(r.stdout) as { ok: boolean; exitCode: number; checks: Array<{ check: string; status: string }> };
    assert.equal(report.ok, false);
    assert.equal(report.exitCode, 3);
    assert.equal(report.checks.find((c) => c.check === 'store')?.status, 'fail');
  });
});

void describe('--log-format json', () => {
  interface LogLine {
    time: string;
    level: string;
    command?: string;
    msg: string;
    exitCode?: number;
    code?: string;
  }
  const oneJsonLine = (stderr: string): LogLine => {
    const lines = stderr.split('\n').filter((l) => l !== '');
    assert.equal(lines.length, 1, `one line on stderr, got:\n${stderr}`);
    return JSON.parse(lines[0]!) as LogLine;
  };

  void it('an error is one JSON object on stderr with its exit code; stdout stays empty', async () => {
    const r = await sb.run(['status', '--json', '--log-format', 'json', '--store', 'foo://x']);
    assert.equal(r.code, 2);
    assert.equal(r.stdout, '');
    const e = oneJsonLine(r.stderr);
    assert.equal(e.level, 'error');
    assert.equal(e.command, 'status');
    assert.equal(e.exitCode, 2);
    assert.match(e.msg, /unknown scheme "foo"/);
    assert.ok(!Number.isNaN(Date.parse(e.time)));
  });

  void it('LEASEHOLD_LOG_FORMAT=json formats even an unknown-flag error, which happens before the flags are parsed', async () => {
    const r = await sb.run(['history', '--bogus', '--store', store], { LEASEHOLD_LOG_FORMAT: 'json' });
    assert.equal(r.code, 2);
    const e = oneJsonLine(r.stderr);
    assert.equal(e.code, 'ERR_PARSE_ARGS_UNKNOWN_OPTION');
    assert.match(e.msg, /unknown option '--bogus'/);
    const flag = await sb.run(['release', 'x', '--log-format=json', '--force', '--reason', 'r', '--bogus']);
    assert.equal(oneJsonLine(flag.stderr).level, 'error');
  });

  void it('release with nothing to revoke: the result on stdout, the error as JSON on stderr, exit 1', async () => {
    const r = await sb.run(['release', 'ghost', '--force', '--reason', 'r', '--json', '--log-format', 'json', '--store', store]);
    assert.equal(r.code, 1);
    assert.equal((JSON.parse(r.stdout) as ReleaseReport).detail, 'no-such-lease');
    const e = oneJsonLine(r.stderr);
    assert.equal(e.level, 'error');
    assert.match(e.msg, /no lease named "ghost"/);
  });

  void it('--log-format text (the default) keeps the house one-line format; --log-format beats the variable', async () => {
    assertOneLineError(await sb.run(['status', '--store', 'foo://x', '--log-format', 'text'], { LEASEHOLD_LOG_FORMAT: 'json' }), 2, /unknown scheme/);
  });

  void it('an unknown format is a usage error naming the flag or the variable', async () => {
    assertOneLineError(await sb.run(['status', '--store', store, '--log-format', 'xml']), 2, /--log-format "xml" is not a log format; use text or json/);
    assertOneLineError(await sb.run(['doctor', '--store', store], { LEASEHOLD_LOG_FORMAT: 'yaml' }), 2, /LEASEHOLD_LOG_FORMAT "yaml" is not a log format/);
  });
});
