/**
 * Durations as users write them (compounds, days, fractions that land on a whole millisecond),
 * one refusal for a fraction of a millisecond however it is written, and a limit at the longest
 * delay a Node.js timer can hold: a longer TTL would fire at once and be taken for a suspension.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Leasehold } from '../../src/core/leasehold.js';
import { parseDuration, resolveTiming } from '../../src/core/config.js';
import { ConfigError } from '../../src/core/errors.js';
import { makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';

/** The longest delay a Node.js timer holds (2^31-1 ms); spelled out so the test does not take it from the code under test. */
const MAX_DURATION_MS = 2_147_483_647;

const configError = (pattern: RegExp) => (e: unknown) => e instanceof ConfigError && e.code === 'CONFIG' && pattern.test(e.message);

void describe('durations', () => {
  void it('accept compounds, largest unit first, and days', () => {
    assert.equal(parseDuration('1m30s', 'ttl'), 90_000);
    assert.equal(parseDuration('1h30m', 'ttl'), 5_400_000);
    assert.equal(parseDuration('1d', 'ttl'), 86_400_000);
    assert.equal(parseDuration('2d12h', 'ttl'), 216_000_000);
    assert.equal(parseDuration('1h 30m', 'ttl'), 5_400_000);
    assert.equal(parseDuration('1m0.5s', 'ttl'), 60_500);
  });

  void it('accept a fraction that lands on a whole millisecond, computed exactly', () => {
    assert.equal(parseDuration('1.5s', 'ttl'), 1500);
    assert.equal(parseDuration('1.1s', 'ttl'), 1100); // 1.1 * 1000 is 1100.0000000000002 in floating point
    assert.equal(parseDuration('0.001s', 'ttl'), 1);
    assert.equal(parseDuration('0.5m', 'ttl'), 30_000);
  });

  void it('refuse units out of order or repeated, which are likelier typos than sums', () => {
    for (const bad of ['30s1m', '1m1m', '1s500ms500ms']) {
      assert.throws(() => parseDuration(bad, 'ttl'), configError(/largest first/), bad);
    }
  });

  void it('refuse a fraction of a millisecond with the same words for a number and a string', () => {
    const words = (v: number | string): string => {
      try {
        parseDuration(v, 'ttl');
      } catch (e) {
        assert.ok(e instanceof ConfigError);
        return e.message;
      }
      assert.fail(`${String(v)} was accepted`);
    };
    // The library used to round the number 1.5 to 2 while the CLI (a string) refused "1.5".
    assert.equal(words(1.5), words('1.5'));
    assert.match(words(1.5), /^ttl 1\.5 is not a whole number of milliseconds/);
    assert.match(words('1.5ms'), /^ttl 1\.5ms is not a whole number of milliseconds/);
    assert.match(words('0.0005s'), /not a whole number of milliseconds/);
    assert.match(words(0.1), /not a whole number of milliseconds/);
    assert.throws(() => resolveTiming({ ttl: 1000.5 }), configError(/not a whole number of milliseconds/));
    assert.throws(() => resolveTiming({ ttl: '3s', renewInterval: 999.9 }), configError(/not a whole number of milliseconds/));
  });

  void it('a whole number written with a decimal point is that many milliseconds, as the number is', () => {
    assert.equal(parseDuration('1500.0', 'ttl'), parseDuration(1500.0, 'ttl'));
  });
});

void describe('durations longer than a Node.js timer can wait are refused where they enter', () => {
  void it('parseDuration names the limit, in milliseconds and days', () => {
    assert.equal(parseDuration(MAX_DURATION_MS, 'ttl'), MAX_DURATION_MS);
    assert.equal(parseDuration('24d', 'ttl'), 24 * 86_400_000);
    for (const long of ['876000h', '25d', MAX_DURATION_MS + 1, `${MAX_DURATION_MS + 1}`, 1e300, '99999999999999999999999d']) {
      assert.throws(() => parseDuration(long, 'ttl'), configError(/2147483647ms \(about 24\.8 days\)/), String(long));
    }
  });

  void it('resolveTiming refuses a long ttl, renew interval or safety margin', () => {
    assert.throws(() => resolveTiming({ ttl: '876000h' }), configError(/^ttl 876000h is too long.*2147483647ms/));
    assert.throws(() => resolveTiming({ ttl: '24d', renewInterval: '30d' }), configError(/^renew interval 30d is too long/));
    assert.throws(() => resolveTiming({ ttl: '24d', safetyMargin: '30d' }), configError(/^safety margin 30d is too long/));
  });

  const stores = selectedStores();
  for (const kind of stores) {
    void describe(`a lease on ${kind}`, () => {
      let t: TestStore | undefined;
      let lh: Leasehold | undefined;
      after(async () => {
        await lh?.close();
        await t?.cleanup();
      });

      void it('refuses a long ttl, progress timeout or acquire wait with a ConfigError, before contending', async () => {
        t = await makeTestStore(kind);
        lh = new Leasehold({ store: t.store });
        assert.throws(() => lh!.lease('long', { ttl: '876000h' }), configError(/2147483647ms/));
        assert.throws(() => lh!.lease('long', { progressTimeout: '30d' }), configError(/^progress timeout 30d is too long/));
        const lease = lh.lease('long');
        await assert.rejects(lease.acquire({ wait: '30d' }), configError(/^wait 30d is too long.*give no wait at all/));
        assert.equal(lease.state, 'idle', 'a refused wait never contended');
        assert.deepEqual(await t.store.list({ name: 'long' }), [], 'nothing was written to the store');
      });

      void it('holds a lease with a ttl at the limit without the timer firing at once', async () => {
        const warnings: string[] = [];
        const onWarning = (w: Error): void => void warnings.push(w.name);
        process.on('warning', onWarning);
        try {
          const lease = lh!.lease('at-limit', { ttl: '24d' });
          const term = await lease.acquire({ wait: false });
          // An overflowing deadline timer fires on the next turn of the event loop; give it several.
          for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
          await new Promise((r) => setTimeout(r, 50));
          assert.equal(term.signal.aborted, false, 'the term is still held');
          assert.equal(lease.state, 'leading');
          await lease.release();
        } finally {
          process.off('warning', onWarning);
        }
        assert.deepEqual(warnings.filter((w) => w === 'TimeoutOverflowWarning'), []);
      });
    });
  }
});
