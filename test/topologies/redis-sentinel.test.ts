/**
 * Redis behind Sentinel (scripts/services/redis-sentinel.mjs: a primary, one replica and three
 * Sentinels on loopback, down-after 1s), with holders on a redis+sentinel:// URL, TTL 3s:
 *
 * a. the primary killed (SIGKILL): after the Sentinels promote the replica, a term is held
 *    again; tokens increase across the promotion and none is issued twice; the follower's
 *    "freed" subscription followed the failover (a release reaches it within TTL/2).
 * b. split brain: the replica made a primary by hand (REPLICAOF NO ONE) while the primary lives.
 *    A holder there gets a larger token while the old holder still renews on the old primary:
 *    two holders believe they lead, and only the fence keeps the stale one's writes out. When
 *    the Sentinels demote the rogue primary, its holder's term ends (the replica, resynced,
 *    shows the old holder; before that, a renewal meets READONLY: c.).
 * c. the primary made read-only under its holder, its data intact: every renewal meets
 *    READONLY and the term ends by its TTL (READONLY is "unavailable", never a renewal).
 * d. rediss+sentinel:// with cacert=, cert=, key=: TLS to the Sentinels and the servers, a
 *    term held again after the primary is killed; a wrong CA is "unavailable".
 * e. the primary frozen (SIGSTOP) through a failover, then thawed, with one more holder on the
 *    primary's own address (not through Sentinel): what the thawed old primary grants before
 *    the Sentinels demote it is printed; tokens stay unique and the fence keeps order. With
 *    LEASEHOLD_TEST_REDIS_SENTINEL_MIN_REPLICAS_LAG=<s>, the servers run min-replicas-to-write 1
 *    with that lag, and the thawed primary must grant nothing.
 * f. a clean SENTINEL FAILOVER: the term may survive or end (a renewal the old primary
 *    acknowledged after the promotion is lost, and the next one, on the new primary, looks
 *    like a clone's: the term ends, safely), no token repeats, and a waiting
 *    follower gets the lease when the holder releases, told by a "freed" notification through
 *    the new primary (within TTL/2; without one it would wait for the expiry).
 *
 * Every holder writes through the Redis fence (fencedSet, on the shared test Redis, which does
 * not fail over) every 100ms of its term; the check: once a write with token T is accepted, no
 * write sent afterwards with a lower token is. The times without a leader, with two leaders,
 * and whether the term survived are printed (measured here, asserted nowhere).
 *
 * Ports: LEASEHOLD_TEST_REDIS_SENTINEL_PORT (default 26400: servers +0, +1; Sentinels +10..+12).
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { createRedisStore } from '../../src/backends/redis/index.js';
import type { RedisStore } from '../../src/backends/redis/store.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Term } from '../../src/core/lease.js';
import { FencedError, StoreUnavailableError, type LeaseLostError } from '../../src/core/errors.js';
import { fencedSet } from '../../src/fence/index.js';
import { deleteRedisKeys, freshRedisPrefix, TEST_REDIS_URL } from '../helpers/redis-store.js';
import { freshCerts, type Certs } from './tls-helpers.js';
import { leaderlessMs } from './shared.js';

interface Server {
  name: string;
  port: number;
  url: string;
  signal(sig: NodeJS.Signals): void;
  role(): Promise<string | null>;
  cli(args: string[], ms?: number): Promise<string | null>;
}
interface SentinelSet {
  url: string;
  servers: Server[];
  sentinels: Server[];
  primary(): Promise<Server | null>;
  waitForPrimary(o?: { not?: number; ms?: number }): Promise<Server>;
  failover(): Promise<void>;
  stop(): Promise<void>;
}
interface SentinelModule {
  redisBinaries(): { server: string; cli: string } | null;
  startRedisSentinel(o: { basePort: number; log?: (m: string) => void; tls?: Certs; minReplicasMaxLag?: number }): Promise<SentinelSet>;
}

const BASE = Number(process.env['LEASEHOLD_TEST_REDIS_SENTINEL_PORT'] ?? 26400);
const TTL_MS = 3000;
/** Scenario e with min-replicas-to-write 1 and this max lag (seconds) on the servers: Redis' own split-brain guard. */
const MIN_REPLICAS_LAG = process.env['LEASEHOLD_TEST_REDIS_SENTINEL_MIN_REPLICAS_LAG'];
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'redis').split(',').includes('redis');

async function sentinelModule(): Promise<SentinelModule> {
  // Plain JavaScript, no types: load it by URL (dist/test/topologies/ -> scripts/services/).
  const mjs = join(fileURLToPath(import.meta.url), '..', '..', '..', '..', 'scripts', 'services', 'redis-sentinel.mjs');
  return (await import(pathToFileURL(mjs).href)) as SentinelModule;
}

const mod = await sentinelModule();
const skip = !wanted ? 'redis not selected' : mod.redisBinaries() === null ? 'no redis-server / redis-cli binaries (apt-get install redis-server)' : false;

interface Held {
  who: string;
  token: bigint;
  startedAt: number;
  endedAt?: number;
  reason?: string;
}
interface Write {
  who: string;
  token: bigint;
  sentAt: number;
  doneAt: number;
  outcome: 'accepted' | 'fenced' | 'unknown';
}

/** The shared record of one scenario: every term of every holder, every fenced write. */
class Scenario {
  readonly terms: Held[] = [];
  readonly writes: Write[] = [];
  readonly prefix = freshRedisPrefix();
  readonly fencePrefix = freshRedisPrefix();
  private fence: RedisStore | undefined;
  private readonly stops: (() => Promise<void>)[] = [];

  async fenceStore(): Promise<RedisStore> {
    this.fence ??= await createRedisStore({ url: TEST_REDIS_URL, prefix: this.fencePrefix });
    return this.fence;
  }

  /** An elector named `who` on `url`, writing through the fence every 100ms of each term. */
  async holder(who: string, url: string): Promise<{ stop(): Promise<void> }> {
    const fence = await this.fenceStore();
    const store = await createRedisStore({ url, prefix: this.prefix, commandTimeoutMs: 1000, connectTimeoutMs: 1000 });
    const lh = new Leasehold({ store, closeStore: true, holderLabel: who });
    const elector = lh.elect(
      'job',
      {
        onElected: (term: Term) => {
          const h: Held = { who, token: term.token, startedAt: performance.now() };
          this.terms.push(h);
          term.signal.addEventListener('abort', () => {
            h.endedAt = performance.now();
            h.reason = (term.signal.reason as LeaseLostError | undefined)?.reason ?? 'unknown';
          });
          void (async () => {
            while (!term.signal.aborted) {
              const w: Write = { who, token: term.token, sentAt: performance.now(), doneAt: 0, outcome: 'unknown' };
              try {
                await fencedSet(fence, { resource: 'r', token: term.token, key: `{${this.fencePrefix}}:data`, markKey: `{${this.fencePrefix}}:mark`, value: who });
                w.outcome = 'accepted';
              } catch (err) {
                w.outcome = err instanceof FencedError ? 'fenced' : 'unknown';
              }
              w.doneAt = performance.now();
              this.writes.push(w);
              await sleep(100);
            }
          })();
        },
      },
      { ttl: TTL_MS },
    );
    let stopped = false;
    const stop = async (): Promise<void> => {
      if (stopped) return;
      stopped = true;
      await elector.stop();
      await lh.close();
    };
    this.stops.push(stop);
    return { stop };
  }

  live(): Held[] {
    return this.terms.filter((t) => t.endedAt === undefined);
  }

  async waitForTerm(ms: number, startedAfter = -Infinity): Promise<Held> {
    const end = performance.now() + ms;
    for (;;) {
      const t = this.terms.find((h) => h.endedAt === undefined && h.startedAt > startedAfter);
      if (t !== undefined) return t;
      if (performance.now() > end) throw new Error(`no term started within ${ms}ms; terms: ${this.describe()}`);
      await sleep(20);
    }
  }

  /** ms with no live term between from and to. */
  leaderless(from: number, to: number): number {
    return leaderlessMs(this.terms, from, to);
  }


  /** ms during which two holders' terms were both live. */
  overlap(): number {
    let total = 0;
    for (let i = 0; i < this.terms.length; i++) {
      for (let j = i + 1; j < this.terms.length; j++) {
        const a = this.terms[i]!;
        const b = this.terms[j]!;
        const from = Math.max(a.startedAt, b.startedAt);
        const to = Math.min(a.endedAt ?? performance.now(), b.endedAt ?? performance.now());
        if (to > from) total += to - from;
      }
    }
    return Math.round(total);
  }

  describe(): string {
    return this.terms.map((t) => `${t.who}:${t.token}${t.endedAt === undefined ? ' (live)' : ` (${t.reason})`}`).join(', ');
  }

  /** No token twice; tokens increase in the order terms began; the fence kept every write in token order. */
  checkTokensAndFence(): void {
    const tokens = this.terms.map((t) => t.token);
    assert.equal(new Set(tokens).size, tokens.length, `a token was issued twice: ${this.describe()}`);
    const byStart = [...this.terms].sort((a, b) => a.startedAt - b.startedAt).map((t) => t.token);
    for (let i = 1; i < byStart.length; i++) assert.ok(byStart[i]! > byStart[i - 1]!, `tokens do not increase in the order terms began: ${byStart.join(', ')}`);
    const accepted = this.writes.filter((w) => w.outcome === 'accepted');
    assert.ok(accepted.length > 0, 'no fenced write was accepted');
    for (const a of accepted) {
      for (const b of accepted) {
        if (b.sentAt > a.doneAt) assert.ok(b.token >= a.token, `the fence accepted token ${b.token} (${b.who}) after it had accepted ${a.token} (${a.who})`);
      }
    }
  }

  async close(): Promise<void> {
    for (const stop of this.stops) await stop().catch(() => undefined);
    await this.fence?.close();
    await deleteRedisKeys(this.fencePrefix);
  }
}

void describe(`Redis behind Sentinel (primary, replica, three Sentinels), TTL ${TTL_MS}ms`, { skip }, () => {
  let set: SentinelSet | undefined;
  let scenario: Scenario | undefined;
  before(() => {
    console.log(`[redis-sentinel] base port ${BASE}`);
  });
  after(async () => {
    await scenario?.close();
    await set?.stop();
  });

  async function fresh(minReplicasMaxLag?: number): Promise<{ set: SentinelSet; s: Scenario }> {
    await scenario?.close();
    await set?.stop();
    set = await mod.startRedisSentinel({ basePort: BASE, ...(minReplicasMaxLag === undefined ? {} : { minReplicasMaxLag }) });
    scenario = new Scenario();
    return { set, s: scenario };
  }

  void it('a. the primary killed: a term is held again after the failover, tokens increase, none twice', async (t) => {
    const { set, s } = await fresh();
    // A master name the Sentinels do not monitor: unavailable, saying so.
    const wrong = await createRedisStore({ url: set.url.replace(/mymaster$/, 'nosuch'), prefix: s.prefix, commandTimeoutMs: 1000, connectTimeoutMs: 1000 });
    try {
      await assert.rejects(wrong.list(), (e: unknown) => e instanceof StoreUnavailableError && /No such master with that name/.test(e.message));
    } finally {
      await wrong.close();
    }
    const holders = { a: await s.holder('a', set.url), b: await s.holder('b', set.url) };
    const first = await s.waitForTerm(10_000);
    await sleep(2000); // settled: renewals and fenced writes on the primary
    const old = (await set.primary())!;
    const faultAt = performance.now();
    old.signal('SIGKILL');
    const promoted = await set.waitForPrimary({ not: old.port, ms: 20_000 });
    const promotedAt = performance.now();
    // Past the TTL: a term that was going to end for the failover has ended by now.
    await sleep(Math.max(0, faultAt + TTL_MS - performance.now()));
    const survived = first.endedAt === undefined;
    const again = survived ? first : await s.waitForTerm(20_000, faultAt);
    const heldAt = performance.now();
    await sleep(1000);
    assert.ok(s.live().length === 1, `one live term after the failover: ${s.describe()}`);
    // The follower's subscriber lost its connection with the old primary: the "freed"
    // notification of a release reaches it only if it reconnected through the Sentinels.
    const releasedAt = performance.now();
    await holders[s.live()[0]!.who as 'a' | 'b'].stop();
    const next = await s.waitForTerm(TTL_MS * 2, releasedAt);
    const handover = Math.round(next.startedAt - releasedAt);
    const msg =
      `SIGKILL of the primary: Sentinels promoted ${promoted.name} after ${Math.round(promotedAt - faultAt)}ms; ` +
      `${survived ? 'the term survived' : `the term ended (${first.reason} after ${Math.round(first.endedAt! - faultAt)}ms), a term was held again ${Math.round(again.startedAt - faultAt)}ms after the kill`}; ` +
      `no leader for ${s.leaderless(faultAt, heldAt)}ms; two leaders for ${s.overlap()}ms; after a release the follower led in ${handover}ms; terms ${s.describe()}`;
    console.log(`[redis-sentinel] ${msg}`);
    t.diagnostic(msg);
    assert.ok(handover < TTL_MS / 2, `the follower waited ${handover}ms: its "freed" subscription did not follow the failover`);
    s.checkTokensAndFence();
  });

  void it('b. split brain: a replica promoted by hand while the primary lives; the fence keeps the stale holder out', async (t) => {
    const { set, s } = await fresh();
    const primary = (await set.primary())!;
    const replica = set.servers.find((x) => x.port !== primary.port)!;
    await s.holder('old', set.url);
    const oldTerm = await s.waitForTerm(10_000);
    await sleep(1000); // replicated to the replica
    const splitAt = performance.now();
    assert.equal(await replica.cli(['REPLICAOF', 'NO', 'ONE']), 'OK');
    // A client sent to the rogue primary (a stale address, a partition): it sees the old term
    // run out by its own clock, with no renewals reaching it, and claims.
    await s.holder('new', replica.url);
    const newTerm = await s.waitForTerm(TTL_MS + 5000, splitAt);
    assert.equal(newTerm.who, 'new');
    assert.ok(newTerm.token > oldTerm.token, `the rogue primary issued ${newTerm.token}, not above ${oldTerm.token}`);
    await sleep(1000); // both write through the fence
    assert.equal(oldTerm.endedAt, undefined, 'the old holder lost its term; no split brain to observe');
    // The Sentinels find a replica that calls itself primary and demote it (in their own time:
    // an INFO every 10s, 8s of grace); if they have not within 25s, demote it as they would.
    let demotedBy = 'the Sentinels';
    const end = performance.now() + 25_000;
    while ((await replica.role()) !== 'slave') {
      if (performance.now() > end) {
        demotedBy = 'the test (the Sentinels had not within 25s)';
        await replica.cli(['REPLICAOF', '127.0.0.1', String(primary.port)]);
      }
      await sleep(100);
    }
    const demotedAt = performance.now();
    const deadline = demotedAt + TTL_MS + 1000;
    while (newTerm.endedAt === undefined && performance.now() < deadline) await sleep(50);
    const msg =
      `split brain: two holders led for ${Math.round(Math.min(newTerm.endedAt ?? performance.now(), oldTerm.endedAt ?? Infinity) - newTerm.startedAt)}ms ` +
      `(rogue primary demoted by ${demotedBy} ${Math.round(demotedAt - splitAt)}ms after REPLICAOF NO ONE; its holder's term ended ` +
      `${newTerm.endedAt === undefined ? 'never (wrong)' : `${Math.round(newTerm.endedAt - demotedAt)}ms after the demotion (${newTerm.reason})`}); ` +
      `stale holder's writes fenced: ${s.writes.filter((w) => w.who === 'old' && w.outcome === 'fenced').length}; terms ${s.describe()}`;
    console.log(`[redis-sentinel] ${msg}`);
    t.diagnostic(msg);
    assert.notEqual(newTerm.endedAt, undefined, 'a holder on a demoted primary kept its term: READONLY counted as a renewal');
    s.checkTokensAndFence();
    const fenced = s.writes.filter((w) => w.who === 'old' && w.outcome === 'fenced');
    assert.ok(fenced.length > 0, 'the stale holder never wrote after the new one: the fence was not exercised');
    const lastOldAccepted = Math.max(...s.writes.filter((w) => w.who === 'old' && w.outcome === 'accepted').map((w) => w.doneAt));
    const firstNewAccepted = Math.min(...s.writes.filter((w) => w.who === 'new' && w.outcome === 'accepted').map((w) => w.doneAt));
    assert.ok(lastOldAccepted < firstNewAccepted + 1000, 'the stale holder kept writing long after the new one');
  });

  void it('c. the primary turned read-only under its holder: READONLY ends the term, never renews it', async (t) => {
    const { set, s } = await fresh();
    await s.holder('a', set.url);
    const first = await s.waitForTerm(10_000);
    await sleep(1500);
    const primary = (await set.primary())!;
    // A replica of a port where nothing listens: read-only, and it keeps its data (the holder's
    // record, with the holder's nonce) since there is nothing to sync from. Only READONLY stands
    // between a renewal and success.
    const demotedAt = performance.now();
    assert.equal(await primary.cli(['REPLICAOF', '127.0.0.1', String(BASE + 5)]), 'OK');
    while (first.endedAt === undefined && performance.now() < demotedAt + TTL_MS + 1000) await sleep(20);
    const endedAfter = first.endedAt === undefined ? undefined : Math.round(first.endedAt - demotedAt);
    await primary.cli(['REPLICAOF', 'NO', 'ONE']);
    const msg = `primary read-only under its holder: the term ${endedAfter === undefined ? 'went on (wrong)' : `ended (${first.reason}) ${endedAfter}ms after`}; terms ${s.describe()}`;
    console.log(`[redis-sentinel] ${msg}`);
    t.diagnostic(msg);
    assert.notEqual(endedAfter, undefined, 'a holder whose renewals met READONLY kept its term');
    assert.ok(endedAfter! <= TTL_MS, `the term ended ${endedAfter}ms after the demotion, later than its TTL`);
    s.checkTokensAndFence();
  });

  void it('d. rediss+sentinel://: TLS to the Sentinels and the servers, through a failover; a wrong CA is refused', async (t) => {
    await scenario?.close();
    await set?.stop();
    scenario = undefined;
    const certs = await freshCerts();
    try {
      set = await mod.startRedisSentinel({ basePort: BASE, tls: certs });
      const s = (scenario = new Scenario());
      assert.match(set.url, /^rediss\+sentinel:\/\//);
      const q = `?cacert=${certs.ca}&cert=${certs.clientCert}&key=${certs.clientKey}`;
      const wrong = await createRedisStore({ url: `${set.url}?cacert=${certs.otherCa}`, prefix: s.prefix, commandTimeoutMs: 1000, connectTimeoutMs: 1000 });
      let refusal = '';
      try {
        await assert.rejects(wrong.list(), (e: unknown) => {
          refusal = (e as Error).message;
          return e instanceof StoreUnavailableError;
        });
      } finally {
        await wrong.close();
      }
      // The reason, not only "Connection is closed." (ioredis keeps the Sentinel's TLS error to itself).
      assert.match(refusal, /TLS to Sentinel 127\.0\.0\.1:\d+ failed: .*certificate/i, refusal);
      await s.holder('a', `${set.url}${q}`);
      await s.holder('b', `${set.url}${q}`);
      const first = await s.waitForTerm(10_000);
      await sleep(1000);
      const old = (await set.primary())!;
      const faultAt = performance.now();
      old.signal('SIGKILL');
      await set.waitForPrimary({ not: old.port, ms: 20_000 });
      await sleep(Math.max(0, faultAt + TTL_MS - performance.now()));
      const again = first.endedAt === undefined ? first : await s.waitForTerm(20_000, faultAt);
      const msg = `TLS: a wrong CA is refused (${refusal.replace(/^.* is unreachable /, '').slice(0, 200)}); after SIGKILL of the primary a term was held again ${Math.max(0, Math.round(again.startedAt - faultAt))}ms after the kill; terms ${s.describe()}`;
      console.log(`[redis-sentinel] ${msg}`);
      t.diagnostic(msg);
      await sleep(500);
      s.checkTokensAndFence();
    } finally {
      await scenario?.close();
      scenario = undefined;
      await set?.stop();
      set = undefined;
      rmSync(certs.dir, { recursive: true, force: true });
    }
  });

  void it(`e. the primary frozen through a failover, then thawed, with a client still pointed at it${MIN_REPLICAS_LAG === undefined ? '' : ` (min-replicas-to-write 1, max lag ${MIN_REPLICAS_LAG}s)`}`, async (t) => {
    const { set, s } = await fresh(MIN_REPLICAS_LAG === undefined ? undefined : Number(MIN_REPLICAS_LAG));
    const old = (await set.primary())!;
    await s.holder('a', set.url);
    await s.holder('b', set.url);
    const first = await s.waitForTerm(10_000);
    // A process configured with the primary's own address (not through Sentinel), waiting.
    await s.holder('direct', old.url);
    await sleep(1500);
    const frozenAt = performance.now();
    old.signal('SIGSTOP');
    let thawedAt: number | undefined;
    try {
      await set.waitForPrimary({ not: old.port, ms: 20_000 });
      const promotedAt = performance.now();
      // With min-replicas-to-write and one replica, the promoted primary has no replica while the
      // old one is frozen, and refuses writes: no term until the old one is back as its replica.
      let next = MIN_REPLICAS_LAG === undefined ? await s.waitForTerm(15_000, frozenAt) : undefined;
      if (next === undefined) await sleep(TTL_MS);
      old.signal('SIGCONT');
      thawedAt = performance.now();
      // The Sentinels demote the thawed old primary in their own time; if not within 25s, as they would.
      let demotedBy = 'the Sentinels';
      const end = performance.now() + 25_000;
      while ((await old.role()) !== 'slave') {
        if (performance.now() > end) {
          demotedBy = 'the test (the Sentinels had not within 25s)';
          await old.cli(['REPLICAOF', '127.0.0.1', String((await set.primary())!.port)]);
        }
        await sleep(100);
      }
      const demotedAt = performance.now();
      next ??= await s.waitForTerm(30_000, frozenAt);
      await sleep(TTL_MS + 500);
      const direct = s.terms.filter((h) => h.who === 'direct' && h.startedAt > thawedAt!);
      const legitFenced = s.writes.filter((w) => w.who !== 'direct' && w.outcome === 'fenced' && w.sentAt > thawedAt!).length;
      const msg =
        `frozen primary: first term ${first.endedAt === undefined ? 'survived' : `ended (${first.reason}) ${Math.round(first.endedAt - frozenAt)}ms after the freeze`}; ` +
        `Sentinels promoted after ${Math.round(promotedAt - frozenAt)}ms; a term was held again ${Math.round(next.startedAt - frozenAt)}ms after the freeze; ` +
        `no leader for ${s.leaderless(frozenAt, next.startedAt)}ms; thawed after ${Math.round(thawedAt - frozenAt)}ms, demoted by ${demotedBy} ${Math.round(demotedAt - thawedAt)}ms later; ` +
        `the client pointed at it got ${direct.length === 0 ? 'no term' : `${direct.length} term(s) from it (${direct.map((d) => `${d.token}, ${Math.round((d.endedAt ?? performance.now()) - d.startedAt)}ms`).join('; ')})`}; ` +
        `two leaders for ${s.overlap()}ms; writes of the Sentinel holders fenced after the thaw: ${legitFenced}; terms ${s.describe()}`;
      console.log(`[redis-sentinel] ${msg}`);
      t.diagnostic(msg);
      for (const d of direct) assert.notEqual(d.endedAt, undefined, `the term ${d.token} granted by the demoted old primary never ended`);
      if (MIN_REPLICAS_LAG !== undefined) assert.equal(direct.length, 0, 'min-replicas-to-write did not stop the thawed old primary granting a term');
      s.checkTokensAndFence();
    } finally {
      if (thawedAt === undefined) old.signal('SIGCONT');
    }
  });

  void it('f. a clean SENTINEL FAILOVER: no token twice, and a waiting follower gets the lease', async (t) => {
    const { set, s } = await fresh();
    const a = await s.holder('a', set.url);
    const first = await s.waitForTerm(10_000);
    const b = await s.holder('b', set.url);
    const [holder, follower] = first.who === 'a' ? [a, b] : [b, a];
    await sleep(1500);
    const old = (await set.primary())!;
    const faultAt = performance.now();
    await set.failover();
    const promoted = await set.waitForPrimary({ not: old.port, ms: 20_000 });
    const promotedAt = performance.now();
    await sleep(TTL_MS); // the old primary demoted, clients moved
    const current = s.live();
    assert.equal(current.length, 1, `one live term after the failover: ${s.describe()}`);
    const survived = first.endedAt === undefined;
    const releasedAt = performance.now();
    await (current[0]!.who === first.who ? holder : follower).stop();
    const next = await s.waitForTerm(TTL_MS * 2, releasedAt);
    const handover = Math.round(next.startedAt - releasedAt);
    const msg =
      `SENTINEL FAILOVER: ${promoted.name} primary after ${Math.round(promotedAt - faultAt)}ms; ` +
      `${survived ? 'the term survived' : `the term ended (${first.reason} ${Math.round(first.endedAt! - faultAt)}ms after the failover)`}; ` +
      `no leader for ${s.leaderless(faultAt, releasedAt)}ms; after a release the follower led in ${handover}ms; terms ${s.describe()}`;
    console.log(`[redis-sentinel] ${msg}`);
    t.diagnostic(msg);
    assert.ok(handover < TTL_MS / 2, `the follower waited ${handover}ms: no "freed" notification reached it through the new primary`);
    s.checkTokensAndFence();
  });

  void it('g. a failover announced while the client is reconnecting does not end the client for good', async (t) => {
    // ioredis 6.0's failover detector, left from the last connection, hears +switch-master
    // while the client is asking a Sentinel for the primary; it disconnects the connector, the
    // reconnect fails with "Connection is closed." and ioredis ends the client: every command
    // after that failed the same way, for ever (redis/ioredis#1683). Made certain here: the
    // Sentinel the client asks first is frozen (its answer waits for the 5s command timeout)
    // while the others fail over.
    const { set } = await fresh();
    const store = await createRedisStore({ url: set.url, prefix: freshRedisPrefix(), commandTimeoutMs: 1000, connectTimeoutMs: 5000 });
    const [first, other] = [set.sentinels[0]!, set.sentinels[1]!];
    try {
      await store.list(); // connected, and the failover detector subscribed
      const old = (await set.primary())!;
      first.signal('SIGSTOP');
      let frozen = true;
      try {
        const faultAt = performance.now();
        // Drops the store's connection: its reconnect asks the frozen Sentinel first.
        await old.cli(['CLIENT', 'KILL', 'TYPE', 'normal']);
        assert.equal(await other.cli(['SENTINEL', 'FAILOVER', 'mymaster'], 2000), 'OK');
        // The failover done by the two live Sentinels, then the frozen one back.
        const end = performance.now() + 20_000;
        while ((await other.cli(['SENTINEL', 'get-master-addr-by-name', 'mymaster']))?.split(/\r?\n/)[1] === String(old.port)) {
          assert.ok(performance.now() < end, 'the Sentinels did not fail over within 20s');
          await sleep(50);
        }
        await sleep(6000); // past the frozen Sentinel's command timeout: the reconnect has settled
        first.signal('SIGCONT');
        frozen = false;
        let lastError = '';
        const deadline = performance.now() + 15_000;
        for (;;) {
          try {
            await store.list();
            break;
          } catch (err) {
            lastError = (err as Error).message;
            assert.ok(performance.now() < deadline, `the store never worked again after the failover: ${lastError}`);
            await sleep(200);
          }
        }
        const msg = `failover announced during a reconnect: the store answered again ${Math.round(performance.now() - faultAt)}ms after the fault${lastError === '' ? '' : ` (last failure: ${lastError.slice(0, 120)})`}`;
        console.log(`[redis-sentinel] ${msg}`);
        t.diagnostic(msg);
      } finally {
        if (frozen) first.signal('SIGCONT');
      }
    } finally {
      await store.close();
    }
  });
});
