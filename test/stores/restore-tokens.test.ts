import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createEtcdStore, type EtcdStore } from '../../src/backends/etcd/index.js';
import type { ClaimRequest } from '../../src/backends/store.js';
import { createSqliteFenceTable, fencedWriteSync } from '../../src/fence/index.js';
import { spawnSync } from 'node:child_process';
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
  const db = new Database(join(dir, 'resource.db'));
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
async function term(store: EtcdStore, holder: string, fence: ReturnType<typeof resource>, issued: bigint[]): Promise<bigint> {
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
async function termsAfterRestore(store: EtcdStore, fence: ReturnType<typeof resource>, max: number): Promise<{ refused?: Error; tokens: bigint[] }> {
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
