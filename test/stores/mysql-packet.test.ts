/**
 * A statement larger than the server's max_allowed_packet (error 1153) reaches the caller as a
 * ConfigError that names the setting (src/backends/mysql/errors.ts), not as "check the schema".
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ConfigError } from '../../src/core/errors.js';
import type { MysqlStore } from '../../src/backends/mysql/store.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

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

  void it('is a ConfigError that says max_allowed_packet, with the server error as its cause', async (ctx) => {
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
