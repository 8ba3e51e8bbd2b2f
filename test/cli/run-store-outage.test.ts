/**
 * `leasehold run --wait` during a store outage: started while the store is unreachable, it
 * keeps trying (one line every few seconds) and runs the command once the store answers; it
 * exits 3 only when the wait ends. A missing schema is still exit 3 at once: waiting will not
 * create it. The store is the shared PostgreSQL (or Redis) behind a loopback proxy that
 * starts listening only after a delay, so the first attempts are refused like a down server's.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, afterEach, describe, it } from 'node:test';
import { Sandbox, assertNoLeftovers, dropSchema, freshSchema, pgUrl, until } from './helpers.js';
import { TcpProxy } from '../helpers/proxy.js';
import { selectedStores } from '../helpers/stores.js';

const sb = new Sandbox('run-outage');
const pids: number[] = [];
const schemas: string[] = [];
const proxies: TcpProxy[] = [];
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.stop()));
  assertNoLeftovers(pids.splice(0));
});
after(async () => {
  await Promise.all(schemas.map((s) => dropSchema(s)));
  sb.cleanup();
});

/** A loopback port nobody listens on (yet). */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const addr = s.address();
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return typeof addr === 'object' && addr !== null ? addr.port : 0;
}

/** The port a proxy to host:port will listen on once `up()` is called. */
async function laterProxy(host: string, port: number): Promise<{ port: number; up(): Promise<TcpProxy> }> {
  const p = await freePort();
  return {
    port: p,
    async up() {
      const proxy = await new TcpProxy(host, port).start(p);
      proxies.push(proxy);
      return proxy;
    },
  };
}

function viaPort(url: string, port: number): string {
  const u = new URL(url);
  u.port = String(port);
  return u.toString();
}

const stores = selectedStores();

void describe('leasehold run --wait: a store that is down at start', { skip: !stores.includes('postgres') && 'postgres not selected' }, () => {
  void it('keeps trying, says so every few seconds, and runs the command once PostgreSQL answers', async () => {
    const schema = freshSchema();
    schemas.push(schema);
    const direct = pgUrl(schema);
    const m = await sb.run(['migrate', '--store', direct]);
    assert.equal(m.code, 0, m.stderr);
    const later = await laterProxy('127.0.0.1', Number(new URL(direct).port || 5432));
    const r = sb.start(['run', '--name', 'outage-pg', '--store', viaPort(direct, later.port), '--ttl', '3s', '--wait', '30s', '--', 'sh', '-c', 'echo ran-$LEASEHOLD_TOKEN']);
    pids.push(r.pid);
    // Down until the runner has said so twice: a line at its first attempt and the next one 5 s
    // (STORE_WAIT_LINE_EVERY_MS) later, though it tries every 2 s at most. The outage is timed by
    // the runner's own lines, not by a sleep from its spawn: a fixed 8 s from spawn left a loaded
    // host's runner (slow to start) under 7 s of outage, with no attempt between its 5th and the
    // store's return, so it rightly printed one line. Bounds: its start on a loaded host (30 s),
    // then 5 s plus one retry of at most 2 s plus a refused connect (15 s is a hang detector).
    const said = (): string[] => r.stderr.split('\n').filter((l) => /unreachable/.test(l));
    await until('the runner says the store is unreachable', () => said().length >= 1, 30_000);
    await until('the runner says so a second time', () => said().length >= 2, 15_000);
    assert.equal(r.proc.exitCode, null, `run gave up during the outage: ${r.stderr}`);
    await later.up();
    const d = await r.done;
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, /ran-\d+/);
    const lines = d.stderr.split('\n').filter((l) => /unreachable/.test(l));
    // Not one per attempt: each line says how much of the 30 s wait is left, and consecutive lines
    // are at least 5 s apart (whole seconds once above 10 s left, so 4 after rounding).
    const left = lines.map((l) => Number(/retrying for (\d+(?:\.\d+)?)s more/.exec(l)?.[1] ?? NaN));
    assert.ok(left.every((x) => Number.isFinite(x)), `every line says what is left of the wait:\n${d.stderr}`);
    for (let i = 1; i < left.length; i++) assert.ok(left[i - 1]! - left[i]! >= 4, `lines ${i} and ${i + 1} are under 5 s apart:\n${d.stderr}`);
    assert.ok(lines.length <= 4, `one line per 5 s of the outage, got:\n${d.stderr}`);
    assert.match(d.stderr, /the store answers after/);
  });

  void it('exits 3 when the wait ends with the store still down, not before', async () => {
    const port = await freePort();
    const r = await sb.run(['run', '--name', 'outage-end', '--store', `postgres://postgres@127.0.0.1:${port}/test`, '--wait', '3s', '--', 'true']);
    assert.equal(r.code, 3, r.stderr);
    assert.ok(r.ms >= 2900, `exited after ${r.ms}ms, before the 3s wait ended`);
    assert.match(r.stderr, /still unreachable when the wait/);
  });

  void it('a missing schema is exit 3 at once, whatever --wait says', async () => {
    const schema = freshSchema();
    const r = await sb.run(['run', '--name', 'noschema', '--store', pgUrl(schema), '--wait', '60s', '--', 'true']);
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stderr, /leasehold migrate/);
    assert.ok(r.ms < 10_000, `took ${r.ms}ms`);
  });

  void it('an outage while waiting for a busy lease is retried until the lease frees', async () => {
    const schema = freshSchema();
    schemas.push(schema);
    const direct = pgUrl(schema);
    assert.equal((await sb.run(['migrate', '--store', direct])).code, 0);
    const proxy = await new TcpProxy('127.0.0.1', Number(new URL(direct).port || 5432)).start();
    proxies.push(proxy);
    const holder = sb.start(['run', '--name', 'busy-outage', '--store', direct, '--ttl', '3s', '--', 'sleep', '30']);
    pids.push(holder.pid);
    await until('the holder has the lease', () => /acquired token/.test(holder.stderr));
    const waiter = sb.start(['run', '--name', 'busy-outage', '--store', viaPort(direct, proxy.port), '--ttl', '3s', '--wait', '40s', '--', 'echo', 'second']);
    pids.push(waiter.pid);
    await until('the waiter sees the holder', () => /waiting: held by/.test(waiter.stderr));
    proxy.setMode('reset');
    await until('the waiter reports the outage', () => /unreachable/.test(waiter.stderr), 15_000);
    holder.proc.kill('SIGTERM');
    await holder.done;
    await sleep(1000);
    assert.equal(waiter.proc.exitCode, null, `the waiter gave up during the outage: ${waiter.stderr}`);
    proxy.setMode('pass');
    const d = await waiter.done;
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, /second/);
  });
});

void describe('leasehold run --wait: Redis down at start', { skip: !stores.includes('redis') && 'redis not selected' }, () => {
  void it('runs the command once Redis answers', async () => {
    const base = process.env['LEASEHOLD_TEST_REDIS_URL'] ?? 'redis://127.0.0.1:6379/0';
    const later = await laterProxy('127.0.0.1', Number(new URL(base).port || 6379));
    const r = sb.start(['run', '--name', `outage-redis-${Math.random().toString(36).slice(2, 8)}`, '--store', viaPort(base, later.port), '--wait', '30s', '--', 'echo', 'ran']);
    pids.push(r.pid);
    // Down until the runner has found it down (a fixed 3 s from spawn let a runner slow to start
    // on a loaded host find Redis already up); 30 s bounds its start there.
    await until('the runner says Redis is unreachable', () => /unreachable/.test(r.stderr), 30_000);
    assert.equal(r.proc.exitCode, null, `run gave up during the outage: ${r.stderr}`);
    await later.up();
    const d = await r.done;
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, /ran/);
    assert.match(d.stderr, /the store answers after/);
  });
});
