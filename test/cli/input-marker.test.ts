/**
 * `leasehold run --marker` in a directory shared with another, unprivileged user (uid 65534,
 * via setpriv), as real processes: that user's planted link is not followed by the runner, and
 * a runner of its own is refused a world-writable directory without the sticky bit. Root could
 * write anywhere, so the other user is the one planting (or running), never the test itself.
 */
import { after, afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { BIN, HAS_SETPRIV, ROOT, Sandbox, assertNoLeftovers, assertOneLineError, until, type Done } from './helpers.js';

const NOBODY = 65534;
const AS_NOBODY = [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups'];
const skip = !HAS_SETPRIV
  ? 'util-linux setpriv is not installed'
  : process.getuid?.() !== 0
    ? 'these cases need root, to run a second user with setpriv'
    : undefined;
if (skip !== undefined) process.stdout.write(`# skipping the second-user marker cases: ${skip}\n`);

function asNobody(args: string[], env: NodeJS.ProcessEnv): { proc: ChildProcess; done: Promise<Done> } {
  const t0 = performance.now();
  const proc = spawn('setpriv', [...AS_NOBODY, process.execPath, BIN, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const done = new Promise<Done>((resolve) => proc.on('close', (code, signal) => resolve({ code, signal, stdout, stderr, ms: performance.now() - t0 })));
  return { proc, done };
}

void describe('leasehold run --marker in a directory another user can write to', { skip }, () => {
  const box = new Sandbox('input-marker');
  // The second user must be able to reach the sandbox (mkdtemp makes it 0700).
  chmodSync(box.dir, 0o755);
  const store = `sqlite:${box.path('leases.db')}`;
  afterEach(() => assertNoLeftovers());
  after(() => box.cleanup());

  void it("does not follow the other user's link planted at the temp name the runner would have used", async () => {
    // A file only root may write, outside the shared directory: what the attacker aims at.
    const secret = box.path('secret');
    mkdirSync(secret, { mode: 0o700 });
    const victim = `${secret}/victim.conf`;
    writeFileSync(victim, 'precious\n', { mode: 0o600 });
    // Shared with group 65534 (not world-writable, so the directory check lets it through).
    const shared = box.path('shared');
    mkdirSync(shared, { mode: 0o770 });
    chownSync(shared, 0, NOBODY);
    chmodSync(shared, 0o770);
    const marker = `${shared}/leader.json`;

    // Hold the lease so the runner under test waits, with its pid known, before it writes.
    const holder = box.start(['run', '--name', 'shared-m', '--store', store, '--ttl', '3s', '--', 'sh', '-c', `touch "${box.path('held')}"; while [ ! -e "${box.path('go')}" ]; do sleep 0.05; done`]);
    await until('the first runner holds the lease', () => box.has('held'));
    const runner = box.start(['run', '--name', 'shared-m', '--store', store, '--ttl', '3s', '--wait', '20s', '--marker', marker, '--', 'cat', marker]);
    const plant = spawnSync('setpriv', [...AS_NOBODY, 'ln', '-s', victim, `${marker}.${runner.pid}.tmp`], { encoding: 'utf8' });
    assert.equal(plant.status, 0, `the other user can plant a link in the shared directory: ${plant.stderr}`);
    writeFileSync(box.path('go'), '');
    assert.equal((await holder.done).code, 0, holder.stderr);
    const r = await runner.done;
    assert.equal(r.code, 0, r.stderr);
    assert.equal(readFileSync(victim, 'utf8'), 'precious\n', 'the file the link points at was not overwritten');
    const seen = JSON.parse(r.stdout) as { name: string; token: string };
    assert.equal(seen.name, 'shared-m', 'the command read a marker the runner wrote');
    assert.equal(existsSync(marker), false, 'and the runner deleted it on the way out');
  });

  void it('refuses a world-writable directory without the sticky bit, for an unprivileged runner too (exit 2)', async () => {
    const own = box.path('nobody-state');
    mkdirSync(own);
    chownSync(own, NOBODY, NOBODY);
    const open = box.path('open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    const marker = `${open}/leader.json`;
    const r = await asNobody(['run', '--name', 'open-m', '--store', `sqlite:${own}/leases.db`, '--marker', marker, '--', 'true'], { ...box.env, HOME: own, XDG_STATE_HOME: own }).done;
    assertOneLineError(r, 2, /leadership marker directory .*open is writable by every user and has no sticky bit.*chmod \+t/);
    assert.equal(existsSync(marker), false, 'no marker was written');
  });
});
