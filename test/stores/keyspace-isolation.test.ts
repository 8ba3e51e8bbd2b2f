import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { ConfigError } from '../../src/core/errors.js';
import { createEtcdStore, parseEtcdUrl, type EtcdStore } from '../../src/backends/etcd/index.js';
import { validatePrefix as validateEtcdPrefix } from '../../src/backends/etcd/client.js';
import { ETCD_SUBSPACES, EtcdKeys } from '../../src/backends/etcd/keys.js';
import { EtcdSlotLedger } from '../../src/backends/etcd/slots.js';
import { validatePrefix as validateRedisPrefix } from '../../src/backends/redis/connect.js';
import { keysFor } from '../../src/backends/redis/keys.js';
import type { ClaimRequest } from '../../src/backends/store.js';
import { openStore } from '../../src/backends/index.js';
import { TEST_ETCD_URL, deleteEtcdKeys, etcdAdmin, freshEtcdPrefix } from '../helpers/etcd-store.js';
import { TEST_PG_URL } from '../helpers/stores.js';
import { TEST_REDIS_URL, deleteRedisKeys, freshRedisPrefix } from '../helpers/redis-store.js';
import { createRedisStore } from '../../src/backends/redis/index.js';
import pg from 'pg';

// Issue 28 row 1 and its class: no store can name, read or delete another's keys, whatever the
// two prefixes are. The key-layout functions are checked over generated prefix pairs; a smaller
// real-etcd check writes in one store and looks from the other.

/** mulberry32: a seeded generator, so a failing pair can be replayed from the printed seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SEED = Number(process.env['LEASEHOLD_TEST_SEED'] ?? Date.now() % 1_000_000);
console.log(`keyspace-isolation: seed ${SEED} (replay with LEASEHOLD_TEST_SEED=${SEED})`);

/** Pieces prefixes are made of: separators, glob characters, %-escapes, unicode, every sub-space name. */
const PIECES = ['a', 'nest', 'x1', '/', '//', ':', '{', '}', '*', '?', '[', ']', '%2F', '%', '-', '.', '_', ' ', 'é', '日本', '🦀', 'term', 'state', 'fleet', 'slots', 'lease', 'events', 'freed'];

function randomPrefix(r: () => number): string {
  const n = 1 + Math.floor(r() * 5);
  let s = '';
  for (let i = 0; i < n; i++) s += PIECES[Math.floor(r() * PIECES.length)]!;
  return s;
}

/** Random pairs, and adversarial ones: one the other plus a segment (any sub-space name, or random). */
function prefixPairs(extraSegments: readonly string[], separator: string): [string, string][] {
  const r = prng(SEED);
  const pairs: [string, string][] = [];
  for (let i = 0; i < 3000; i++) {
    const a = randomPrefix(r);
    const roll = r();
    if (roll < 0.3) pairs.push([a, randomPrefix(r)]);
    else if (roll < 0.7) pairs.push([a, `${a}${separator}${extraSegments[Math.floor(r() * extraSegments.length)]!}`]);
    else if (roll < 0.85) pairs.push([a, `${a}${separator}${extraSegments[Math.floor(r() * extraSegments.length)]!}${separator}${randomPrefix(r)}`]);
    else pairs.push([a, `${a}${randomPrefix(r)}`]);
  }
  return pairs;
}

function accepted(validate: (p: string) => string, p: string): string | null {
  try {
    return validate(p);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `prefix ${JSON.stringify(p)} was refused with ${String(err)}, not a ConfigError`);
    assert.equal(err.code, 'CONFIG');
    return null;
  }
}

const NAMES = ['', 'a', 'term', 'a/b', '%2F', 'schema-version', 'agent/x', '🦀', '*', 'x}y'];

/** Every key the etcd layout names for a prefix (a few names), and every range it reads or deletes. */
function etcdLayout(prefix: string): { keys: string[]; ranges: string[] } {
  const k = new EtcdKeys(prefix);
  const keys = [k.version.toString(), k.floorKey.toString()];
  for (const n of NAMES) {
    keys.push(k.term(n).toString(), k.state(n).toString(), k.renew(n).toString(), k.history(n, '7').toString(), k.ended('42', n).toString());
    keys.push(`${k.fleetPrefix}agent/${encodeURIComponent(n)}`, `${k.fleetPrefix}own/${encodeURIComponent(n)}`, `${k.slotsPrefix}${encodeURIComponent(n)}/${encodeURIComponent(n)}`);
  }
  keys.push(k.session('42').toString());
  const ranges = [k.termPrefix, k.statePrefix, k.renewPrefix, k.historyPrefix, k.sessionPrefix, k.endedPrefix, k.fleetPrefix, k.slotsPrefix, k.endedOf('42')];
  for (const n of NAMES) ranges.push(k.historyOf(n).toString(), `${k.slotsPrefix}${encodeURIComponent(n)}/`);
  return { keys, ranges };
}

/** The key lies in one of the prefix's declared sub-spaces (so the sub-space list is the whole layout). */
function inDeclaredSubspace(prefix: string, key: string): boolean {
  return ETCD_SUBSPACES.some((s) => key === `${prefix}/${s}` || key.startsWith(`${prefix}/${s}/`));
}

void describe('key-layout functions over generated prefix pairs', () => {
  void it('etcd: two accepted prefixes are the same store, or no key of one lies in a key or range of the other', () => {
    let checked = 0;
    let refused = 0;
    for (const [a, b] of prefixPairs(ETCD_SUBSPACES, '/')) {
      const pa = accepted(validateEtcdPrefix, a);
      const pb = accepted(validateEtcdPrefix, b);
      if (pa === null || pb === null) {
        refused++;
        continue;
      }
      if (pa === pb) continue;
      checked++;
      const la = etcdLayout(pa);
      const lb = etcdLayout(pb);
      for (const [x, y] of [
        [la, lb],
        [lb, la],
      ] as const) {
        for (const key of x.keys) {
          assert.ok(!y.keys.includes(key), `prefixes ${JSON.stringify(pa)} and ${JSON.stringify(pb)} both name key ${JSON.stringify(key)}`);
          for (const range of y.ranges) {
            assert.ok(!key.startsWith(range), `key ${JSON.stringify(key)} of prefix ${JSON.stringify(x === la ? pa : pb)} is in range ${JSON.stringify(range)} of the other`);
          }
        }
      }
    }
    assert.ok(checked > 500 && refused > 100, `the generator exercised both sides (${checked} disjoint pairs, ${refused} refused)`);
  });

  void it('etcd: every key the layout names lies in a declared sub-space (the list the prefix rule refuses)', () => {
    for (const p of ['leasehold', 'teams/payments', '日本/x']) {
      for (const key of etcdLayout(p).keys) assert.ok(inDeclaredSubspace(p, key), `${key} is outside the sub-spaces ${ETCD_SUBSPACES.join(', ')}`);
    }
  });

  void it('etcd: a prefix with a sub-space name as a later segment is refused, naming the rule', () => {
    for (const s of ETCD_SUBSPACES) {
      assert.throws(
        () => validateEtcdPrefix(`nest/${s}`),
        (err: unknown) => err instanceof ConfigError && err.code === 'CONFIG' && err.message.includes(`"${s}"`) && /inside the store at prefix "nest"/.test(err.message),
      );
      assert.throws(() => validateEtcdPrefix(`a/b/${s}/c`), ConfigError);
    }
    // Through a URL too, however it is spelled: %-encoded, with slashes around it.
    for (const u of ['etcd://h:2379?prefix=nest%2Fterm', 'etcd://h:2379?prefix=/nest/term/', 'etcd://h:2379?prefix=nest/slots%2Fx']) {
      assert.throws(() => parseEtcdUrl(u), (err: unknown) => err instanceof ConfigError && /is a name leasehold uses under every prefix/.test(err.message), u);
    }
    // The first segment may be anything: no other prefix's keys start with it and a slash.
    assert.equal(validateEtcdPrefix('term'), 'term');
    assert.equal(validateEtcdPrefix('/teams/payments/'), 'teams/payments');
  });

  void it('redis: two accepted prefixes are the same store, or their keys and channels are disjoint', () => {
    let checked = 0;
    let refused = 0;
    const segments = ['lease', 'events', 'names', 'layout', 'floor', 'freed', 'fleet', 'slots', '{x}', '*'];
    for (const [a, b] of prefixPairs(segments, ':')) {
      const pa = accepted(validateRedisPrefix, a);
      const pb = accepted(validateRedisPrefix, b);
      if (pa === null || pb === null) {
        refused++;
        continue;
      }
      if (pa === pb) continue;
      checked++;
      // Every key of a store starts with its hash tag `{prefix}:` and a prefix has no braces, so
      // the tag ends where the prefix does: no key of one starts with the other's tag.
      const ka = keysFor(pa);
      const kb = keysFor(pb);
      for (const [x, y, px, py] of [
        [ka, kb, pa, pb],
        [kb, ka, pb, pa],
      ] as const) {
        const own = [x.history, x.names, x.layout, x.floor, ...NAMES.flatMap((n) => [x.lease(n), x.leaseHistory(n)])];
        for (const key of own) {
          assert.ok(key.startsWith(`{${px}}:`));
          assert.ok(!key.startsWith(`{${py}}`), `key ${key} of prefix ${px} is under ${py}'s tag`);
        }
        assert.notEqual(x.channel, y.channel);
      }
    }
    assert.ok(checked > 200 && refused > 100, `the generator exercised both sides (${checked} disjoint pairs, ${refused} refused)`);
  });
});

function contend(name: string, holder: string): ClaimRequest {
  return { name, holder, ttlMs: 30_000, expect: null, nextNonce: `${holder}-n1` };
}

async function openEtcd(prefix: string): Promise<EtcdStore> {
  const s = await createEtcdStore({ url: TEST_ETCD_URL, prefix });
  await s.migrate();
  return s;
}

void describe('etcd stores at nested prefixes (issue 28 row 1)', () => {
  const bases: string[] = [];
  after(async () => {
    for (const b of bases) await deleteEtcdKeys(b);
  });

  void it('migrate --min-token on "nest" (no leases) never ends the terms of a store at "nest/term": that prefix is refused', async () => {
    const base = freshEtcdPrefix();
    bases.push(base);
    const outer = await openEtcd(base);
    let inner: EtcdStore;
    try {
      inner = await openEtcd(`${base}/term`);
    } catch (err) {
      // Refused: no store can live inside another's term keys, so the reported loss cannot happen.
      assert.ok(err instanceof ConfigError, String(err));
      assert.match(err.message, /segment "term"/);
      await outer.close();
      return;
    }
    try {
      const names = Array.from({ length: 12 }, (_, i) => `job-${i}`);
      const got = await inner.claim(names.map((n) => contend(n, 'inner-holder')));
      assert.ok(got.every((r) => r.outcome === 'acquired'));
      const m = await outer.migrate({ minToken: 5000n });
      assert.equal(m.tokenFloor?.endedTerms, 0, `migrate --min-token on "${base}" ended ${m.tokenFloor?.endedTerms} terms of another store`);
      assert.equal((await inner.schemaStatus()).current, (await inner.schemaStatus()).expected);
      assert.equal((await inner.list()).filter((l) => l.holder === 'inner-holder').length, 12);
    } finally {
      await inner.close();
      await outer.close();
    }
  });

  void it('accepted nested prefixes (either way round) see nothing of each other: reads, revokes, history and min-token', async () => {
    const base = freshEtcdPrefix();
    bases.push(base);
    // Every pair the rule accepts where one prefix is the other plus segments.
    const prefixes = [base, `${base}/jobs`, `${base}/jobs/term-x`, `${base}/terms`];
    const stores = await Promise.all(prefixes.map((p) => openEtcd(p)));
    try {
      for (const [i, s] of stores.entries()) {
        const got = await s.claim([contend('shared', `holder-${i}`), contend(`only-${i}`, `holder-${i}`)]);
        assert.ok(got.every((r) => r.outcome === 'acquired'), `store ${prefixes[i]}: ${JSON.stringify(got.map((r) => r.outcome))}`);
      }
      // A `--once-per` key that succeeded in each (what row 1 saw run again after the loss).
      const term = async (i: number): Promise<{ name: string; holder: string; token: bigint }> => {
        const [r] = await stores[i]!.claim([contend('cron', `cron-${i}`)]);
        assert.ok(r?.outcome === 'acquired');
        return { name: 'cron', holder: `cron-${i}`, token: r.token };
      };
      const ledgers = await Promise.all(prefixes.map((p) => EtcdSlotLedger.fromUrl(TEST_ETCD_URL, p)));
      for (const [i, ledger] of ledgers.entries()) {
        const t = await term(i);
        assert.equal((await ledger.claim({ ...t, key: 'nightly', slotAtMs: null, onInterrupted: 'skip', rerunFailed: true })).outcome, 'claimed');
        assert.equal((await ledger.complete({ ...t, key: 'nightly', status: 'succeeded', exitCode: 0, reason: null })).completed, true);
      }
      for (const [i, s] of stores.entries()) {
        const held = (await s.list()).map((l) => `${l.name}:${l.holder}`).sort();
        assert.deepEqual(held, [`cron:cron-${i}`, `only-${i}:holder-${i}`, `shared:holder-${i}`], `store ${prefixes[i]} sees ${held.join(', ')}`);
        const names = new Set((await s.history()).map((h) => h.name));
        assert.deepEqual([...names].sort(), ['cron', `only-${i}`, 'shared'].sort(), `store ${prefixes[i]}'s history`);
      }
      // A revoke in the outermost store ends its own term of the shared name only.
      assert.equal((await stores[0]!.revoke('shared', 'isolation test')).revoked, true);
      for (const [j, other] of stores.entries()) {
        if (j > 0) assert.equal((await other.list()).find((l) => l.name === 'shared')?.holder, `holder-${j}`, `${prefixes[j]} after a revoke in ${base}`);
      }
      // Raising the floor of each in turn ends only its own terms (two, or one after the revoke, and cron).
      for (const [i, s] of stores.entries()) {
        const m = await s.migrate({ minToken: 5000n + BigInt(i) });
        assert.equal(m.tokenFloor?.endedTerms, i === 0 ? 2 : 3, `migrate --min-token on ${prefixes[i]}`);
        for (const [j, other] of stores.entries()) {
          if (j <= i) continue;
          assert.equal((await other.list()).filter((l) => l.holder !== null).length, 3, `${prefixes[j]} after min-token on ${prefixes[i]}`);
          assert.equal((await other.schemaStatus()).current, (await other.schemaStatus()).expected);
        }
      }
      for (const [i, ledger] of ledgers.entries()) {
        assert.deepEqual((await ledger.records('cron')).map((r) => `${r.key}:${r.status}`), ['nightly:succeeded'], `${prefixes[i]}'s slot ledger`);
        await ledger.close();
      }
      // And everything each store wrote lies in one of its declared sub-spaces.
      const admin = await etcdAdmin();
      try {
        const all = (await admin.kv.range({ key: Buffer.from(`${base}/`), range_end: Buffer.from(`${base}0`) })).kvs.map((kv) => kv.key.toString());
        for (const key of all) {
          const owner = [...prefixes].sort((x, y) => y.length - x.length).find((p) => key.startsWith(`${p}/`))!;
          assert.ok(inDeclaredSubspace(owner, key), `${key} is outside ${owner}'s declared sub-spaces`);
        }
      } finally {
        admin.close();
      }
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });
});

void describe('PostgreSQL schemas', () => {
  const pgUrl = (schema: string): string => `${TEST_PG_URL}${TEST_PG_URL.includes('?') ? '&' : '?'}schema=${schema}`;
  const dropSchema = async (schema: string): Promise<void> => {
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    try {
      await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    } finally {
      await c.end();
    }
  };

  void it('a schema too long for its NOTIFY channel is refused up front (it used to migrate, then fail every release)', async () => {
    const id = Math.random().toString(36).slice(2, 8);
    const tooLong = `lh_t_${id}_`.padEnd(48, 'x');
    assert.equal(tooLong.length, 48);
    try {
      await assert.rejects(openStore(pgUrl(tooLong)), (err: unknown) => err instanceof ConfigError && /at most 47 characters/.test(err.message));
    } finally {
      await dropSchema(tooLong);
    }
    // The longest accepted schema works end to end: claim, then a release that notifies.
    const longest = tooLong.slice(0, 47);
    const s = await openStore(pgUrl(longest));
    try {
      await s.migrate();
      const [r] = await s.claim([contend('a', 'h')]);
      assert.equal(r?.outcome, 'acquired');
      assert.equal(await s.release({ name: 'a', holder: 'h', expect: ['h-n1'] }), true);
    } finally {
      await s.close();
      await dropSchema(longest);
    }
  });
});

void describe('Redis stores at prefixes that look nested', () => {
  void it('a prefix that is another plus a segment (a, a:lease:x, a:events, a.x) sees nothing of the other: reads, revokes, history and min-token', async () => {
    const base = freshRedisPrefix();
    const prefixes = [base, `${base}:lease:x`, `${base}:events`, `${base}.x`];
    const stores = await Promise.all(prefixes.map((p) => createRedisStore({ url: TEST_REDIS_URL, prefix: p })));
    try {
      for (const s of stores) await s.migrate();
      for (const [i, s] of stores.entries()) {
        // 'x' is the name whose lease hash in `base` is `{base}:lease:x`, the other prefix's text.
        const got = await s.claim([contend('x', `holder-${i}`), contend(`only-${i}`, `holder-${i}`)]);
        assert.ok(got.every((r) => r.outcome === 'acquired'), `store ${prefixes[i]}: ${JSON.stringify(got.map((r) => r.outcome))}`);
      }
      assert.equal((await stores[0]!.revoke('x', 'isolation test')).revoked, true);
      await stores[0]!.migrate({ minToken: 8n * 10n ** 15n });
      for (const [i, s] of stores.entries()) {
        const held = (await s.list()).filter((l) => l.holder !== null).map((l) => `${l.name}:${l.holder}`).sort();
        const want = i === 0 ? [`only-0:holder-0`] : [`only-${i}:holder-${i}`, `x:holder-${i}`];
        assert.deepEqual(held, want, `store ${prefixes[i]} sees ${held.join(', ')}`);
        assert.deepEqual([...new Set((await s.history()).map((h) => h.name))].sort(), [`only-${i}`, 'x'].sort(), `store ${prefixes[i]}'s history`);
        if (i > 0) assert.ok((await s.nextToken!()) < 8n * 10n ** 15n, `${prefixes[i]} took the floor of ${base}`);
      }
    } finally {
      await Promise.all(stores.map((s) => s.close()));
      for (const p of prefixes) await deleteRedisKeys(p);
    }
  });
});
