import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEtcdStore, type EtcdStore } from '../../src/backends/etcd/index.js';
import type { ClaimRequest, LeaseStore } from '../../src/backends/store.js';
import { createSqliteFenceTable, fencedWriteSync } from '../../src/fence/index.js';
import { loadSqliteDriver } from '../../src/backends/sqlite/driver.js';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { openStore } from '../../src/backends/index.js';
import { TEST_PG_URL } from '../helpers/stores.js';
import { BIN } from '../cli/helpers.js';
import { ETCDCTL_BIN, ETCD_BIN, throwawayEtcd, type ThrowawayEtcd } from '../helpers/throwaway-etcd.js';

// Issue 28 row 5 and its class: a store restored from an old backup must not hand a new term a
// token it already issued (a fence accepts a token equal to its high-water mark, so a reissued
// token is accepted for a second holder). Each store either refuses to grant until
// `migrate --min-token`, or derives tokens a restore cannot repeat.

const missing = ETCD_BIN === undefined || ETCDCTL_BIN === undefined ? 'etcd and etcdctl are not installed (apt-get install etcd-server etcd-client)' : undefined;
if (missing !== undefined) console.log(`# restore-tokens (etcd): skipped: ${missing}`);

let nonces = 0;
const contend = (name: string, holder: string): ClaimRequest => ({ name, holder, ttlMs: 10_000, expect: null, nextNonce: `n${++nonces}` });

/** A resource fenced by a SQLite fence table, recording which holder each accepted token came from. */
function resource() {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-fence-'));
  // The driver leasehold picks for this Node (node:sqlite on 22 and 24, where the repository's
  // better-sqlite3 build does not load).
  const db = new (loadSqliteDriver())(join(dir, 'resource.db'));
  createSqliteFenceTable(db);
  const accepted = new Map<bigint, string[]>();
  return {
    /** True when the fence let `holder` write with `token`. */
    write(token: bigint, holder: string): boolean {
      try {
        fencedWriteSync(db, { resource: 'invoices', token }, () => undefined);
      } catch (err) {
        if ((err as { code?: string }).code === 'FENCED') return false;
        throw err;
      }
      accepted.set(token, [...(accepted.get(token) ?? []), holder]);
      return true;
    },
    /** Tokens the fence accepted for more than one holder. */
    twice: (): string[] => [...accepted].filter(([, hs]) => new Set(hs).size > 1).map(([t, hs]) => `${t} (${hs.join(', ')})`),
    highWater: (): bigint => BigInt((db.prepare('SELECT token FROM leasehold_fences WHERE resource = ?').get('invoices') as { token: number } | undefined)?.token ?? 0),
    close() {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
    db,
  };
}

/** One term per holder: acquire, write through the fence, release. Returns the token. */
async function term(store: LeaseStore, holder: string, fence: ReturnType<typeof resource>, issued: bigint[]): Promise<bigint> {
  const req = contend('job', holder);
  const [r] = await store.claim([req]);
  assert.equal(r?.outcome, 'acquired', `${holder}: ${JSON.stringify(r, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}`);
  issued.push(r.token!);
  fence.write(r.token!, holder);
  assert.ok(await store.release({ name: 'job', holder, expect: [req.nextNonce] }));
  return r.token!;
}

/**
 * After a restore: new terms until one is refused with the restore error, up to `max`. Returns
 * the error (undefined if none was refused) and the tokens new terms got.
 */
async function termsAfterRestore(store: LeaseStore, fence: ReturnType<typeof resource>, max: number): Promise<{ refused?: Error; tokens: bigint[] }> {
  const tokens: bigint[] = [];
  for (let i = 0; i < max; i++) {
    try {
      await term(store, `after-${i}`, fence, tokens);
    } catch (err) {
      return { refused: err as Error, tokens };
    }
  }
  return { tokens };
}

/** `leasehold doctor --json` as a subprocess; the named check. */
function doctor(url: string, highWater: bigint): { code: number | null; check: { status: string; detail: string; minToken?: string } | undefined } {
  const r = spawnSync(process.execPath, [BIN, 'doctor', '--json', '--store', url, '--fence-high-water', highWater.toString()], { encoding: 'utf8' });
  const checks = (JSON.parse(r.stdout) as { checks: { check: string; status: string; detail: string; minToken?: string }[] }).checks;
  return { code: r.status, check: checks.find((c) => c.check === 'restore') };
}

const open = (e: ThrowawayEtcd, prefix: string): Promise<EtcdStore> => createEtcdStore({ url: e.url, prefix, callTimeoutMs: 3000 });

void describe('restored stores: etcd', { skip: missing }, () => {
  let etcd: ThrowawayEtcd;
  before(async () => {
    etcd = await throwawayEtcd();
  });
  after(async () => {
    await etcd[Symbol.asyncDispose]();
  });

  void it('after `etcdctl snapshot restore` from an old snapshot, a fresh process gets no token twice: grants are refused until migrate --min-token', async () => {
    const fence = resource();
    try {
      const issued: bigint[] = [];
      let store = await open(etcd, 'snapshot');
      await store.migrate();
      // A snapshot of a store in use: its revision well above the few raft entries a restored
      // member starts with (README: an almost empty etcd is not caught).
      for (let i = 0; i < 10; i++) await term(store, `early-${i}`, fence, issued);
      const snap = etcd.snapshot('old.db');
      for (let i = 2; i <= 5; i++) await term(store, `before-${i}`, fence, issued);
      await store.close();
      await etcd.stop();
      await etcd.start(etcd.restore(snap, 'restored-1'));

      // A fresh process: it remembers nothing from before the restore.
      store = await open(etcd, 'snapshot');
      const { refused, tokens } = await termsAfterRestore(store, fence, 12);
      const reissued = tokens.filter((t) => issued.includes(t));
      assert.deepEqual(reissued, [], `new terms after the restore got tokens already issued before it (issued ${issued.join(', ')}; after: ${tokens.join(', ')})`);
      assert.deepEqual(fence.twice(), [], 'the fence accepted a token for two holders');
      assert.equal(refused?.name, 'StoreRestoredError', `grants after the restore: ${String(refused)}`);
      assert.match(refused.message, /leasehold migrate --store URL --min-token N/);

      // doctor says so, and which N to use (the high-water mark passed to it).
      const hw = fence.highWater();
      assert.equal(hw, issued.at(-1));
      const url = `${etcd.url}?prefix=snapshot`;
      const before = doctor(url, hw);
      assert.equal(before.code, 1);
      assert.equal(before.check?.status, 'fail', JSON.stringify(before.check));
      assert.equal(before.check.minToken, hw.toString());
      assert.match(before.check.detail, new RegExp(`leasehold migrate --min-token ${hw}\``));

      // The operator raises the floor to the fence's high-water mark: terms resume above it.
      const m = await store.migrate({ minToken: hw });
      assert.equal(m.tokenFloor?.floor, hw);
      const resumed: bigint[] = [];
      await term(store, 'resumed', fence, resumed);
      assert.ok(resumed[0]! > hw, `token ${resumed[0]} is above the high-water mark ${hw}`);
      assert.deepEqual(fence.twice(), []);
      assert.equal(doctor(url, hw).check?.status, 'ok');

      // A second restore, from a snapshot taken after that migrate, is caught again.
      const snap2 = etcd.snapshot('after-migrate.db');
      await term(store, 'after-snap2', fence, resumed);
      await store.close();
      await etcd.stop();
      await etcd.start(etcd.restore(snap2, 'restored-2'));
      store = await open(etcd, 'snapshot');
      const again = await termsAfterRestore(store, fence, 4);
      assert.deepEqual(again.tokens.filter((t) => resumed.includes(t) || issued.includes(t)), []);
      assert.equal(again.refused?.name, 'StoreRestoredError');
      await store.migrate({ minToken: fence.highWater() });
      await term(store, 'resumed-2', fence, resumed);
      assert.deepEqual(fence.twice(), []);
      await store.close();
    } finally {
      fence.close();
    }
  });

  void it('a process whose watch was open across a snapshot restore checks again at its next grant, though it saw no lower revision', async () => {
    const fence = resource();
    try {
      const issued: bigint[] = [];
      const a = await open(etcd, 'watching');
      await a.migrate({ minToken: fence.highWater() });
      const stopWatch = await a.watchFreed(() => undefined);
      for (let i = 0; i < 10; i++) await term(a, `a-${i}`, fence, issued);
      // The snapshot is taken right after A's last answer, so after the restore A never sees a
      // revision below one it saw; B's terms after the snapshot are what a restore would repeat.
      const snap = etcd.snapshot('watching.db');
      const b = await open(etcd, 'watching');
      for (let i = 0; i < 3; i++) await term(b, `b-${i}`, fence, issued);
      await b.close();
      await etcd.stop();
      await etcd.start(etcd.restore(snap, 'watching-restored'));

      const { refused, tokens } = await termsAfterRestore(a, fence, 6);
      assert.deepEqual(tokens.filter((t) => issued.includes(t)), [], `reissued (before: ${issued.join(', ')}; after: ${tokens.join(', ')})`);
      assert.deepEqual(fence.twice(), []);
      assert.equal(refused?.name, 'StoreRestoredError', String(refused));
      await stopWatch();
      await a.close();
    } finally {
      fence.close();
    }
  });

  void it('a process that was running across a restore of a copied data dir stops granting, and leaves a mark that stops fresh processes too', async () => {
    const fence = resource();
    try {
      const issued: bigint[] = [];
      const running = await open(etcd, 'copy');
      await running.migrate({ minToken: fence.highWater() });
      await term(running, 'before-1', fence, issued);
      await etcd.stop();
      const copy = etcd.copyData('copy');
      await etcd.start();
      for (let i = 2; i <= 5; i++) await term(running, `before-${i}`, fence, issued);
      await etcd.stop();
      await etcd.start(copy);

      // The file-level copy brought back the raft log as well: only a process that saw a later
      // revision can tell. This one did.
      const { refused, tokens } = await termsAfterRestore(running, fence, 12);
      assert.deepEqual(tokens.filter((t) => issued.includes(t)), [], `reissued after the restore (issued ${issued.join(', ')}; after: ${tokens.join(', ')})`);
      assert.equal(refused?.name, 'StoreRestoredError', String(refused));
      await running.close();

      const fresh = await open(etcd, 'copy');
      const second = await termsAfterRestore(fresh, fence, 12);
      assert.deepEqual(second.tokens.filter((t) => issued.includes(t)), []);
      assert.equal(second.refused?.name, 'StoreRestoredError', String(second.refused));
      await fresh.migrate({ minToken: fence.highWater() });
      await term(fresh, 'resumed', fence, issued);
      assert.deepEqual(fence.twice(), []);
      await fresh.close();
    } finally {
      fence.close();
    }
  });
});

/** A redis-server of the test's own (free port, temp dir, RDB only) that it may stop and restore. */
async function throwawayRedis(): Promise<{ url: string; save(): string; restart(rdb?: string): Promise<void>; [Symbol.asyncDispose](): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-redis-restore-'));
  const port = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
  let child: ChildProcess | undefined;
  const cli = (...args: string[]): string => {
    const r = spawnSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`redis-cli ${args.join(' ')}: ${r.stderr}`);
    return r.stdout.trim();
  };
  const start = async (): Promise<void> => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--dbfilename', 'dump.rdb'], { stdio: 'ignore' });
    for (let i = 0; i < 100; i++) {
      if (spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8' }).stdout.trim() === 'PONG') return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error('redis-server did not start');
  };
  const stop = async (): Promise<void> => {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM');
    await exited;
  };
  await start();
  let saves = 0;
  return {
    url: `redis://127.0.0.1:${port}/0?prefix=restore`,
    save() {
      cli('SAVE');
      const copy = join(dir, `old-${++saves}.rdb`);
      copyFileSync(join(dir, 'dump.rdb'), copy);
      return copy;
    },
    async restart(rdb?: string) {
      // --save '' and SIGTERM: the server writes no dump of its own on the way down.
      await stop();
      if (rdb !== undefined) copyFileSync(rdb, join(dir, 'dump.rdb'));
      await start();
    },
    async [Symbol.asyncDispose]() {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

void describe('restored stores: Redis (an RDB saved earlier)', () => {
  void it('tokens are TIME-derived: a Redis restarted from an old dump still issues larger tokens, with no step by the operator', async () => {
    await using redis = await throwawayRedis();
    const fence = resource();
    try {
      const issued: bigint[] = [];
      let store = await openStore(redis.url);
      await store.migrate();
      for (let i = 0; i < 3; i++) await term(store, `early-${i}`, fence, issued);
      const rdb = redis.save();
      for (let i = 0; i < 5; i++) await term(store, `late-${i}`, fence, issued);
      await store.close();
      await redis.restart(rdb);
      store = await openStore(redis.url);
      const after: bigint[] = [];
      for (let i = 0; i < 5; i++) await term(store, `after-${i}`, fence, after);
      const top = issued.reduce((a, b) => (b > a ? b : a));
      assert.ok(after.every((t) => t > top), `after the restore: ${after.join(', ')}; issued before: up to ${top}`);
      assert.deepEqual(fence.twice(), []);
      await store.close();
    } finally {
      fence.close();
    }
  });
});

void describe('restored stores: Redis with a token floor above its clock', () => {
  // A floor set with migrate --min-token above TIME in microseconds (a clock that went back, a
  // fence fed by another store) used to turn tokens into a counter from the floor up, which an
  // old dump rewinds. The floor now moves with the clock from when it was set.
  void it('a Redis restarted from a dump saved after a floor above the clock still issues larger tokens', async () => {
    await using redis = await throwawayRedis();
    const fence = resource();
    try {
      const issued: bigint[] = [];
      let store = await openStore(redis.url);
      const floor = 5_000_000_000_000_000n; // above TIME in microseconds (~1.8e15), below 2^53
      await store.migrate({ minToken: floor });
      for (let i = 0; i < 3; i++) await term(store, `early-${i}`, fence, issued);
      const rdb = redis.save();
      for (let i = 0; i < 5; i++) await term(store, `late-${i}`, fence, issued);
      await store.close();
      await redis.restart(rdb);
      store = await openStore(redis.url);
      const { tokens } = await termsAfterRestore(store, fence, 5);
      const top = issued.reduce((a, b) => (b > a ? b : a));
      assert.deepEqual(tokens.filter((t) => issued.includes(t)), [], `reissued (before: ${issued.join(', ')}; after: ${tokens.join(', ')})`);
      assert.deepEqual(fence.twice(), []);
      assert.ok(tokens.length === 5 && tokens.every((t) => t > top), `after the restore: ${tokens.join(', ')}; issued before: up to ${top}`);
      await store.close();
    } finally {
      fence.close();
    }
  });
});

void describe('restored stores: SQLite (a copy of an old file) and PostgreSQL (a dump)', () => {
  // Neither can tell a restored database from a live one (the fence table beside the leases comes
  // back with it; a resource elsewhere does not): the operator raises the floor before any process
  // starts on it. These prove the documented procedure.
  void it('SQLite: an old copy of the file reissues tokens; doctor --fence-high-water fails until migrate --min-token, then tokens are above every earlier one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'leasehold-sqlite-restore-'));
    const fence = resource();
    try {
      const file = join(dir, 'leases.db');
      const url = `sqlite:${file}`;
      const issued: bigint[] = [];
      let store = await openStore(url);
      await store.migrate();
      for (let i = 0; i < 3; i++) await term(store, `early-${i}`, fence, issued);
      await store.close();
      copyFileSync(file, join(dir, 'old.db'));
      store = await openStore(url);
      for (let i = 0; i < 3; i++) await term(store, `late-${i}`, fence, issued);
      await store.close();
      for (const f of ['', '-wal', '-shm']) rmSync(file + f, { force: true });
      copyFileSync(join(dir, 'old.db'), file);

      const hw = fence.highWater();
      const before = spawnSync(process.execPath, [BIN, 'doctor', '--json', '--store', url, '--fence-high-water', hw.toString()], { encoding: 'utf8' });
      const floor = (JSON.parse(before.stdout) as { checks: { check: string; status: string }[] }).checks.find((c) => c.check === 'token-floor');
      assert.equal(floor?.status, 'fail', before.stdout);
      store = await openStore(url);
      await store.migrate({ minToken: hw });
      const after: bigint[] = [];
      for (let i = 0; i < 3; i++) await term(store, `after-${i}`, fence, after);
      assert.ok(after.every((t) => t > hw), `after: ${after.join(', ')}; high-water ${hw}`);
      assert.deepEqual(fence.twice(), []);
      await store.close();
    } finally {
      fence.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  void it('PostgreSQL: a schema restored from pg_dump reissues tokens; doctor --fence-high-water fails until migrate --min-token', async () => {
    const schema = `restore_${randomBytes(4).toString('hex')}`;
    const url = `${TEST_PG_URL}?schema=${schema}`;
    const psql = (sql: string, input?: string): void => {
      const r = spawnSync('psql', [TEST_PG_URL, '-v', 'ON_ERROR_STOP=1', '-q', ...(input === undefined ? ['-c', sql] : [])], { encoding: 'utf8', input });
      if (r.status !== 0) throw new Error(`psql: ${r.stderr}`);
    };
    const fence = resource();
    try {
      const issued: bigint[] = [];
      let store = await openStore(url);
      await store.migrate();
      for (let i = 0; i < 3; i++) await term(store, `early-${i}`, fence, issued);
      const dump = spawnSync('pg_dump', [TEST_PG_URL, '-n', schema], { encoding: 'utf8', maxBuffer: 64 << 20 });
      assert.equal(dump.status, 0, dump.stderr);
      for (let i = 0; i < 3; i++) await term(store, `late-${i}`, fence, issued);
      await store.close();
      psql(`DROP SCHEMA ${schema} CASCADE`);
      psql('', dump.stdout);

      const hw = fence.highWater();
      const before = spawnSync(process.execPath, [BIN, 'doctor', '--json', '--store', url, '--fence-high-water', hw.toString()], { encoding: 'utf8' });
      const floor = (JSON.parse(before.stdout) as { checks: { check: string; status: string }[] }).checks.find((c) => c.check === 'token-floor');
      assert.equal(floor?.status, 'fail', before.stdout);
      store = await openStore(url);
      await store.migrate({ minToken: hw });
      const after: bigint[] = [];
      for (let i = 0; i < 3; i++) await term(store, `after-${i}`, fence, after);
      assert.ok(after.every((t) => t > hw), `after: ${after.join(', ')}; high-water ${hw}`);
      assert.deepEqual(fence.twice(), []);
      await store.close();
    } finally {
      fence.close();
      psql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    }
  });
});
