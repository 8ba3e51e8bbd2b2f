/**
 * A real process holding many leases, frozen with SIGSTOP past their TTL while another process
 * takes every one of them over, then thawed: its work loops (`startLoop(term.token, term.signal)`,
 * as the README's elector example once read, checking the signal before each write) must send no write
 * at all after SIGCONT. Every token it holds is stale by then, and `lease.token` would refuse it;
 * the signal has to say so at the same read, not one event-loop turn later.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

const loopsJs = fileURLToPath(new URL('../fixtures/frozen-loops.js', import.meta.url));
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

type Line = { event: string; name?: string; token?: string; reason?: string; wall?: number; tokens?: Record<string, string> };

const COUNT = 200;
const TTL = 2000;
// Far shorter than the renew interval (TTL/3): after the thaw, a loop's timer is due before the
// engine's own timers, so the loop is what runs first. That is the case the signal must cover.
const LOOP_MS = 50;

void describe('engine on postgres: a frozen process with many leases', { skip: !selectedStores().includes('postgres') && 'postgres not selected' }, () => {
  let t: TestStore;
  before(async () => {
    t = await makeTestStore('postgres');
  });
  after(async () => {
    await t?.cleanup();
  });

  void it(`sends no write with an unaborted signal after SIGCONT: ${COUNT} leases frozen past their TTL and taken over`, async () => {
    const prefix = `frozen-${randomBytes(4).toString('hex')}`;
    const child = spawn(process.execPath, [loopsJs, t.url, prefix, String(COUNT), String(TTL), String(LOOP_MS)], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines: Line[] = [];
    let buf = '';
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        lines.push(JSON.parse(buf.slice(0, i)) as Line);
        buf = buf.slice(i + 1);
      }
    });
    const next = async (cond: (l: Line) => boolean, what: string, timeoutMs: number): Promise<Line> => {
      const until = performance.now() + timeoutMs;
      for (;;) {
        const found = lines.find(cond);
        if (found !== undefined) return found;
        if (performance.now() > until) throw new Error(`the frozen process never printed ${what}; last lines ${JSON.stringify(lines.slice(-5))}`);
        await sleep(20);
      }
    };
    const lh = new Leasehold({ store: await t.open() });
    try {
      // Acquiring 200 leases is a handful of batched round trips; a minute covers a loaded machine.
      const leading = await next((l) => l.event === 'leading', '"leading"', 60_000);
      child.stdin.write('log\n');
      await next((l) => l.event === 'write', 'a write', 10_000);
      child.kill('SIGSTOP');

      // The store's clock runs on: each lease expires within a TTL and this process takes it.
      const terms = await Promise.all(Array.from({ length: COUNT }, (_, i) => lh.lease(`${prefix}-${i}`, { ttl: 30_000 }).acquire({ wait: '60s' })));
      for (const term of terms) assert.ok(term.token > BigInt(leading.tokens![term.name]!), `takeover token of ${term.name} is larger`);

      const thawedAt = Date.now();
      child.kill('SIGCONT');
      // Every deadline passed during the freeze, so the thawed process notices at its first
      // callback; 10 TTLs only bound a machine that is very loaded.
      await next((l) => l.event === 'all-lost', '"all-lost"', 10 * TTL);
      const afterThaw = lines.filter((l) => l.event === 'write' && l.wall! >= thawedAt);
      const lost = lines.filter((l) => l.event === 'lost');
      const lastLost = Math.max(...lost.map((l) => l.wall!));
      process.stdout.write(`# ${COUNT} leases thawed: ${afterThaw.length} writes sent after SIGCONT; every term ended ${lastLost - thawedAt}ms after it; losses ${JSON.stringify(countBy(lost.map((l) => l.reason!)))}\n`);
      assert.deepEqual(afterThaw, [], 'no write was sent with a stale token after the thaw');
      assert.equal(lost.length, COUNT);
      for (const l of lost) assert.ok(l.reason === 'suspended' || l.reason === 'expired' || l.reason === 'superseded', `${l.name} lost because ${l.reason}`);
    } finally {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await lh.close();
    }
  });
});

function countBy(xs: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
}
