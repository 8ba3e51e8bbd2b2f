/**
 * Issue 9.9: two processes restored from one snapshot share one term, and so one token, until
 * the next renewal. A `>=` token fence accepts both. When the resource is in the lease's own
 * database, `fencedTransaction` / `fencedWriteSync` with `term` check and swap the term's
 * fence nonce in the same transaction: of the two, at most one ever commits a fenced write,
 * and the other is told LeaseLostError('cloned') and stands down.
 *
 * Real processes (test/fixtures/clone-worker.ts), restored from one serialized term, writing
 * concurrently right after the restore, before either renews.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';
import { prepareResource, writersOf } from '../fixtures/fenced-resource.js';
import { Worker, live } from '../fixtures/worker-process.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const note = (line: string): void => {
  process.stdout.write(`# ${line}\n`);
};

// The stores whose fence checks the lease row in the write's own transaction.
const stores = selectedStores().filter((k) => k === 'postgres' || k === 'sqlite' || k === 'mysql');
if (stores.length === 0) note('clone-fence: none of postgres, sqlite, mysql selected in LEASEHOLD_TEST_STORES; nothing to run');

for (const kind of stores) {
  void describe(`same-database fenced writes by two restores of one term on ${kind}`, () => {
    let t: TestStore;
    let dir: string;
    // Long enough that both bursts run well inside the first renew interval after the restore:
    // what stops the second clone here is the fence, not the renewal's clone rule. A restored
    // term renews a third of the TTL after its resume, and the kill of the original, the two
    // resumes and their first writes come first: at TTL 6 s (2 s) a run of npm test with five
    // files at once (load 3.6 on two cores) had a clone renew before the other's first fenced
    // write, which then learned of the clone from the renewal ('superseded'), not from the fence.
    // At 30 s that renewal is 10 s after the resume. The snapshot is taken as the term is won
    // (snapshotOn), not at its first renewal, which would wait that 10 s before every round.
    const ttl = 30_000;

    before(async () => {
      t = await makeTestStore(kind);
      dir = mkdtempSync(join(tmpdir(), 'lh-clonefence-'));
      await prepareResource(t.url);
    });
    afterEach(async () => {
      await Promise.all([...live].map((w) => w.kill()));
    });
    after(async () => {
      await t?.cleanup();
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    });

    for (let round = 1; round <= 3; round++) {
      void it(`round ${round}: two processes restored from one serialized term write concurrently; at most one ever commits, the other is told 'cloned'`, { timeout: 60_000 }, async () => {
        const name = uniq('clonefence');
        const snapPath = join(dir, `${name}.snapshot.json`);
        const labels = ['clone-A', 'clone-B'];
        const clones = labels.map((l) => new Worker(l, { url: t.url, name, ttl, mode: 'resume', recontend: false }));
        await Promise.all(clones.map((c) => c.next('ready')));

        const original = new Worker('original', { url: t.url, name, ttl, mode: 'snapshot', snapshotOn: 'acquired', snapshotPath: snapPath, recontend: false });
        const snap = await original.next('snapshot');
        await original.kill(); // the memory image it leaves is the file

        const froms = clones.map((c) => c.events.length);
        for (const c of clones) c.send({ cmd: 'resume', path: snapPath });
        const resumed = await Promise.all(clones.map((c, i) => c.next('resumed', froms[i])));
        for (const r of resumed) assert.equal(r['token'], snap['token'], 'both clones hold the snapshot\'s term');

        // Both at once: 60 fenced writes each, 4 at a time.
        const bursts = clones.map((c, i) => {
          const id = uniq('burst');
          c.send({ cmd: 'fence-burst', id, resource: name, count: 60, concurrency: 4, writer: labels[i]! });
          return c.next('burst', froms[i], 40_000, (e) => e['id'] === id);
        });
        const results = await Promise.all(bursts);
        const summary = results.map((r, i) => `${labels[i]}: ${String(r['accepted'])} accepted, lost ${String(r['lost'])}`).join('; ');
        note(`${kind} round ${round}, token ${String(snap['token'])}: ${summary}`);

        const writers = [...new Set(await writersOf(t.url, name))];
        assert.ok(writers.length <= 1, `at most one process committed a fenced write with token ${String(snap['token'])}; the resource has writes from ${writers.join(', ')} (${summary})`);
        const accepting = results.filter((r) => Number(r['accepted']) > 0);
        assert.ok(accepting.length <= 1, `at most one process was told its write was accepted (${summary})`);
        assert.deepEqual(
          writers,
          accepting.map((r) => labels[results.indexOf(r)]),
          'the resource holds exactly the writes reported accepted',
        );
        const accepted = accepting.reduce((n, r) => n + Number(r['accepted']), 0);
        assert.equal((await writersOf(t.url, name)).length, accepted, 'every accepted write is there, and nothing else');

        // The loser was told why, and its term ended with that reason.
        const losers = results.filter((r) => Number(r['accepted']) === 0);
        assert.ok(losers.length >= 1, 'of two clones at least one committed nothing');
        for (const r of losers) {
          assert.equal(r['lost'], 'cloned', `a clone that committed nothing got LeaseLostError reason 'cloned': ${String(r['lostMessage'])}`);
          assert.equal(r['signalReason'], 'cloned', 'and its term\'s signal aborted with reason cloned');
        }

        // Store contract 4b: the term was ended in the store, with a conflict in the history.
        const history = await t.store.history({ name });
        assert.ok(
          history.some((h) => h.event === 'conflict' && h.token === BigInt(String(snap['token']))),
          `a conflict event for token ${String(snap['token'])} in ${JSON.stringify(history, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`,
        );
        const [info] = await t.store.list({ name });
        assert.notEqual(info?.state, 'held', 'neither clone still holds the restored term in the store');
        await Promise.all(clones.map((c) => c.kill()));
      });
    }
  });
}
