/**
 * `--liveness session` beyond PostgreSQL (issue 32): `leasehold run` on SQLite (the runner's
 * process is the session), and `leasehold cron` taking the flag as run does, refused with exit 2
 * and one line where the store cannot see sessions.
 */
import assert from 'node:assert/strict';
import { after, afterEach, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, assertOneLineError, isAlive, readPid, sleeperScript } from './helpers.js';

const sb = new Sandbox('liveness-stores');
const pids: number[] = [];
afterEach(() => assertNoLeftovers(pids.splice(0)));
after(() => sb.cleanup());

const until = async (what: string, f: () => boolean, ms: number): Promise<void> => {
  const end = performance.now() + ms;
  while (!f()) {
    if (performance.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
};

void describe('--liveness session on other stores', () => {
  void it('run on SQLite: a SIGKILLed runner is replaced by a waiting runner long before its TTL, with a larger token', async (t) => {
    const store = `sqlite:${sb.path('leases.db')}`;
    const args = (tag: string): string[] => ['run', '--name', 'h32-cli-sqlite', '--store', store, '--ttl', '30s', '--liveness', 'session', '--quiet', '--', sleeperScript(sb, tag)];
    const a = sb.start(args('a'));
    await until('runner a starts its command', () => sb.has('a.token'), 20_000);
    pids.push(readPid(sb, 'a'));
    const b = sb.start(args('b'));
    await new Promise((r) => setTimeout(r, 1000)); // b is waiting
    assert.equal(sb.has('b.token'), false);
    const killedAt = performance.now();
    a.proc.kill('SIGKILL');
    // a renewed at most ttl/3 before the kill: its term had at least 20 s left, so b starting
    // within 10 s comes from the process's end, with room for a loaded host.
    await until('runner b starts its command', () => sb.has('b.token'), 10_000);
    t.diagnostic(`runner SIGKILL -> the waiting runner's command started: ${(performance.now() - killedAt).toFixed(0)}ms`);
    pids.push(readPid(sb, 'b'));
    assert.ok(BigInt(sb.read('b.token').trim()) > BigInt(sb.read('a.token').trim()));
    assert.equal(isAlive(readPid(sb, 'a')), false, "the dead runner's command was reaped");
    b.proc.kill('SIGTERM');
    await b.done;
  });

  void it('cron takes --liveness: refused with exit 2 and one line on Redis, and an unknown mode is a usage error', async () => {
    const redis = await sb.run(['cron', '--name', 'h32-cron', '--store', 'redis://127.0.0.1:6379?prefix=h32cron', '--every', '1m', '--liveness', 'session', '--', 'true']);
    assertOneLineError(redis, 2, /Redis scripts cannot see connections/);
    const bad = await sb.run(['cron', '--name', 'h32-cron', '--store', `sqlite:${sb.path('c.db')}`, '--every', '1m', '--liveness', 'socket', '--', 'true']);
    assertOneLineError(bad, 2, /not a liveness mode/);
  });
});
