/**
 * A store that lost its history restarts tokens low, and the fence then refuses every write.
 * `migrate({ minToken })` / `leasehold migrate --min-token N` sets a floor: every later token,
 * for any name, is above it, nothing is ever lowered, and a live term below it stands down.
 * `leasehold doctor --fence-high-water N` says when a fence is above the store's next token.
 * On every store, with real processes for the CLI claims.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError, LeaseLostError, StoreUnavailableError } from '../../src/core/errors.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';
import { Sandbox, assertNoLeftovers } from './helpers.js';
import pg from 'pg';
import { fencedTransaction } from '../../src/backends/postgres/fence.js';
import { fencedWriteSync } from '../../src/backends/sqlite/fence.js';
import type { SqliteStore } from '../../src/backends/sqlite/store.js';

const pools: pg.Pool[] = [];
function pgPool(url: string): pg.Pool {
  const u = new URL(url);
  u.searchParams.delete('schema');
  const pool = new pg.Pool({ connectionString: u.toString(), max: 1 });
  pools.push(pool);
  return pool;
}

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const contend = (name: string) => [{ name, holder: 'h-floor', ttlMs: 5000, expect: null, nextNonce: randomBytes(8).toString('base64url') }];

async function acquireToken(t: TestStore['store'], name: string): Promise<bigint> {
  const [r] = await t.claim(contend(name));
  assert.equal(r?.outcome, 'acquired', `acquired ${name}: ${JSON.stringify(r, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`);
  const token = (r as { token: bigint }).token;
  await t.revoke(name, 'test: free it again');
  return token;
}

/** Redis tokens are microseconds since the epoch: a floor only matters above that. */
const floorFor = (kind: string, above: bigint): bigint => (kind === 'redis' ? BigInt(Date.now()) * 1000n + 10n ** 12n : above + 1000n);

const sb = new Sandbox('migrate-min-token');
after(() => sb.cleanup());

for (const kind of selectedStores()) {
  void describe(`migrate --min-token on ${kind}`, () => {
    let t: TestStore;
    before(async () => {
      t = await makeTestStore(kind);
    });
    after(async () => {
      await t?.cleanup();
    });
    afterEach(() => assertNoLeftovers());

    void it('every later token, for known and never-seen names, is above the floor; nothing is lowered', async () => {
      // Another instance opened before the floor exists: it must not issue tokens under the old floor.
      const stale = await t.open();
      const known = uniq('known');
      const first = await acquireToken(t.store, known);
      const floor = floorFor(kind, first);
      const r = await t.store.migrate({ minToken: floor });
      assert.deepEqual(r.tokenFloor, { floor, raised: true, endedTerms: 0 });

      assert.ok((await acquireToken(t.store, uniq('never-seen'))) > floor, 'a name never seen gets a token above the floor');
      const again = await acquireToken(t.store, known);
      assert.ok(again > floor && again > first, 'a known name gets a token above the floor');
      // The stale instance, through the engine (which retries a retryable answer).
      const lh = new Leasehold({ store: stale });
      try {
        const lease = lh.lease(uniq('stale'), { ttl: '5s' });
        const term = await lease.acquire({ wait: '5s' });
        assert.ok(term.token > floor, `a store instance opened before the floor issues ${term.token} > ${floor}`);
        await lease.release();
      } finally {
        await lh.close();
        await stale.close();
      }

      const lower = await t.store.migrate({ minToken: floor - 500n });
      assert.deepEqual(lower.tokenFloor, { floor, raised: false, endedTerms: 0 }, 'a lower floor changes nothing');
      const later = await acquireToken(t.store, known);
      assert.ok(later > again, 'tokens keep increasing after a lower --min-token');
      assert.ok((await t.store.nextToken!()) > floor);
      assert.ok((await t.store.nextToken!({ name: known })) > later);
    });

    void it('a floor that is not a non-negative bigint in range is a ConfigError', async () => {
      await assert.rejects(t.store.migrate({ minToken: -1n }), ConfigError);
      await assert.rejects(t.store.migrate({ minToken: 5 as unknown as bigint }), ConfigError);
      await assert.rejects(t.store.migrate({ minToken: 2n ** 63n }), ConfigError);
      if (kind === 'redis') await assert.rejects(t.store.migrate({ minToken: 2n ** 53n }), /2\^53|at most/);
    });

    if (kind !== 'redis') {
      void it('a live term at or below a new floor stands down at once', async () => {
        const lh = new Leasehold({ store: await t.open() });
        try {
          const lease = lh.lease(uniq('live'), { ttl: '30s' });
          const term = await lease.acquire({ wait: false });
          await new Promise((r) => setTimeout(r, 300)); // the holder's freed listener comes up
          const lost = new Promise<LeaseLostError>((resolve) => term.signal.addEventListener('abort', () => resolve(term.signal.reason as LeaseLostError), { once: true }));
          const next = (await t.store.nextToken!()) + 10n;
          const r = await t.store.migrate({ minToken: next });
          assert.equal(r.tokenFloor?.raised, true);
          assert.ok(r.tokenFloor!.endedTerms >= 1, `the live term was ended: ${r.tokenFloor?.endedTerms}`);
          // Well before the first scheduled renewal (10s): the store told the holder.
          const bound = lease.timing.renewMs - 1500;
          const err = await Promise.race([lost, new Promise<'timeout'>((res) => setTimeout(() => res('timeout'), bound).unref())]);
          assert.notEqual(err, 'timeout', 'the holder kept believing it led under a token below the floor');
          assert.ok(err instanceof LeaseLostError);
          assert.equal(lease.isLeader, false);
          const [row] = await t.store.list({ name: lease.name });
          assert.ok(row === undefined || row.state !== 'held' || row.token > next);
        } finally {
          await lh.close();
        }
      });
    }

    void it('CLI: bad --min-token exits 2; --json says what was done; doctor flags a fence above the next token', async () => {
      for (const bad of ['abc', '1e9', '-5', '12.5', '']) {
        const r = await sb.run(['migrate', '--store', t.url, `--min-token=${bad}`]);
        assert.equal(r.code, 2, `--min-token=${bad}: ${r.stderr}`);
        assert.match(r.stderr, /--min-token/);
      }
      const mark = 5_000_000_000_000_000n; // above Redis's microsecond tokens, below 2^53
      const before = await sb.run(['doctor', '--json', '--store', t.url, '--fence-high-water', mark.toString()]);
      assert.equal(before.code, 1, before.stdout + before.stderr);
      const check = (JSON.parse(before.stdout) as { checks: { check: string; status: string; detail: string }[] }).checks.find((c) => c.check === 'token-floor');
      assert.equal(check?.status, 'fail', JSON.stringify(check));
      assert.match(check!.detail, new RegExp(`migrate --min-token ${mark}`));

      const m = await sb.run(['migrate', '--json', '--store', t.url, '--min-token', mark.toString()]);
      assert.equal(m.code, 0, m.stderr);
      const j = JSON.parse(m.stdout) as { kind: string; tokenFloor: { requested: string; floor: string; raised: boolean; endedTerms: number } };
      assert.equal(j.kind, kind);
      assert.deepEqual({ ...j.tokenFloor, endedTerms: 0 }, { requested: mark.toString(), floor: mark.toString(), raised: true, endedTerms: 0 });

      const text = await sb.run(['migrate', '--store', t.url, '--min-token', '7']);
      assert.equal(text.code, 0, text.stderr);
      assert.match(text.stdout, new RegExp(`token floor already at ${mark}`));

      const afterwards = await sb.run(['doctor', '--json', '--store', t.url, '--fence-high-water', mark.toString()]);
      const ok = (JSON.parse(afterwards.stdout) as { checks: { check: string; status: string }[] }).checks.find((c) => c.check === 'token-floor');
      assert.equal(ok?.status, 'ok', afterwards.stdout);
      // etcd: an instance that cached the old floor gets one retryable answer, then the new floor.
      const name = uniq('after-cli');
      const [r] = await t.store.claim(contend(name)).catch((e: unknown) => {
        assert.ok(e instanceof StoreUnavailableError && kind === 'etcd', String(e));
        return t.store.claim(contend(name));
      });
      assert.ok(r?.outcome === 'acquired' && r.token > mark);
    });

    if (kind === 'postgres' || kind === 'sqlite') {
      void it('doctor reads the fence table beside the leases: a mark above the next token fails with the remedy', async () => {
        const f = await makeTestStore(kind);
        try {
          const mark = 987_654_321n;
          // A resource fenced by an earlier life of this store: its mark survived, the leases did not.
          if (kind === 'postgres') {
            await fencedTransaction(pgPool(f.url), { resource: 'invoices', token: mark, table: `${new URL(f.url).searchParams.get('schema')!}.fences` }, () => Promise.resolve());
          } else {
            fencedWriteSync((f.store as SqliteStore).database, { resource: 'invoices', token: mark }, () => undefined);
          }
          const d = await sb.run(['doctor', '--json', '--store', f.url]);
          assert.equal(d.code, 1, d.stdout + d.stderr);
          const c = (JSON.parse(d.stdout) as { checks: { check: string; status: string; detail: string }[] }).checks.find((x) => x.check === 'token-floor');
          assert.equal(c?.status, 'fail', d.stdout);
          assert.match(c!.detail, /fence "invoices" has accepted token 987654321/);
          assert.match(c!.detail, /migrate --min-token 987654321/);
          const m = await sb.run(['migrate', '--store', f.url, '--min-token', mark.toString()]);
          assert.equal(m.code, 0, m.stderr);
          const ok = await sb.run(['doctor', '--json', '--store', f.url]);
          assert.equal((JSON.parse(ok.stdout) as { checks: { check: string; status: string }[] }).checks.find((x) => x.check === 'token-floor')?.status, 'ok', ok.stdout);
        } finally {
          await pools.splice(0).reduce((p, pool) => p.then(() => pool.end()), Promise.resolve());
          await f.cleanup();
        }
      });
    }
  });
}
