/**
 * An agent's id is what its messages say it may be: letters, digits and - _ . : only. `'<b>'`
 * and `'x y'` were accepted (the lease-name rules allow them), by the CLI and by the library's
 * Agent; both now refuse them with a ConfigError (exit 2) before anything is registered. Ids
 * registered before stay usable where an agent is looked up (drain, reassign --from).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeTestStore, type TestStore } from '../helpers/stores.js';
import { Leasehold } from '../../src/core/leasehold.js';
import { ConfigError } from '../../src/core/errors.js';
import { Agent } from '../../src/fleet/agent.js';
import { openFleet } from '../../src/fleet/open.js';
import { validateAgentId, validateNewAgentId } from '../../src/fleet/labels.js';
import { cli } from './helpers.js';

const BAD = ['<b>', 'x y', 'a"b', "it's", 'tab\there', 'ü-1', 'a/b', 'a,b', ''];
const GOOD = ['web-1', 'a.b:c_d', 'X9', 'host.example.com:8080'];

void describe('agent ids: letters, digits and - _ . : only', () => {
  let ts: TestStore;
  before(async () => {
    ts = await makeTestStore('sqlite');
  });
  after(async () => {
    await ts.cleanup();
  });

  void it('validateNewAgentId refuses every other character with a ConfigError naming it, and takes the documented alphabet', () => {
    for (const id of BAD) assert.throws(() => validateNewAgentId(id), (e: unknown) => e instanceof ConfigError && /agent id/.test(e.message), JSON.stringify(id));
    assert.throws(() => validateNewAgentId('x y'), /contains a space; use letters, digits and - _ \. : only/);
    assert.throws(() => validateNewAgentId('<b>'), /contains "<"/);
    for (const id of GOOD) assert.equal(validateNewAgentId(id), id);
    // Looking up an agent registered before keeps the old rules.
    assert.equal(validateAgentId('x y'), 'x y');
  });

  void it("the library's Agent.start refuses '<b>' and 'x y' and registers nothing", async () => {
    const lh = new Leasehold({ store: ts.store });
    try {
      const fleet = await openFleet(ts.store);
      for (const id of ['<b>', 'x y']) {
        await assert.rejects(Agent.start(lh, fleet, { id, heartbeat: 100, staleAfter: 400 }), ConfigError, id);
      }
      assert.deepEqual(await fleet.agents(), []);
      assert.deepEqual((await ts.store.list()).filter((l) => l.name.startsWith('agent/')), []);
    } finally {
      await lh.close();
    }
  });

  void it("`leasehold agent --id '<b>'` and `--id 'x y'` exit 2 with one line saying what is allowed", async () => {
    for (const id of ['<b>', 'x y']) {
      const r = await cli(['agent', '--id', id, '--store', ts.url, '--heartbeat', '100ms', '--stale-after', '400ms']);
      assert.equal(r.code, 2, `--id ${JSON.stringify(id)}: exit ${r.code}: ${r.stderr}`);
      assert.match(r.stderr, /^leasehold: agent id .* use letters, digits and - _ \. : only/m);
    }
    // Nor when the store is unreachable: the id is checked first.
    const r = await cli(['agent', '--id', 'x y', '--store', 'postgres://postgres@127.0.0.1:1/test']);
    assert.equal(r.code, 2, r.stderr);
  });
});
