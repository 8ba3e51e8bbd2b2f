import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadSqliteDriver } from '../../src/backends/sqlite/driver.js';
import type { LeasePort } from '../../src/core/port.js';
import type { SqliteStore } from '../../src/backends/sqlite/store.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';

/**
 * A per-slot cron contender whose claim of a slot's term queued behind the SQLite write lock
 * (ten replicas' claims, and the winner's four writes, all at the slot's instant) must not be
 * granted a second term for a slot whose winner already ran and released: it would read the
 * ledger, find the slot done and release, three requests instead of one (issue 33, item 3).
 * `unlessReleasedSince` says "only if no term granted since then has been released".
 */
void describe('sqlite: a contender with unlessReleasedSince', () => {
  let t: TestStore;
  let store: LeasePort;

  before(async () => {
    t = await makeTestStore('sqlite');
    store = t.store as unknown as LeasePort;
  });
  after(async () => {
    await t.cleanup();
  });

  const acquire = async (name: string, holder: string, nonce: string, ttlMs = 30_000) => {
    const [r] = await store.claim([{ name, holder, ttlMs, expect: null, nextNonce: nonce }]);
    assert.equal(r!.outcome, 'acquired');
    return r as typeof r & { storeNowMs: number };
  };

  void it('is refused, without a term, when a term granted since then was released', async () => {
    const slot = Date.now() - 1;
    await acquire('a', 'winner', 'n1');
    assert.equal(await store.release({ name: 'a', holder: 'winner', expect: ['n1'] }), true);
    const [late] = await store.claim([{ name: 'a', holder: 'late', ttlMs: 30_000, expect: null, nextNonce: 'n2', unlessReleasedSince: slot }]);
    assert.equal(late!.outcome, 'busy');
    assert.equal(late!.outcome === 'busy' && late!.releasedSince, true);
    // Nothing was granted: a contender without the condition takes the next token.
    const [next] = await store.claim([{ name: 'a', holder: 'other', ttlMs: 30_000, expect: null, nextNonce: 'n3' }]);
    assert.equal(next!.outcome, 'acquired');
    assert.equal(next!.token, 2n);
  });

  void it('is granted when the released term began before that time (the slot\'s own term is yet to come)', async () => {
    await acquire('b', 'earlier', 'n1');
    assert.equal(await store.release({ name: 'b', holder: 'earlier', expect: ['n1'] }), true);
    const [r] = await store.claim([{ name: 'b', holder: 'c', ttlMs: 30_000, expect: null, nextNonce: 'n2', unlessReleasedSince: Date.now() + 1 }]);
    assert.equal(r!.outcome, 'acquired');
  });

  void it('is granted when a term since then expired instead (its holder may have died mid-job: the slot is owed)', async () => {
    const slot = Date.now() - 1;
    await acquire('c', 'died', 'n1', 30);
    await new Promise((r) => setTimeout(r, 60));
    const [r] = await store.claim([{ name: 'c', holder: 'c', ttlMs: 30_000, expect: null, nextNonce: 'n2', unlessReleasedSince: slot }]);
    assert.equal(r!.outcome, 'acquired');
  });

  void it('a live term is busy as ever, without the mark', async () => {
    const slot = Date.now() - 1;
    await acquire('d', 'holder', 'n1');
    const [r] = await store.claim([{ name: 'd', holder: 'c', ttlMs: 30_000, expect: null, nextNonce: 'n2', unlessReleasedSince: slot }]);
    assert.equal(r!.outcome, 'busy');
    assert.equal(r!.outcome === 'busy' && r!.releasedSince === true, false);
  });

  void it('a contender the live holder refuses is answered without the write lock (it does not queue behind the winner\'s writes)', async () => {
    await acquire('e', 'winner', 'n1');
    // Another process in the middle of a write (the winner's ledger claim, say).
    // The driver the store itself loads (node:sqlite on Node 22+, where better-sqlite3's binary,
    // built for Node 20, does not load: CI's Node 22/24 runs).
    const Database = loadSqliteDriver();
    const other = new Database((t.store as unknown as SqliteStore).path);
    other.exec('BEGIN IMMEDIATE');
    try {
      const [r] = await store.claim([{ name: 'e', holder: 'loser', ttlMs: 30_000, expect: null, nextNonce: 'n2', unlessReleasedSince: Date.now() - 1000 }]);
      assert.equal(r!.outcome, 'busy');
      assert.equal(r!.holder, 'winner');
    } finally {
      other.exec('ROLLBACK');
      other.close();
    }
  });
});
