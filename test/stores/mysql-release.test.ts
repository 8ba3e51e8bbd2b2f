/**
 * Batched releases on MySQL (releaseMany, src/core/release-batcher.ts), on the real MariaDB: a
 * process closing with many leases sends one call per batch instead of one per lease, a batch
 * release cannot deadlock against a batch claim (both lock rows in name order), and the named
 * locks followers wait on (../../src/backends/mysql/freed.ts) are let go after the commit. The
 * answers themselves are the conformance suite's ('a batch release ... answers each row as
 * release would').
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Leasehold } from '../../src/core/leasehold.js';
import type { MysqlStore } from '../../src/backends/mysql/store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const skip = selectedStores().includes('mysql') ? false : 'mysql not selected (LEASEHOLD_TEST_STORES)';
const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

interface Admin {
  query(sql: string, v?: unknown[]): Promise<[Record<string, unknown>[]]>;
  end(): Promise<void>;
}

void describe('MySQL store: batched releases', { skip }, () => {
  let t: TestStore;
  let admin: Admin;
  before(async () => {
    t = await makeTestStore('mysql');
    const mysql = createRequire(import.meta.url)('mysql2/promise') as { createConnection(uri: string): Promise<Admin> };
    admin = await mysql.createConnection(t.url.replace(/^mariadb:/, 'mysql:').replace(/\?.*$/, ''));
  });
  after(async () => {
    await admin?.end();
    await t?.cleanup();
  });

  void it('closing a process that holds 1,000 leases sends one releaseMany per batch and no single release; every lease is free after', async () => {
    const store = (await t.open()) as MysqlStore;
    const lh = new Leasehold({ store });
    const names = Array.from({ length: 1000 }, () => uniq('close'));
    try {
      await Promise.all(names.map((n) => lh.lease(n, { ttl: 30_000 }).acquire()));
      let single = 0;
      const batches: number[] = [];
      const release = store.release.bind(store);
      const releaseMany = store.releaseMany.bind(store);
      store.release = (req, o) => (single++, release(req, o));
      // What each batch answered, for the message if a lease is left held (CI once found all 1,000
      // held after close, and could not say why).
      const answered: string[] = [];
      store.releaseMany = (reqs, o) => {
        batches.push(reqs.length);
        return releaseMany(reqs, o).then(
          (a) => (answered.push(`${a.filter((x) => x).length} of ${a.length} released`), a),
          (e: unknown) => {
            answered.push(`failed: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
            throw e;
          },
        );
      };
      await lh.close();
      // The batcher cuts batches at the store's maxClaimBatch (2,000): 1,000 is one.
      assert.deepEqual(batches, [1000], 'one batch of 1,000');
      assert.equal(single, 0, 'no release one by one');
      const held = (await t.store.list()).filter((r) => names.includes(r.name) && r.holder !== null);
      assert.equal(held.length, 0, `every lease is free (releaseMany answered: ${answered.join('; ') || 'nothing'})`);
      const events = (await t.store.history({ name: names[0]! })).map((h) => h.event);
      assert.deepEqual(events, ['acquired', 'released']);
    } finally {
      await store.close();
    }
  });

  void it('a batch release in reverse name order races a batch claim of the same rows: no deadlock to retry (both lock in name order)', async () => {
    // A contender's claim locks each row it asks for in name order (../../src/backends/mysql/claim.ts).
    // A release batch that locked in the order it was sent would hold a row the claim waits for
    // while it waits for one the claim holds: InnoDB kills one of the two (1213), which the
    // store retries and counts in lockRetries. Locked in name order, the two take turns.
    const holder = (await t.open()) as MysqlStore;
    const contender = (await t.open()) as MysqlStore;
    const names = Array.from({ length: 40 }, (_, i) => `order-${uniq(String(i).padStart(2, '0'))}`).sort();
    // Distinct names per round: the rows are created by the first claim, so each round starts alike.
    try {
      for (let round = 0; round < 10; round++) {
        const held = await holder.claim(names.map((name) => ({ name, holder: 'A', ttlMs: 30_000, expect: null, nextNonce: `a${round}-${name}` })));
        assert.ok(held.every((h) => h.outcome === 'acquired'), `round ${round}: A holds every lease`);
        const [released, claimed] = await Promise.all([
          holder.releaseMany([...names].reverse().map((name) => ({ name, holder: 'A', expect: [`a${round}-${name}`] }))),
          contender.claim(names.map((name) => ({ name, holder: 'B', ttlMs: 30_000, expect: null, nextNonce: `b${round}-${name}` }))),
        ]);
        assert.ok(released.every((r) => r), `round ${round}: every release landed`);
        assert.equal(claimed.length, names.length);
        // Whatever B got (busy before the release, acquired after), free the rows for the next round.
        const mine = claimed.filter((c) => c.outcome === 'acquired').map((c) => ({ name: c.name, holder: 'B', expect: [`b${round}-${c.name}`] }));
        if (mine.length > 0) assert.ok((await contender.releaseMany(mine)).every((r) => r), `round ${round}: B released what it got`);
      }
      assert.equal(holder.lockRetries + contender.lockRetries, 0, `deadlocks or lock waits retried: ${holder.lockRetries + contender.lockRetries}`);
    } finally {
      await holder.close();
      await contender.close();
    }
  });

  void it('the named locks of the released leases are let go before releaseMany answers (after its commit): a waiting follower is woken', async () => {
    const store = (await t.open()) as MysqlStore;
    const names = Array.from({ length: 3 }, () => uniq('bell'));
    const db = new URL(t.url).pathname.slice(1);
    const { createHash } = await import('node:crypto');
    // The lock name of ../../src/backends/mysql/freed.ts (lockName): the test must see the same locks a follower waits on.
    const lockOf = (n: string): string => `leasehold:${createHash('sha256').update(db).update('\0').update(n).digest('base64url').slice(0, 40)}`;
    const used = async (): Promise<number> => {
      const [rows] = await admin.query(`SELECT ${names.map(() => '(IS_USED_LOCK(?) IS NOT NULL)').join(' + ')} AS n`, names.map(lockOf));
      return Number(rows[0]!['n']);
    };
    const until = async (want: (n: number) => boolean): Promise<number> => {
      let n = await used();
      // Bound: the holder takes its locks right after the claim, one round trip each on one connection.
      for (const end = performance.now() + 5000; !want(n) && performance.now() < end; n = await used()) await new Promise((r) => setTimeout(r, 20));
      return n;
    };
    try {
      const reqs = names.map((name) => ({ name, holder: 'h', ttlMs: 30_000, expect: null, nextNonce: uniq('n') }));
      const got = await store.claim(reqs);
      assert.ok(got.every((g) => g.outcome === 'acquired'));
      assert.equal(await until((n) => n === names.length), names.length, 'the holder took every lease’s named lock');
      const answers = await store.releaseMany(reqs.map((r) => ({ name: r.name, holder: 'h', expect: [r.nextNonce] })));
      assert.deepEqual(answers, [true, true, true]);
      assert.equal(await used(), 0, 'every named lock was let go before releaseMany answered: a waiting follower is woken');
    } finally {
      await store.close();
    }
  });
});
