/**
 * The `agent/` lease prefix belongs to the fleet: holding `agent/x` is what makes agent x alive,
 * so a plain lease or `leasehold run --name agent/x` is refused, and the fleet's Agent is not.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeTestStore, type TestStore } from '../helpers/stores.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError } from '../../src/core/errors.js';
import { Agent } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';
import { cli } from './helpers.js';

void describe('the agent/ lease prefix is reserved for fleet agents', () => {
  let ts: TestStore;
  before(async () => {
    ts = await makeTestStore('sqlite');
  });
  after(async () => {
    await ts.cleanup();
  });

  void it('leasehold.lease, runExclusive and elect refuse agent/ names; other names with "agent" are fine', async () => {
    const lh = new Leasehold({ store: ts.store });
    try {
      assert.throws(() => lh.lease('agent/x'), (e: unknown) => e instanceof ConfigError && /reserved/.test(e.message) && /leasehold agent --id/.test(e.message));
      assert.throws(() => lh.lease('agent/x', { ttl: 5000 }), ConfigError);
      await assert.rejects(lh.runExclusive('agent/x', () => 1), ConfigError);
      assert.throws(() => lh.elect('agent/x', { onElected: () => undefined }), ConfigError);
      const fine = lh.lease('agents/x');
      await fine.acquire({ wait: false });
      await fine.release();
      lh.lease('my-agent/x');
      assert.deepEqual((await ts.store.list()).filter((l) => l.name.startsWith('agent/')), [], 'no agent/ lease was taken');
    } finally {
      await lh.close();
    }
  });

  void it('`leasehold run --name agent/x` exits with a usage error and agent x never looks alive', async () => {
    const r = await cli(['run', '--name', 'agent/x', '--store', ts.url, '--', process.execPath, '-e', 'setTimeout(() => {}, 2000)']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /reserved/);
    const fleet = await openFleet(ts.store);
    assert.equal((await fleet.agents()).some((a) => a.live), false);
    assert.deepEqual(await ts.store.list({ name: 'agent/x' }), []);
  });

  void it("the fleet's Agent still takes its agent/<id> lease", async () => {
    const store = await ts.open();
    const lh = new Leasehold({ store });
    const agent = await Agent.start(lh, await openFleet(store), { id: 'x', heartbeat: 100, staleAfter: 400 });
    try {
      const [info] = await ts.store.list({ name: 'agent/x' });
      assert.equal(info?.state, 'held');
      assert.equal((await (await openFleet(ts.store)).agents()).find((a) => a.id === 'x')?.live, true);
    } finally {
      await agent.stop();
      await lh.close();
    }
  });
});
