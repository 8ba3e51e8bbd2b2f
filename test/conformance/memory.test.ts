/**
 * The in-memory reference store, which answers every claim with the claim rule, passes the
 * exported conformance suite, reached through the package's own `leasehold/conformance` entry.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import * as direct from '../../src/conformance/index.js';

// Through package.json "exports" (a self-reference), as a third-party store's tests import it.
// The name is not a literal so that type-checking does not need dist/ built first.
const entry: string = 'leasehold/conformance';
const conformance = (await import(entry)) as typeof direct;

void it('leasehold/conformance resolves to the suite this build ships', () => {
  assert.equal(conformance.runConformance, direct.runConformance);
  assert.equal(typeof conformance.decideClaim, 'function');
});

conformance.runConformance('memory', () => {
  const store = new conformance.MemoryStore();
  return Promise.resolve({ store, open: () => Promise.resolve(store.open()), cleanup: () => store.close() });
}, { shortTtlMs: 300, expirySlackMs: 50, engineTtlMs: 1000 });
