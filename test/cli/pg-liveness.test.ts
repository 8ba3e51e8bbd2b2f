/**
 * `leasehold run --liveness session` on PostgreSQL (issue 32): a SIGKILLed runner's term ends
 * with its connection, so a waiting runner starts its command long before the TTL; the reaper
 * has already killed the dead runner's command. Refused, exit 2 with one line, where it cannot be had.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, assertOneLineError, dropSchema, freshSchema, isAlive, pgUrl, readPid, sleeperScript, until } from './helpers.js';

const sb = new Sandbox('pg-liveness');
const schema = freshSchema();
const store = pgUrl(schema);
const pids: number[] = [];
afterEach(() => assertNoLeftovers(pids.splice(0)));
after(async () => {
  sb.cleanup();
  await dropSchema(schema);
});

void describe('run --liveness session', () => {
  before(async () => {
    const r = await sb.run(['migrate', '--store', store]);
    assert.equal(r.code, 0, r.stderr);
  });

  void it('a SIGKILLed runner is replaced by a waiting runner long before its TTL, with a larger token', async (t) => {
    const args = (tag: string): string[] => ['run', '--name', 'h32-cli', '--store', store, '--ttl', '30s', '--liveness', 'session', '--quiet', '--', sleeperScript(sb, tag)];
    const a = sb.start(args('a'));
    await until('runner a starts its command', () => sb.has('a.token'), 20_000);
    pids.push(readPid(sb, 'a'));
    const b = sb.start(args('b'));
    await new Promise((r) => setTimeout(r, 1000)); // b is waiting on a's session
    assert.equal(sb.has('b.token'), false);
    const killedAt = performance.now();
    a.proc.kill('SIGKILL');
    // a renewed at most ttl/3 before the kill, so its term had at least 20 s left: b starting
    // within 10 s comes from the session's end, with room for a loaded host.
    await until('runner b starts its command', () => sb.has('b.token'), 10_000);
    t.diagnostic(`runner SIGKILL -> the waiting runner's command started: ${(performance.now() - killedAt).toFixed(0)}ms`);
    pids.push(readPid(sb, 'b'));
    assert.ok(BigInt(sb.read('b.token').trim()) > BigInt(sb.read('a.token').trim()));
    assert.equal(isAlive(readPid(sb, 'a')), false, "the dead runner's command was reaped");
    b.proc.kill('SIGTERM');
    await b.done;
  });

  void it('is refused with exit 2 and one line on a store that cannot see sessions, and for an unknown mode', async () => {
    const redis = await sb.run(['run', '--name', 'h32-cli', '--store', 'redis://127.0.0.1:6379?prefix=h32cli', '--liveness', 'session', '--', 'true']);
    assertOneLineError(redis, 2, /Redis scripts cannot see connections/);
    const bad = await sb.run(['run', '--name', 'h32-cli', '--store', store, '--liveness', 'socket', '--', 'true']);
    assertOneLineError(bad, 2, /not a liveness mode; use ttl \(the default\) or session/);
  });
});
