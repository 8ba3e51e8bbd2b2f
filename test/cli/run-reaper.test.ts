/**
 * `leasehold run` SIGKILLed: everything its command started in its process group dies with it,
 * before the store-side expiry, grandchildren included (the parent-death signal alone reaches
 * only the command's own process).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, afterEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox, assertNoLeftovers, isAlive, readPid, sleeperScript, until } from './helpers.js';

const sb = new Sandbox('run-reaper');
const store = `sqlite:${sb.path('leases.db')}`;
const pids: number[] = [];
afterEach(() => assertNoLeftovers(pids.splice(0)));
after(() => sb.cleanup());

/** Every live (not zombie) process with its parent and process group, from /proc. */
function procs(): Array<{ pid: number; ppid: number; pgid: number }> {
  const rows: Array<{ pid: number; ppid: number; pgid: number }> = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${d}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // "pid (comm) state ppid pgrp ...": the command name may itself contain spaces and parentheses.
    const [state, ppid, pgid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (state === 'Z') continue;
    rows.push({ pid: Number(d), ppid: Number(ppid), pgid: Number(pgid) });
  }
  return rows;
}

/** The reapers watching process group `pgid` (found by their command line). */
function reapersOf(pgid: number): Array<{ pid: number; ppid: number; pgid: number }> {
  return procs().filter((p) => {
    try {
      const argv = readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').split('\0');
      return argv.includes('leasehold-reaper') && argv.includes(String(pgid));
    } catch {
      return false;
    }
  });
}

/** The process's command name (after an exec, the new program's), or undefined once it is gone. */
function commOf(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

function groupMembers(pgid: number): number[] {
  return procs()
    .filter((p) => p.pgid === pgid)
    .map((p) => p.pid);
}

async function status(name: string): Promise<{ state: string; token: string } | undefined> {
  const r = await sb.run(['status', name, '--json', '--store', store]);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as Array<{ state: string; token: string }>)[0];
}

void describe('leasehold run: the reaper', () => {
  void it('a SIGKILLed runner takes its command and all the grandchildren in its process group with it, before the store-side expiry', async (t) => {
    // A job runner in miniature: background children, a grandchild of a grandchild, and one
    // that ignores SIGTERM. None of them is the runner's own child.
    const job = sb.script(
      'job.sh',
      `echo $$ > "${sb.path('job.pid')}"
sleep 30 &
sh -c 'sleep 30 & exec sleep 30' &
( trap '' TERM; while :; do sleep 0.1; done ) &
touch "${sb.path('job.ready')}"
wait`,
    );
    // ttl 6s: the last renewal (every 2s) leaves at least 4s of store-side term after the kill.
    const runner = sb.start(['run', '--name', 'reaped', '--store', store, '--ttl', '6s', '--', job]);
    await until('the job started its children', () => sb.has('job.ready'));
    const pgid = readPid(sb, 'job');
    // Let the inner sh start its own child too: sleep, sh (now sleep) and its sleep, the loop.
    await until('the grandchildren started', () => groupMembers(pgid).filter((p) => p !== pgid).length >= 4);
    await until('the reaper watches the group', () => reapersOf(pgid).length > 0);
    const members = groupMembers(pgid);
    pids.push(...members);
    const grandchildren = procs().filter((p) => members.includes(p.pid) && p.ppid !== runner.pid);
    assert.ok(grandchildren.length >= 4, `the job has grandchildren in its group: ${JSON.stringify(procs().filter((p) => p.pgid === pgid))}`);
    const before = await status('reaped');
    assert.equal(before?.state, 'held');

    const t0 = performance.now();
    runner.proc.kill('SIGKILL');
    // Polled tightly so the measurement means something; the bound only stops a broken build hanging.
    while (members.some(isAlive) && performance.now() - t0 < 5000) await sleep(1);
    const lastDeath = performance.now() - t0;
    const survivors = members.filter(isAlive);
    assert.deepEqual(survivors, [], `processes of group ${pgid} outlived the runner`);
    // The loop forks a `sleep` every 100ms: one forked after the snapshot above is killed by the
    // same group kill but may still be dying at this instant (CI on Node 22 saw one). Polled with
    // the same bound; the term-still-live check below keeps it inside the store-side expiry.
    while (groupMembers(pgid).length > 0 && performance.now() - t0 < 5000) await sleep(1);
    assert.deepEqual(groupMembers(pgid), [], 'nothing at all is left in the group');
    // The store has not expired the term yet: they were all dead before anyone else could lead.
    const after = await status('reaped');
    assert.equal(after?.state, 'held', 'the store-side term is still live: every process died before the expiry');
    assert.equal(after.token, before.token);
    t.diagnostic(`runner SIGKILL -> last of ${members.length} processes dead: ${lastDeath.toFixed(1)}ms`);
    await runner.done;
  });

  void it('the reaper is the runner\'s child, not the command\'s; a runner that exits normally takes it along', async () => {
    const r = sb.start(['run', '--name', 'tidy', '--store', store, '--ttl', '3s', '--', sleeperScript(sb, 'tidy')]);
    await until('the command started', () => sb.has('tidy.pid'));
    const pid = readPid(sb, 'tidy');
    pids.push(pid);
    // The runner starts the reaper once the command's group exists, so the command can write its
    // pid file first (CI on Node 24 saw no reaper yet): wait for it, with the helper's bound.
    await until('the reaper watches the group', () => reapersOf(pid).length > 0);
    const watching = reapersOf(pid);
    pids.push(...watching.map((p) => p.pid));
    // The script forks `mv` twice (its pid file, then its token file) before `exec sleep 30`; the
    // pid file shows after the first, so wait for the exec itself before asking about children
    // (CI saw the second `mv` still running: a child the command did start).
    await until('the command has exec\'d its sleep', () => commOf(pid) === 'sleep');
    assert.equal(watching.length, 1, 'one reaper watches the group');
    assert.equal(watching[0]!.ppid, r.pid);
    assert.notEqual(watching[0]!.pgid, pid, 'it is not in the group it kills');
    // `exec sleep 30`: a command that never forked has no children; the reaper must not be one.
    assert.deepEqual(
      procs().filter((p) => p.ppid === pid),
      [],
      'the command has no child processes it did not start',
    );
    r.proc.kill('SIGTERM');
    const d = await r.done;
    assert.equal(d.code, 143, d.stderr);
    assert.deepEqual(groupMembers(pid), [], 'the process group is empty once the runner has exited');
    assert.deepEqual(reapersOf(pid), [], 'and its reaper is gone too');
  });

  void it('a reaper killed on its own is reported: the runner says what it no longer covers', async () => {
    const r = sb.start(['run', '--name', 'lonely', '--store', store, '--ttl', '3s', '--', sleeperScript(sb, 'lonely')]);
    await until('the command started', () => sb.has('lonely.pid'));
    const pid = readPid(sb, 'lonely');
    pids.push(pid);
    await until('the reaper watches the group', () => reapersOf(pid).length > 0);
    const [reaper] = reapersOf(pid);
    assert.ok(reaper);
    process.kill(reaper.pid, 'SIGKILL');
    await until('the runner noticed', () => /the reaper exited/.test(r.stderr));
    assert.match(r.stderr, /may outlive it \(the fence still holds\)/);
    r.proc.kill('SIGTERM');
    assert.equal((await r.done).code, 143);
  });
});
