/**
 * `leasehold run`: COMMAND checked before contending, `--busy-exit`, the store password kept
 * out of the child's environment, and `--json` / `--log-format json` on stderr.
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { after, afterEach, before, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, assertOneLineError, dropSchema, freshSchema, pgUrl, readPid, sleeperScript, until } from './helpers.js';

const sb = new Sandbox('run-options');
const store = `sqlite:${sb.path('leases.db')}`;
const pids: number[] = [];
afterEach(() => assertNoLeftovers(pids.splice(0)));
after(() => sb.cleanup());

interface JsonLine {
  ts: string;
  level: string;
  event: string;
  name: string;
  msg: string;
  token?: string;
  holder?: string;
  [k: string]: unknown;
}

/** Every stderr line must be one JSON object; returns them in order. */
function jsonLines(stderr: string): JsonLine[] {
  return stderr
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      try {
        return JSON.parse(l) as JsonLine;
      } catch {
        throw new Error(`a stderr line is not JSON: ${l}\nall of stderr:\n${stderr}`);
      }
    });
}

/** The runner's own events, without library warnings a loaded machine may add (store retries). */
function events(lines: JsonLine[]): string[] {
  return lines.filter((l) => l.event !== 'log').map((l) => l.event);
}

async function leaseTrace(name: string): Promise<{ status: unknown[]; history: unknown[] }> {
  const s = await sb.run(['status', name, '--json', '--store', store]);
  const h = await sb.run(['history', name, '--json', '--store', store]);
  assert.equal(s.code, 0, s.stderr);
  assert.equal(h.code, 0, h.stderr);
  return { status: JSON.parse(s.stdout) as unknown[], history: JSON.parse(h.stdout) as unknown[] };
}

/** Starts a runner that holds `name` until killed; resolves once the store shows it held. */
async function holdLease(name: string): Promise<ReturnType<Sandbox['start']>> {
  const holder = sb.start(['run', '--name', name, '--store', store, '--ttl', '3s', '--', sleeperScript(sb, name)]);
  await until('the holder runs its command', () => sb.has(`${name}.token`));
  pids.push(readPid(sb, name));
  return holder;
}

void describe('leasehold run: COMMAND is checked before contending', () => {
  const cases: Array<[string, () => string, number, RegExp]> = [
    ['a name not on PATH', () => 'no-such-command-lh', 127, /cannot run "no-such-command-lh": not found in PATH/],
    ['a path that does not exist', () => sb.path('missing.sh'), 127, /cannot run ".*missing\.sh": no such file/],
    [
      'a file that is not executable',
      () => {
        writeFileSync(sb.path('plain.sh'), '#!/bin/sh\ntrue\n', { mode: 0o644 });
        return sb.path('plain.sh');
      },
      126,
      /cannot run ".*plain\.sh": not executable/,
    ],
    [
      'a directory',
      () => {
        mkdirSync(sb.path('adir'), { recursive: true });
        return sb.path('adir');
      },
      126,
      /cannot run ".*adir": it is a directory/,
    ],
  ];
  for (const [what, command, code, message] of cases) {
    void it(`${what}: exit ${code}, one line from leasehold's own check, and no lease taken`, async () => {
      const name = `typo-${code}-${what.length}`;
      const r = await sb.run(['run', '--name', name, '--store', store, '--', command(), 'arg']);
      assertOneLineError(r, code, message);
      assert.match(r.stderr, /no lease was taken/);
      assert.doesNotMatch(r.stderr, /setpriv/);
      const trace = await leaseTrace(name);
      assert.deepEqual(trace, { status: [], history: [] }, 'the store never saw the lease: no token was spent');
    });
  }
});

void describe('leasehold run --busy-exit', () => {
  void it('--no-wait with the lease held elsewhere exits with --busy-exit (0), and the command does not run', async () => {
    const holder = await holdLease('busy0');
    const r = await sb.run(['run', '--name', 'busy0', '--store', store, '--no-wait', '--busy-exit', '0', '--', 'sh', '-c', `touch '${sb.path('busy0.ran')}'`]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /was not acquired: another process holds it/);
    assert.ok(!sb.has('busy0.ran'), 'the command never ran');
    holder.proc.kill('SIGTERM');
    await holder.done;
  });

  void it('a --wait that runs out uses LEASEHOLD_BUSY_EXIT, and the flag overrides it', async () => {
    const holder = await holdLease('busyenv');
    const args = ['run', '--name', 'busyenv', '--store', store, '--wait', '300ms', '--quiet', '--', 'true'];
    const fromEnv = await sb.run(args, { LEASEHOLD_BUSY_EXIT: '9' });
    assert.equal(fromEnv.code, 9, fromEnv.stderr);
    assert.equal(fromEnv.stderr, '');
    const fromFlag = await sb.run([...args.slice(0, -2), '--busy-exit', '4', '--', 'true'], { LEASEHOLD_BUSY_EXIT: '9' });
    assert.equal(fromFlag.code, 4, fromFlag.stderr);
    holder.proc.kill('SIGTERM');
    await holder.done;
  });

  void it('a store outage is still exit 3, whatever --busy-exit says', async () => {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    const r = await sb.run(['run', '--name', 'outage', '--store', 'postgres://postgres@127.0.0.1:1/test', '--no-wait', '--busy-exit', '0', '--', 'true']);
    assert.equal(r.code, 3, r.stderr);
  });

  for (const bad of ['256', '-1', 'x', '1.5', '']) {
    void it(`--busy-exit ${JSON.stringify(bad)} is a usage error`, async () => {
      const r = await sb.run(['run', '--name', 'b', '--store', store, `--busy-exit=${bad}`, '--', 'true']);
      assertOneLineError(r, 2, /--busy-exit .*0 to 255/);
    });
  }
  void it('LEASEHOLD_BUSY_EXIT=300 is a usage error naming the variable', async () => {
    const r = await sb.run(['run', '--name', 'b', '--store', store, '--', 'true'], { LEASEHOLD_BUSY_EXIT: '300' });
    assertOneLineError(r, 2, /LEASEHOLD_BUSY_EXIT.*0 to 255/);
  });
});

void describe('leasehold run: the store password stays out of the child environment', () => {
  const schema = freshSchema();
  const withPassword = new URL(pgUrl(schema));
  withPassword.password = 'sekr1t-pw';
  before(async () => {
    const m = await sb.run(['migrate', '--store', withPassword.toString()]);
    assert.equal(m.code, 0, m.stderr);
  });
  after(async () => dropSchema(schema));

  for (const via of ['--store', 'LEASEHOLD_STORE']) {
    void it(`given with ${via}: LEASEHOLD_STORE has the password masked, and nothing in the environment has it`, async () => {
      const flag = via === '--store' ? ['--store', withPassword.toString()] : [];
      const env = via === '--store' ? {} : { LEASEHOLD_STORE: withPassword.toString() };
      const r = await sb.run(['run', '--name', 'pw', ...flag, '--ttl', '2s', '--quiet', '--', 'sh', '-c', 'printf "%s\\n" "$LEASEHOLD_STORE"; env'], env);
      assert.equal(r.code, 0, r.stderr);
      const [shown] = r.stdout.split('\n');
      const expected = new URL(withPassword.toString());
      expected.password = '***';
      assert.equal(shown, expected.toString());
      assert.doesNotMatch(r.stdout, /sekr1t-pw/);
    });
  }
});

void describe('leasehold run --json and --log-format json', () => {
  void it('--json: every line on stderr is a JSON event with ts, name, a string token and the holder; stdout is the command\'s', async () => {
    const r = await sb.run(['run', '--name', 'js', '--store', store, '--ttl', '2s', '--json', '--', 'sh', '-c', 'echo out; exit 7']);
    assert.equal(r.code, 7, r.stderr);
    assert.equal(r.stdout, 'out\n');
    const lines = jsonLines(r.stderr);
    assert.deepEqual(events(lines), ['acquired', 'command-exited', 'released']);
    const [acquired, exited, released] = lines.filter((l) => l.event !== 'log');
    assert.match(acquired!.token!, /^[1-9]\d*$/);
    assert.match(acquired!.holder!, /:\d+:[0-9a-f]{32}$/);
    for (const l of lines) {
      assert.equal(l.name, 'js');
      assert.equal(l.token, acquired!.token);
      assert.equal(l.holder, acquired!.holder);
      assert.ok(!Number.isNaN(Date.parse(l.ts)), l.ts);
      assert.equal(typeof l.msg, 'string');
    }
    assert.equal(exited!['code'], 7);
    assert.equal(exited!['status'], 7);
    assert.equal(released!['handedOver'], true);
  });

  void it('--json: a forwarded SIGTERM, the command killed by it, then the release', async () => {
    const r = sb.start(['run', '--name', 'jsig', '--store', store, '--ttl', '2s', '--json', '--', sleeperScript(sb, 'jsig')]);
    await until('the command started', () => sb.has('jsig.token'));
    pids.push(readPid(sb, 'jsig'));
    r.proc.kill('SIGTERM');
    const d = await r.done;
    assert.equal(d.code, 143, d.stderr);
    const lines = jsonLines(d.stderr);
    assert.deepEqual(events(lines), ['acquired', 'signal-forwarded', 'command-killed', 'released']);
    const [, forwarded, killed] = lines.filter((l) => l.event !== 'log');
    assert.equal(forwarded!['signal'], 'SIGTERM');
    assert.equal(forwarded!['pgid'], readPid(sb, 'jsig'));
    assert.equal(killed!['signal'], 'SIGTERM');
    assert.equal(killed!['status'], 143);
  });

  void it('--json: waiting, then not acquired, as JSON with the holder and the exit code', async () => {
    const holder = await holdLease('jbusy');
    const r = await sb.run(['run', '--name', 'jbusy', '--store', store, '--wait', '300ms', '--json', '--', 'true']);
    assert.equal(r.code, 75, r.stderr);
    const lines = jsonLines(r.stderr);
    assert.deepEqual(events(lines), ['waiting', 'not-acquired']);
    const [waiting, notAcquired] = lines.filter((l) => l.event !== 'log');
    assert.match(String(waiting!.holder), /:\d+:[0-9a-f]{32}$/);
    assert.equal(notAcquired!['exit'], 75);
    assert.equal(notAcquired!.holder, waiting!.holder);
    holder.proc.kill('SIGTERM');
    await holder.done;
  });

  void it('--json: an operator release is a "lost" event with reason "revoked", then exit 76', async () => {
    const r = sb.start(['run', '--name', 'jrev', '--store', store, '--ttl', '1500ms', '--json', '--', sleeperScript(sb, 'jrev')]);
    await until('the command started', () => sb.has('jrev.token'));
    pids.push(readPid(sb, 'jrev'));
    const rel = await sb.run(['release', 'jrev', '--force', '--reason', 'test', '--store', store]);
    assert.equal(rel.code, 0, rel.stderr);
    const d = await r.done;
    assert.equal(d.code, 76, d.stderr);
    const lines = jsonLines(d.stderr);
    const lost = lines.find((l) => l.event === 'lost');
    assert.ok(lost, d.stderr);
    assert.equal(lost.reason, 'revoked');
    assert.equal(lost.token, sb.read('jrev.token').trim());
    assert.equal(lost['signal'], 'SIGTERM');
    const last = lines.filter((l) => l.event !== 'log').at(-1);
    assert.equal(last?.event, 'exit');
    assert.equal(last['status'], 76);
  });

  void it('LEASEHOLD_LOG_FORMAT=json: the library\'s warnings come out as JSON lines too', async () => {
    const marker = sb.path('m.json');
    writeFileSync(marker, '{"name":"jm","holder":"someone","token":"3"}');
    const r = await sb.run(['run', '--name', 'jm', '--store', store, '--ttl', '2s', '--marker', marker, '--', 'true'], { LEASEHOLD_LOG_FORMAT: 'json' });
    assert.equal(r.code, 0, r.stderr);
    const lines = jsonLines(r.stderr);
    const warn = lines.find((l) => l.level === 'warn');
    assert.ok(warn, r.stderr);
    assert.match(warn.msg, /inherited leadership marker/);
    assert.equal(warn['marker'], marker);
    assert.equal(warn.name, 'jm');
  });

  void it('--log-format json: a store that cannot be reached is one JSON error line, exit 3', async () => {
    const r = await sb.run(['run', '--name', 'jdown', '--store', 'postgres://postgres@127.0.0.1:1/test', '--log-format', 'json', '--no-wait', '--', 'true']);
    assert.equal(r.code, 3, r.stderr);
    const lines = jsonLines(r.stderr);
    assert.equal(lines.length, 1, r.stderr);
    assert.equal(lines[0]!.level, 'error');
    assert.equal(lines[0]!['exit'], 3);
    assert.match(lines[0]!.msg, /127\.0\.0\.1:1/);
  });

  void it('a command leasehold cannot run is one JSON error line under --json', async () => {
    const r = await sb.run(['run', '--name', 'jtypo', '--store', store, '--json', '--', 'no-such-command-lh']);
    assert.equal(r.code, 127, r.stderr);
    const lines = jsonLines(r.stderr);
    assert.equal(lines.length, 1);
    assert.equal(lines[0]!.event, 'error');
    assert.equal(lines[0]!['exit'], 127);
  });

  void it('an unknown --log-format, or --json with --log-format text, is a usage error', async () => {
    assertOneLineError(await sb.run(['run', '--name', 'x', '--store', store, '--log-format', 'yaml', '--', 'true']), 2, /--log-format "yaml".*text or json/);
    assertOneLineError(await sb.run(['run', '--name', 'x', '--store', store, '--', 'true'], { LEASEHOLD_LOG_FORMAT: 'xml' }), 2, /LEASEHOLD_LOG_FORMAT/);
    assertOneLineError(await sb.run(['run', '--name', 'x', '--store', store, '--json', '--log-format', 'text', '--', 'true']), 2, /--json.*--log-format text/);
  });
});
