/**
 * A statement larger than the server's max_allowed_packet (error 1153) reaches the caller as a
 * ConfigError that names the setting (src/backends/mysql/errors.ts), not as "check the schema"
 * nor as the reset connection a server that stops reading shows (refused before it is sent,
 * src/backends/mysql/driver.ts `fits`); and the slot ledger's skip of a long backlog, larger
 * than one packet, is cut into round trips of one transaction (src/backends/mysql/slots.ts)
 * rather than refused.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRequire } from 'node:module';
import { ConfigError } from '../../src/core/errors.js';
import type { MysqlStore } from '../../src/backends/mysql/store.js';
import { openSlotLedger, openStore } from '../../src/backends/index.js';
import { slotKey } from '../../src/scheduler/ledger.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';
import { startPrivateMariadb, whyNoPrivateMariadb, type PrivateMariadb } from '../helpers/private-mariadb.js';

const skip = selectedStores().includes('mysql') ? false : 'mysql not selected (LEASEHOLD_TEST_STORES)';
/** Above this the test would send more than it is worth to prove one error mapping. */
const MAX_SENT = 80 * 1024 * 1024;

void describe('MySQL store: a packet too large', { skip }, () => {
  let t: TestStore;
  let store: MysqlStore;
  before(async () => {
    t = await makeTestStore('mysql');
    store = t.store as MysqlStore;
  });
  after(async () => {
    await t?.cleanup();
  });

  void it('is a ConfigError that says max_allowed_packet, with error 1153 as its cause', async (ctx) => {
    const rows = (await store.q('SELECT @@max_allowed_packet AS mp')) as { mp: string }[];
    const max = Number(rows[0]!.mp);
    if (max + 1024 > MAX_SENT) {
      ctx.skip(`the server's max_allowed_packet is ${max} bytes; exceeding it would send more than ${MAX_SENT}`);
      return;
    }
    const err = await store.q('SELECT LENGTH(?) AS n', ['x'.repeat(max + 1024)]).then(
      () => assert.fail('the server took a statement larger than max_allowed_packet'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConfigError, `a ConfigError, not ${String(err)}`);
    assert.match(err.message, /max_allowed_packet/);
    assert.equal((err.cause as { errno?: number }).errno, 1153);
  });
});

interface Conn {
  query(sql: string, values?: unknown[]): Promise<unknown>;
  end(): Promise<void>;
}
const mysqlPromise = (): { createConnection(uri: string): Promise<Conn> } => createRequire(import.meta.url)('mysql2/promise') as never;

/** A server of its own: max_allowed_packet is global (read-only per session), and 3306 is shared. */
const SMALL_PACKET_PORT = Number(process.env['LEASEHOLD_TEST_MYSQL_PACKET_PORT'] ?? 3318);
const noServer = skip === false ? await whyNoPrivateMariadb() : undefined;

void describe('MySQL on a server whose max_allowed_packet is 4 MiB', { skip: skip !== false ? skip : (noServer ?? false) }, () => {
  let server: PrivateMariadb | undefined;
  before(async () => {
    // MySQL 5.7's default, the smallest in use: 100,000 slots of JSON do not fit it.
    server = await startPrivateMariadb(SMALL_PACKET_PORT, ['--max-allowed-packet=4M']);
  });
  after(() => {
    server?.stop();
  });

  void it('a statement over the 4 MiB limit is the ConfigError that says max_allowed_packet, not a reset connection read as "retryable"', async () => {
    // MariaDB closes the connection on reading the packet's length: mysql2, still writing, saw
    // ECONNRESET (a StoreUnavailableError, retried in vain) for every size tried over the limit.
    const store = (await openStore(server!.url)) as MysqlStore;
    try {
      for (const n of [4 * 1024 * 1024 + 1024, 8 * 1024 * 1024]) {
        const err = await store.q('SELECT LENGTH(?) AS n', ['x'.repeat(n)]).then(
          () => assert.fail(`the server took a ${n}-byte value over its 4 MiB max_allowed_packet`),
          (e: unknown) => e,
        );
        assert.ok(err instanceof ConfigError, `${n} bytes: a ConfigError, not ${String(err)}`);
        assert.match(err.message, /max_allowed_packet/);
      }
      // Just under the limit still goes.
      const rows = (await store.q('SELECT LENGTH(?) AS n', ['x'.repeat(4 * 1024 * 1024 - 1024)])) as { n: string | number }[];
      assert.equal(Number(rows[0]!.n), 4 * 1024 * 1024 - 1024);
    } finally {
      await store.close();
    }
  });

  void it('100,000 missed slots under a 4 MiB max_allowed_packet are all recorded skipped, in one transaction (all or none)', { timeout: 120_000 }, async () => {
    assert.equal(server!.sql('SELECT @@global.max_allowed_packet'), String(4 * 1024 * 1024));
    const store = await openStore(server!.url);
    try {
      await store.migrate();
      const ledger = await openSlotLedger(store, server!.url);
      const name = 'backlog';
      const [claimed] = await store.claim([{ name, holder: 'h', ttlMs: 60_000, expect: null, nextNonce: 'n1' }]);
      assert.ok(claimed?.outcome === 'acquired', `acquired: ${claimed?.outcome}`);
      const term = { name, holder: 'h', token: claimed.token };
      const base = Date.UTC(2026, 0, 1);
      const slots = Array.from({ length: 100_000 }, (_, i) => ({ key: slotKey(base + i * 60_000), slotAtMs: base + i * 60_000 }));
      const payload = JSON.stringify(slots.map((s) => [s.key, s.slotAtMs * 1000]));
      assert.ok(payload.length > 4 * 1024 * 1024, `the backlog (${payload.length} bytes) is larger than the server's packet`);

      const r = await ledger.skip({ ...term, slots, reason: 'missed' });
      assert.deepEqual({ fenced: r.fenced, skipped: r.skipped }, { fenced: false, skipped: 100_000 });
      assert.equal(server!.sql(`SELECT COUNT(*) FROM test.leasehold_slots WHERE name = '${name}' AND status = 'skipped'`), '100000');
      // Again, with some new: the ones recorded stay as they are, the new are added.
      const more = [...slots.slice(-10), { key: slotKey(base - 60_000), slotAtMs: base - 60_000 }];
      assert.equal((await ledger.skip({ ...term, slots: more, reason: 'missed' })).skipped, 1);

      // A part that fails takes the parts before it with it: another session holds the last
      // slot's row (inserted, not committed), so the last part waits on it until the store's
      // lock-wait timeout, each of the store's retries too, and the skip fails.
      const other = 'backlog-2';
      const [c2] = await store.claim([{ name: other, holder: 'h', ttlMs: 60_000, expect: null, nextNonce: 'n2' }]);
      assert.ok(c2?.outcome === 'acquired');
      const blocker = await mysqlPromise().createConnection(server!.url);
      try {
        await blocker.query('START TRANSACTION');
        await blocker.query("INSERT INTO leasehold_slots (name, slot, status, token) VALUES (?, ?, 'claimed', 1)", [other, slots.at(-1)!.key]);
        const err = await ledger.skip({ name: other, holder: 'h', token: c2.token, slots, reason: 'missed' }).then(
          () => assert.fail('the skip went through a row another session holds'),
          (e: unknown) => e as Error,
        );
        assert.match(err.message, /lock|timeout/i, String(err));
        assert.equal(server!.sql(`SELECT COUNT(*) FROM test.leasehold_slots WHERE name = '${other}'`), '0', 'none of the parts before the failed one stayed');
      } finally {
        await blocker.end();
      }

      // A term that has ended writes none of it: the parts after the first check nothing, and
      // are not alone in deciding (the first part's lock and check cover the transaction).
      assert.equal((await store.revoke(name, 'test')).revoked, true);
      const later = Array.from({ length: 100_000 }, (_, i) => ({ key: slotKey(base + (100_000 + i) * 60_000), slotAtMs: null }));
      const fenced = await ledger.skip({ ...term, slots: later, reason: 'missed' });
      assert.deepEqual({ fenced: fenced.fenced, skipped: fenced.skipped }, { fenced: true, skipped: 0 });
      assert.equal(server!.sql(`SELECT COUNT(*) FROM test.leasehold_slots WHERE name = '${name}'`), '100001');
    } finally {
      await store.close();
    }
  });
});
