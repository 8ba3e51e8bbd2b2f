/**
 * Health: a follower is live and not ready, a leader is ready, and a leader whose event loop was
 * stuck past a TTL (it still believes it leads, its renewals never went out) fails liveness:
 * the wedged-leader case client-go's HealthzAdaptor exists for. Against a real SQLite store.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError } from '../../src/core/errors.js';
import { healthCheck } from '../../src/health/index.js';
import { makeTestStore, type TestStore } from '../helpers/stores.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

void describe('health (sqlite)', () => {
  let ts: TestStore;
  before(async () => {
    ts = await makeTestStore('sqlite');
  });
  after(async () => {
    await ts.cleanup();
  });

  void it('follower: live, not ready; leader: live and ready; served as /healthz and /readyz', async () => {
    const a = new Leasehold({ store: await ts.open() });
    const b = new Leasehold({ store: await ts.open() });
    const name = uniq('probe');
    const la = a.lease(name, { ttl: 1000 });
    const lb = b.lease(name, { ttl: 1000 });
    const ha = healthCheck(la);
    const hb = healthCheck(lb);
    const server = createServer(hb.handler);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      await la.acquire();
      await assert.rejects(lb.acquire({ wait: false }));
      assert.equal(ha.live().ok, true);
      assert.equal(ha.ready().ok, true);
      assert.equal(hb.live().ok, true, 'a follower is live');
      assert.equal(hb.ready().ok, false, 'a follower is not ready');
      let r = await fetch(`${base}/healthz`);
      assert.equal(r.status, 200);
      r = await fetch(`${base}/readyz`);
      assert.equal(r.status, 503);
      const body = (await r.json()) as { ok: boolean; leases: Array<{ lease: string; leader: boolean }> };
      assert.deepEqual([body.ok, body.leases[0]?.lease, body.leases[0]?.leader], [false, name, false]);
      r = await fetch(`${base}/readyz`, { method: 'POST' });
      assert.equal(r.status, 405);
      r = await fetch(`${base}/nope`);
      assert.equal(r.status, 404);
      await la.release();
      await lb.acquire();
      r = await fetch(`${base}/readyz`);
      assert.equal(r.status, 200, 'the new leader is ready');
    } finally {
      server.close();
      ha.close();
      hb.close();
      await a.close();
      await b.close();
    }
  });

  void it('a leader wedged past its TTL fails liveness (and is not ready)', async () => {
    const lh = new Leasehold({ store: await ts.open(), suspension: false });
    const lease = lh.lease(uniq('wedged'), { ttl: 300 });
    const health = healthCheck(lease);
    try {
      await lease.acquire();
      assert.equal(health.live().ok, true);
      // The event loop is stuck (a synchronous loop, a deadlocked native call): no renewal goes
      // out, no deadline timer fires, and the process still believes it holds the term.
      const until = performance.now() + 400;
      while (performance.now() < until) {
        /* wedged */
      }
      assert.notEqual(lease.currentTerm, undefined, 'the term is still believed');
      const live = health.live();
      assert.equal(live.ok, false, `liveness fails: ${JSON.stringify(live)}`);
      assert.ok(live.leases[0]!.renewalAgeMs! >= 400);
      assert.equal(health.ready().ok, false);
    } finally {
      health.close();
      await lh.close();
    }
  });

  void it('a bad bound is a ConfigError', () => {
    assert.throws(() => healthCheck([], { maxRenewalAge: 'soon' }), ConfigError);
  });
});
