// MySQL's claim batches are cut by an upper bound on their inlined bytes (src/backends/mysql/packet.ts):
// every kind of request must stay under its bound, or a batch cut to fit max_allowed_packet is refused anyway.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { planAccept, planClaim } from '../../src/backends/mysql/claim.js';
import { acceptRequestBytes, claimRequestBytes, inlinedBound, splitByPacket } from '../../src/backends/mysql/packet.js';
import type { ClaimRequest } from '../../src/core/port.js';

const nonce = (i: number): string => `${'n'.repeat(21)}${i}`;

void test('a claim request adds no more than claimRequestBytes to its batch, whatever its kind and however long its name and holder id', () => {
  const shapes = [
    { name: 'job', holder: 'host:1:abc' },
    // The longest: 200 and 512 characters of 3 bytes, and quotes that are escaped.
    { name: '名'.repeat(200), holder: '鍵'.repeat(512) },
    { name: "'".repeat(200), holder: '\\'.repeat(512) },
  ];
  for (const { name, holder } of shapes) {
    const kinds: ClaimRequest[] = [
      { name, holder, ttlMs: 30_000, expect: [nonce(1), nonce(2)], nextNonce: nonce(3) },
      { name, holder, ttlMs: 30_000, expect: null, nextNonce: nonce(3) },
      { name, holder, ttlMs: 30_000, expect: null, nextNonce: nonce(3), handoff: [nonce(4), nonce(5)], unlessReleasedSince: 1 },
      { name, holder, ttlMs: 30_000, expect: null, nextNonce: nonce(3), handoff: [nonce(4), nonce(5)], session: '4294967295' },
    ];
    for (const r of kinds) {
      const alone = planClaim([r], false, { database: 'lh_t_0123456789', mariadb: true });
      // Two of the same kind: what one more request adds (the batch's fixed statements cancel out).
      const twice = planClaim([r, { ...r, name: `${r.name}2` }], false, { database: 'lh_t_0123456789', mariadb: true });
      const one = inlinedBound(alone.sql, alone.values);
      const added = inlinedBound(twice.sql, twice.values) - one;
      const kind = `${r.expect === null ? 'contender' : 'renewal'}${r.handoff ? ', waiting' : ''}${r.session ? ', session' : ''} (${name.length}-character name)`;
      assert.ok(added <= claimRequestBytes(r), `${kind}: adds ${added} bytes, bound ${claimRequestBytes(r)}`);
    }
  }
});

void test('a woken batch’s acceptance (planAccept) is cut by packet size too: each request under acceptRequestBytes, each part under the packet', () => {
  const shapes = [
    { name: 'job', holder: 'host:1:abc' },
    { name: '名'.repeat(200), holder: '鍵'.repeat(512) },
    { name: "'".repeat(200), holder: '\\'.repeat(512) },
  ];
  for (const { name, holder } of shapes) {
    const r: ClaimRequest = { name, holder, ttlMs: 30_000, expect: null, nextNonce: nonce(3), handoff: [nonce(4), nonce(5)] };
    const alone = planAccept([r]);
    const twice = planAccept([r, { ...r, name: `${r.name}2` }]);
    const added = inlinedBound(twice.sql, twice.values) - inlinedBound(alone.sql, alone.values);
    assert.ok(added <= acceptRequestBytes(r), `${name.length}-character name: adds ${added} bytes, bound ${acceptRequestBytes(r)}`);
  }
  // 2,000 woken waiters with the longest names and holder ids, for a 4 MiB packet (MySQL 5.7's
  // default): sent whole, as it was before, the server refused it.
  const max = 4 * 1024 * 1024;
  const batch: ClaimRequest[] = Array.from({ length: 2000 }, (_, i) => ({ name: `${'名'.repeat(195)}${i}`, holder: '鍵'.repeat(512), ttlMs: 30_000, expect: null, nextNonce: nonce(i), handoff: [nonce(i + 1)] }));
  const whole = planAccept(batch);
  assert.ok(inlinedBound(whole.sql, whole.values) > max, 'precondition: the whole batch does not fit');
  const parts = splitByPacket(batch, acceptRequestBytes, max);
  assert.ok(parts.length > 1);
  assert.deepEqual(parts.flat().map((r) => r.name), batch.map((r) => r.name), 'every request once, in order');
  for (const part of parts) {
    const plan = planAccept(part);
    assert.ok(inlinedBound(plan.sql, plan.values) <= max, `a part of ${part.length} is ${inlinedBound(plan.sql, plan.values)} bytes; the packet is ${max}`);
  }
});
