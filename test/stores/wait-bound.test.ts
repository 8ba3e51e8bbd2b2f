/**
 * The library's `acquire({ wait })` gives up when the wait ends, not when the claim in flight
 * ends: each attempt is bounded by what is left of the wait. Redis behind a loopback proxy that
 * starts dropping every byte once the store is connected: a claim then hangs for the store's
 * call timeout (5s by default). A claim given up on is never a term.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { NotAcquiredError, StoreUnavailableError } from '../../src/core/errors.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { openStore } from '../../src/backends/index.js';
import { TcpProxy } from '../helpers/proxy.js';
import { selectedStores } from '../helpers/stores.js';
import { TEST_REDIS_URL, deleteRedisKeys, freshRedisPrefix } from '../helpers/redis-store.js';

const prefix = freshRedisPrefix();
after(() => deleteRedisKeys(prefix));

void describe('acquire({ wait }) against a store that stops answering', { skip: !selectedStores().includes('redis') && 'redis not selected' }, () => {
  void it('rejects NotAcquiredError (cause: the store did not answer) when the wait ends, not at the store\'s own timeout', async () => {
    const target = new URL(TEST_REDIS_URL);
    const proxy = await new TcpProxy(target.hostname, Number(target.port || 6379)).start();
    const url = new URL(TEST_REDIS_URL);
    url.port = String(proxy.port);
    url.searchParams.set('prefix', prefix);
    const store = await openStore(url.toString());
    const lh = new Leasehold({ store, closeStore: true });
    try {
      // Connected and answering first, so what follows is a silent store, not a refused connect.
      const warm = lh.lease('warm', { ttl: 3000 });
      await warm.acquire({ wait: false });
      await warm.release();
      proxy.setMode('blackhole');
      const lease = lh.lease('silent', { ttl: 3000 });
      const waitMs = 1000;
      const t0 = performance.now();
      const err = await lease.acquire({ wait: waitMs }).then(
        () => assert.fail('acquired through a store that answers nothing'),
        (e: unknown) => e,
      );
      const took = performance.now() - t0;
      assert.ok(err instanceof NotAcquiredError, String(err));
      assert.ok(err.cause instanceof StoreUnavailableError, `cause: ${String(err.cause)}`);
      // The store's own call timeout is 5s: an attempt that ran on to it would take that long.
      // A second past the wait covers timers and event-loop lag on a loaded machine.
      assert.ok(took >= waitMs && took <= waitMs + 1000, `gave up after ${Math.round(took)}ms; the wait was ${waitMs}ms`);
      assert.equal(lease.currentTerm, undefined);
    } finally {
      await proxy.stop();
      await lh.close();
    }
  });
});
