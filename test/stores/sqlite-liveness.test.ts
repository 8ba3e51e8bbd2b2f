/**
 * Liveness 'session' on SQLite (issue 32), with real processes: the holder's process is the
 * session (pid and start time, on this boot and pid namespace). A SIGKILLed holder's term is
 * ended by a waiting follower's claim long before the TTL, with a larger token; a recorded pid
 * that now names another process (pid reuse) counts as gone; a term recorded under another boot
 * is left to its expiry; a live holder is never ended early; network filesystems are refused.
 * Speed is measured in bench/, not asserted here: every bound is derived from the TTL.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { SESSION_ENDED_DETAIL, encodeSession, filesystemOf, processStart, thisProcess } from '../../src/backends/sqlite/session.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';

const holderJs = fileURLToPath(new URL('../fixtures/session-holder.js', import.meta.url));
const uniq = (p: string): string => `h32-${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function startHolder(url: string, name: string, ttlMs: number): { child: ChildProcess; acquired: Promise<bigint> } {
  const child = spawn(process.execPath, [holderJs, url, name, String(ttlMs), 'session'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const acquired = new Promise<bigint>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const m = /"event":"acquired","token":"(\d+)"/.exec(buf);
      if (m !== null) resolve(BigInt(m[1]!));
    });
    child.on('exit', () => reject(new Error(`holder exited before it acquired: ${buf}`)));
  });
  return { child, acquired };
}

void describe('liveness session on sqlite', () => {
  let t: TestStore;
  let path: string;
  before(async () => {
    t = await makeTestStore('sqlite');
    path = t.url.slice('sqlite:'.length);
  });
  after(async () => {
    await t?.cleanup();
  });

  void it('SIGKILL of the holder: a waiting follower takes over long before the TTL, with a larger token, as a revocation', async () => {
    const name = uniq('kill');
    const ttl = 30_000;
    const h = startHolder(t.url, name, ttl);
    const lh = new Leasehold({ store: await t.open() });
    try {
      const old = await h.acquired;
      let acquiredAt = 0;
      const won = lh.lease(name, { ttl, liveness: 'session' }).acquire().then((term) => ((acquiredAt = performance.now()), term));
      await sleep(300); // the follower is waiting (busy, watching the holder's process)
      const killedAt = performance.now();
      h.child.kill('SIGKILL');
      const term = await won;
      const tookMs = acquiredAt - killedAt;
      // The holder renewed at most ttl/3 before the kill: its term had at least 20 s left, so a
      // takeover within 10 s comes from the process's end (10 s: a loaded host stalls).
      assert.ok(tookMs < ttl / 3, `took over ${tookMs.toFixed(0)}ms after SIGKILL`);
      assert.ok(term.token > old);
      const ended = (await t.store.history({ name })).find((e) => e.event === 'revoked');
      assert.ok(ended?.detail?.startsWith(SESSION_ENDED_DETAIL), String(ended?.detail));
      assert.equal(ended?.token, old);
      process.stdout.write(`# sqlite takeover after SIGKILL: ${tookMs.toFixed(0)}ms (TTL ${ttl}ms)\n`);
    } finally {
      h.child.kill('SIGKILL');
      await lh.close();
    }
  });

  void it('a recorded pid that names another process now (pid reuse) is gone; another boot is left to expiry; a live holder stays', async () => {
    const db = new SqliteStore({ path });
    const lh = new Leasehold({ store: t.store });
    try {
      const me = thisProcess();
      const held = await lh.lease(uniq('live'), { ttl: 30_000, liveness: 'session' }).acquire();
      // Our own live process: a contender's claim leaves the term alone.
      const other = new Leasehold({ store: await t.open() });
      await assert.rejects(other.lease(held.name, { ttl: 30_000, liveness: 'session' }).acquire({ wait: false }));
      await other.close();
      // Same pid, another start time: the process that held it is gone, its pid reused.
      const reused = uniq('reused');
      const first = await lh.lease(reused, { ttl: 30_000 }).acquire();
      db.database.prepare('UPDATE leasehold_leases SET session_id = ?, session_token = token WHERE name = ?').run(encodeSession({ ...me, start: String(Number(me.start) - 1) }), reused);
      const c1 = new Leasehold({ store: await t.open() });
      const taken = await c1.lease(reused, { ttl: 30_000, liveness: 'session' }).acquire({ wait: false });
      assert.ok(taken.token > first.token);
      assert.equal((await t.store.history({ name: reused })).filter((e) => e.event === 'revoked').length, 1);
      await c1.close();
      // Another boot: this host's process table says nothing of it.
      const moved = uniq('moved');
      await lh.lease(moved, { ttl: 30_000 }).acquire();
      db.database.prepare('UPDATE leasehold_leases SET session_id = ?, session_token = token WHERE name = ?').run(encodeSession({ ...me, pid: 999_999_999, boot: 'another-boot' }), moved);
      const c2 = new Leasehold({ store: await t.open() });
      await assert.rejects(c2.lease(moved, { ttl: 30_000, liveness: 'session' }).acquire({ wait: false }));
      await c2.close();
    } finally {
      await lh.close();
      await db.close();
    }
  });

  void it('reads a process start time from /proc, none for a process that is gone, and the filesystem a file is on', () => {
    assert.match(processStart(process.pid)!, /^\d+$/);
    assert.equal(processStart(2 ** 30), undefined);
    assert.equal(filesystemOf('/proc/self/stat'), 'proc');
    assert.ok(filesystemOf(path) !== undefined);
  });

  // /proc hidden, as in a container that masks it: the holder runs in a mount namespace of its
  // own (unshare, private propagation: the host's /proc is untouched) with an empty tmpfs on
  // /proc. The code reads the real /proc path, so the environment is what is changed.
  const why = hideProcUnavailable();
  void it('without /proc (hidden in a mount namespace) the mode is refused with why unsupported, and no term is granted', { skip: why ?? false }, async () => {
    const name = `noproc-${randomBytes(4).toString('hex')}`;
    const child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', 'mount -t tmpfs tmpfs /proc && exec "$0" "$@"', process.execPath, holderJs, t.url, name, '30000', 'session'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    const line = JSON.parse(out.trim().split('\n')[0] ?? '{}') as { event?: string; why?: string; message?: string };
    assert.equal(line.event, 'refused', out);
    assert.equal(line.why, 'unsupported');
    assert.match(line.message!, /needs \/proc \(Linux\).*Use liveness 'ttl'/);
    assert.equal(code, 3);
    assert.deepEqual(await t.store.history({ name, limit: 10 }), []);
  });
});

/** Why a holder cannot be run with /proc hidden here, or null (needs root and util-linux unshare). */
function hideProcUnavailable(): string | null {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'not root: mounting over /proc in a mount namespace needs CAP_SYS_ADMIN';
  const r = spawnSync('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', 'mount -t tmpfs tmpfs /proc && test ! -e /proc/self'], { encoding: 'utf8' });
  return r.status === 0 ? null : `cannot hide /proc in a mount namespace here: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim()}`;
}
