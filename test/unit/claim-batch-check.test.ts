/**
 * checkClaimBatch's duplicate check (src/backends/checks.ts) stamps names with the call's number
 * in a map kept between calls, instead of building a Set per call. What that must keep: a name
 * twice in one batch is a ConfigError, wherever the two sit and however many calls came before;
 * the same names in every call (a renewal tick) are not; and the map's clearing never hides a
 * duplicate nor invents one.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkClaimBatch } from '../../src/backends/checks.js';
import { ConfigError } from '../../src/core/errors.js';
import type { ClaimRequest } from '../../src/core/port.js';

const req = (name: string): ClaimRequest => ({ name, holder: 'h', ttlMs: 3000, expect: null, nextNonce: 'n' });

void test('a batch naming a lease twice is refused; the same names in call after call are not', () => {
  const tick = Array.from({ length: 1000 }, (_, i) => req(`lease-${i}`));
  for (let i = 0; i < 5; i++) checkClaimBatch(tick);
  assert.throws(() => checkClaimBatch([...tick, req('lease-999')]), (e: unknown) => e instanceof ConfigError && /names lease "lease-999" twice/.test(e.message));
  assert.throws(() => checkClaimBatch([req('a'), req('b'), req('a')]), ConfigError);
  // A refused batch leaves stamps behind: the next call with those names is its own.
  checkClaimBatch([req('a'), req('b')]);
  checkClaimBatch(tick);
});

void test('past the cap the stamps are cleared, and duplicates are still found on both sides of the clear', () => {
  // 250,000 distinct names over a few calls: more than the map keeps.
  for (let c = 0; c < 5; c++) checkClaimBatch(Array.from({ length: 50_000 }, (_, i) => req(`churn-${c}-${i}`)));
  const names = Array.from({ length: 20_000 }, (_, i) => req(`after-${i}`));
  checkClaimBatch(names);
  assert.throws(() => checkClaimBatch([...names, req('after-0')]), ConfigError);
  assert.throws(() => checkClaimBatch([req('churn-0-1'), req('x'), req('churn-0-1')]), ConfigError);
  checkClaimBatch([req('churn-0-1'), req('x')]);
});
