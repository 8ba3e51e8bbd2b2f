/**
 * Conformance for two optional parts of a claim's answer, which a per-slot cron contender uses
 * (src/scheduler/slot-wait.ts):
 *  - ClaimRequest.unlessReleasedSince, on stores that set `honoursReleasedSince` (the reference
 *    store, SQLite, Redis, MySQL/MariaDB, etcd; PostgreSQL grants as usual). A refusal saves a
 *    term, never makes one safe: so the cases check both that it refuses exactly a term begun
 *    since and released by its holder, and that it grants everything it would grant without.
 *  - ClaimResult.grantedAtMs on a busy answer, on every store that reports it: the holding
 *    term's start, never a time after the term was granted nor before the previous term's.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { newNonce } from '../core/identity.js';
import type { ClaimResult } from '../core/port.js';
import type { LeaseStore } from '../backends/store.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function claim(store: LeaseStore, name: string, holder: string, ttlMs: number, unlessReleasedSince?: number): Promise<ClaimResult & { nonce: string }> {
  const nonce = newNonce();
  const [r] = await store.claim([{ name, holder, ttlMs, expect: null, nextNonce: nonce, ...(unlessReleasedSince === undefined ? {} : { unlessReleasedSince }) }]);
  return { ...r!, nonce };
}

/**
 * The cases, inside the suite's describe. `store` is read when a case runs (the suite's
 * before() opens it). `clockSlackMs`: how far a store's reported times may stray from each
 * other (etcd's clock bound; 0 elsewhere would be exact, a few ms covers rounding).
 */
export function releasedSinceCases(store: () => LeaseStore, shortTtlMs: number, slackMs: number, clockSlackMs: number): void {
  void it('unlessReleasedSince: a term begun since and released by its holder refuses the claim; it writes nothing', async (ctx) => {
    const s = store();
    if (s.honoursReleasedSince !== true) return ctx.skip(`${s.kind} does not honour unlessReleasedSince (it grants as usual)`);
    const name = uniq('since');
    const a = await claim(s, name, 'A', 10_000);
    assert.equal(a.outcome, 'acquired');
    const grantedAt = a.storeNowMs;
    assert.equal(await s.release({ name, holder: 'A', expect: [a.nonce] }), true);
    const refused = await claim(s, name, 'B', 10_000, grantedAt - 1000);
    assert.equal(refused.outcome, 'busy', `refused: ${JSON.stringify(refused, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`);
    assert.equal(refused.outcome === 'busy' && refused.releasedSince, true, 'flagged releasedSince');
    assert.equal(refused.holder, null, 'nobody holds it');
    // Nothing was written: a plain claim now takes the next term, as it would have before.
    const c = await claim(s, name, 'C', 10_000);
    assert.equal(c.outcome, 'acquired');
    assert.ok(c.outcome === 'acquired' && a.outcome === 'acquired' && c.token > a.token, 'a larger token after the refusal');
    await s.release({ name, holder: 'C', expect: [c.nonce] });
  });

  void it('unlessReleasedSince grants what it would grant without: a term begun before it, an expired term, a never-held lease', async (ctx) => {
    const s = store();
    if (s.honoursReleasedSince !== true) return ctx.skip(`${s.kind} does not honour unlessReleasedSince (it grants as usual)`);
    // Released, but begun before the contender's time: that term was not the one it waits to follow.
    const before = uniq('since-before');
    const a = await claim(s, before, 'A', 10_000);
    assert.equal(a.outcome, 'acquired');
    assert.equal(await s.release({ name: before, holder: 'A', expect: [a.nonce] }), true);
    const b = await claim(s, before, 'B', 10_000, a.storeNowMs + clockSlackMs + 1000);
    assert.equal(b.outcome, 'acquired', 'a released term begun before unlessReleasedSince does not refuse');
    await s.release({ name: before, holder: 'B', expect: [b.nonce] });
    // Expired, not released: its holder may have died before the work; the claim is granted.
    const expired = uniq('since-expired');
    const e = await claim(s, expired, 'A', shortTtlMs);
    assert.equal(e.outcome, 'acquired');
    await sleep(shortTtlMs + slackMs);
    const f = await claim(s, expired, 'B', 10_000, e.storeNowMs - 1000);
    assert.equal(f.outcome, 'acquired', 'an expired term does not refuse');
    await s.release({ name: expired, holder: 'B', expect: [f.nonce] });
    // Never held.
    const fresh = uniq('since-fresh');
    const g = await claim(s, fresh, 'A', 10_000, 0);
    assert.equal(g.outcome, 'acquired');
    await s.release({ name: fresh, holder: 'A', expect: [g.nonce] });
  });

  void it('a busy answer that says when the holding term was granted says its start', async (ctx) => {
    const s = store();
    const name = uniq('granted');
    const a = await claim(s, name, 'A', 10_000);
    assert.equal(a.outcome, 'acquired');
    const busy = await claim(s, name, 'B', 10_000);
    assert.equal(busy.outcome, 'busy');
    if (busy.outcome !== 'busy' || busy.grantedAtMs === undefined) return ctx.skip(`${s.kind} does not report grantedAtMs`);
    const bound = clockSlackMs + 2;
    assert.ok(Math.abs(busy.grantedAtMs - a.storeNowMs) <= bound, `granted at ${busy.grantedAtMs}, acquired at ${a.storeNowMs} by the store's clock (within ${bound} ms)`);
    assert.ok(busy.grantedAtMs <= busy.storeNowMs + bound, 'not after the busy answer');
    // unlessReleasedSince at or before the grant, the term live: busy (not a refusal), the same start.
    const held = await claim(s, name, 'C', 10_000, busy.grantedAtMs);
    assert.equal(held.outcome, 'busy');
    assert.ok(held.outcome === 'busy' && held.releasedSince !== true && held.holder === 'A', 'a live term is busy, whoever began it');
    await s.release({ name, holder: 'A', expect: [a.nonce] });
  });
}
