/**
 * The README's library example as it was, `openStore(process.env.LEASEHOLD_STORE!)`, with the variable unset:
 * a ConfigError that says what to pass, through the same top-level entry the README imports.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, Leasehold, openStore, resolveStoreUrl } from '../../src/index.js';

void describe('openStore without a URL', () => {
  for (const [what, url] of [
    ['undefined (an unset environment variable)', undefined],
    ['an empty string', ''],
  ] as const) {
    void it(`${what} is a ConfigError naming resolveStoreUrl()`, async () => {
      await assert.rejects(
        () => openStore(url as unknown as string),
        (err: unknown) => {
          assert.ok(err instanceof ConfigError, `a ConfigError, got ${String(err)}`);
          assert.match(err.message, /needs a store URL/);
          assert.match(err.message, /resolveStoreUrl\(\)/);
          return true;
        },
      );
    });
  }

  void it('the README example line, as written, with LEASEHOLD_STORE unset, fails the same way', async () => {
    const saved = process.env['LEASEHOLD_STORE'];
    delete process.env['LEASEHOLD_STORE'];
    try {
      await assert.rejects(
        async () => new Leasehold({ store: await openStore(process.env['LEASEHOLD_STORE']!), closeStore: true }),
        (err: unknown) => err instanceof ConfigError && /resolveStoreUrl\(\)/.test(err.message),
      );
    } finally {
      if (saved !== undefined) process.env['LEASEHOLD_STORE'] = saved;
    }
    assert.equal(typeof resolveStoreUrl(), 'string');
  });
});
