/**
 * A three-member etcd cluster on loopback (scripts/services/etcd-cluster.mjs), TTL 3s: one
 * member killed (SIGKILL) or frozen (SIGSTOP), leader or follower, must cost the holder no
 * term: the same token throughout, no second holder. Losing quorum (two members frozen) must
 * still end the term (the engine stands down; it never believes it leads without the store).
 *
 * The faulted member is put first in the store URL, so the client starts on it: the worst
 * case, not a lucky pick. The time without a leader per fault is printed as a diagnostic
 * (timing is measured here, asserted nowhere: see bench/ for timing claims).
 *
 * Takes about two minutes (a fresh cluster per fault, ~12s of fault each).
 * Ports: LEASEHOLD_TEST_ETCD_CLUSTER_PORT (default 24379; members at +0, +100, +200, peers +1).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { createEtcdStore } from '../../src/backends/etcd/index.js';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Term } from '../../src/core/lease.js';
import type { LeaseLostError } from '../../src/core/errors.js';
import { leaderlessMs, recordingLogger } from './shared.js';

interface Member {
  name: string;
  endpoint: string;
  pid: number;
  signal(sig: NodeJS.Signals): void;
  restart(): Promise<void>;
}
interface Cluster {
  url: string;
  members: Member[];
  leader(): Promise<Member | null>;
  waitForLeader(ms?: number): Promise<Member>;
  stop(): Promise<void>;
}
interface ClusterModule {
  startEtcdCluster(o: { basePort: number; log?: (m: string) => void }): Promise<Cluster>;
}

const BASE = Number(process.env['LEASEHOLD_TEST_ETCD_CLUSTER_PORT'] ?? 24379);
// 4s: with 3s a frozen leader ended the term once in CI (2.1s after the freeze, on a loaded
// machine: the election and an attempt hung on the frozen member ate the margin). The README
// promises 4s.
const TTL_MS = 4000;
// 1.5 TTLs: a member down that long, were it to cost the term, would have ended it (the holder
// stands down about 2/3 of a TTL after its last renewal).
const FAULT_MS = 6_000;
/** The engine renews at a third of the TTL. */
const RENEW_MS = TTL_MS / 3;

/**
 * Leases a member's lessor has revoked as expired, by its own count (etcd's
 * `etcd_debugging_server_lease_expired_total`, counted by the member that sent the revocation),
 * and its server version. Undefined when the member does not answer.
 */
async function leaseExpiries(m: Member): Promise<{ revoked: number; version: string } | undefined> {
  try {
    const [metrics, version] = await Promise.all([
      fetch(`http://${m.endpoint}/metrics`, { signal: AbortSignal.timeout(2000) }).then((r) => r.text()),
      fetch(`http://${m.endpoint}/version`, { signal: AbortSignal.timeout(2000) }).then((r) => r.json() as Promise<{ etcdserver?: string }>),
    ]);
    const line = /^etcd_debugging_server_lease_expired_total (\S+)$/m.exec(metrics);
    return { revoked: line === null ? 0 : Number(line[1]), version: version.etcdserver ?? 'unknown' };
  } catch {
    return undefined;
  }
}

/** When the members other than `down` next agree on a leader that is not `down` (polled every 50 ms). */
async function newLeaderAt(cluster: Cluster, down: Member): Promise<number> {
  for (const end = performance.now() + FAULT_MS; performance.now() < end; ) {
    const l = await cluster.leader().catch(() => null);
    if (l !== null && l !== down) return performance.now();
    await sleep(50);
  }
  return performance.now();
}
const hasEtcd = existsSync('/usr/bin/etcd') || existsSync('/usr/local/bin/etcd');
const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'etcd').split(',').includes('etcd');

async function clusterModule(): Promise<ClusterModule> {
  // Plain JavaScript, no types: load it by URL (dist/test/topologies/ -> scripts/services/).
  const mjs = join(fileURLToPath(import.meta.url), '..', '..', '..', '..', 'scripts', 'services', 'etcd-cluster.mjs');
  return (await import(pathToFileURL(mjs).href)) as ClusterModule;
}

interface Held {
  token: bigint;
  startedAt: number;
  endedAt?: number;
  reason?: string;
}

/** An elector on its own prefix, recording every term it wins and how each one ended. */
async function holdWith(url: string) {
  const prefix = `lhtopo-${Math.random().toString(36).slice(2, 10)}`;
  const store = await createEtcdStore({ url, prefix });
  await store.migrate();
  // What the engine said, with times, for a failure's message: the SIGSTOP of the leader ended
  // a term at the thaw (6.1 s after the fault) in CI55 and in 1 of 8 runs beside stress-ng, and
  // 14 traced runs did not repeat it; the next failure says what the renewals met.
  const rec = recordingLogger();
  const lh = new Leasehold({ store, closeStore: true, logger: rec.logger });
  const terms: Held[] = [];
  const elector = lh.elect('topo', {
    onElected(term: Term) {
      const h: Held = { token: term.token, startedAt: performance.now() };
      terms.push(h);
      term.signal.addEventListener('abort', () => {
        h.endedAt = performance.now();
        h.reason = (term.signal.reason as LeaseLostError | undefined)?.reason ?? 'unknown';
      });
    },
  }, { ttl: TTL_MS });
  return {
    terms,
    /** What the engine logged from `from` on (ms after `from`), renewals that landed left out. */
    said: (from: number): string => rec.said(from, /renewed|renewal landed/),
    async waitForTerm(ms = 20_000): Promise<Held> {
      const end = performance.now() + ms;
      for (;;) {
        const live = terms.find((t) => t.endedAt === undefined);
        if (live !== undefined) return live;
        if (performance.now() > end) throw new Error(`no term within ${ms}ms`);
        await sleep(20);
      }
    },
    async stop() {
      await elector.stop();
      await lh.close();
    },
  };
}


const skip = !wanted ? 'etcd not selected' : !hasEtcd ? 'no etcd binary (apt-get install etcd-server)' : false;

void describe(`etcd, three members, TTL ${TTL_MS}ms: one member down costs no term`, { skip }, () => {
  let mod: ClusterModule;
  let cluster: Cluster | undefined;
  before(async () => {
    mod = await clusterModule();
  });
  after(async () => {
    await cluster?.stop();
  });

  const faults = [
    { sig: 'SIGKILL', who: 'leader' },
    { sig: 'SIGKILL', who: 'follower' },
    { sig: 'SIGSTOP', who: 'leader' },
    { sig: 'SIGSTOP', who: 'follower' },
  ] as const;
  for (const { sig, who } of faults) {
    void it(`${sig} of the ${who}: the holder keeps its term`, async (t) => {
      await cluster?.stop();
      cluster = await mod.startEtcdCluster({ basePort: BASE });
      const leader = await cluster.waitForLeader();
      const victim = who === 'leader' ? leader : cluster.members.find((m) => m !== leader)!;
      const order = [victim, ...cluster.members.filter((m) => m !== victim)];
      const holder = await holdWith(`etcd://${order.map((m) => m.endpoint).join(',')}`);
      try {
        const first = await holder.waitForTerm();
        await sleep(TTL_MS + 500); // settled: several renewals (one a second) on the victim
        const revokedBefore = await leaseExpiries(victim);
        const faultAt = performance.now();
        victim.signal(sig);
        // When the members left agree on a leader again (at once for a follower down): a term
        // can only be kept if it can renew, so how long etcd had none is part of the fault.
        const electedAt = who === 'follower' ? Promise.resolve(faultAt) : newLeaderAt(cluster, victim);
        await sleep(FAULT_MS);
        const healedAt = performance.now();
        if (sig === 'SIGSTOP') victim.signal('SIGCONT');
        else await victim.restart();
        await cluster.waitForLeader();
        await sleep(TTL_MS);
        const gap = leaderlessMs(holder.terms, faultAt, healedAt);
        const lost = holder.terms.filter((h) => h.endedAt !== undefined);
        t.diagnostic(
          `${sig} ${who}: ${lost.length === 0 ? 'term survived' : `term ended (${lost.map((l) => `${l.reason} after ${Math.round(l.endedAt! - faultAt)}ms`).join(', ')})`}; ` +
            `no leader for ${gap}ms of ${FAULT_MS}ms; terms ${holder.terms.map((h) => h.token).join(', ')}`,
        );
        const elected = await electedAt;
        // The fault landed as meant only if etcd had a leader again a full renewal interval
        // before the term ended: otherwise the holder had no store to renew against until past
        // its deadline, and standing down was the safe answer (CI on a loaded host: no etcd
        // leader for over 3 s after the leader's SIGKILL, the term ended 3271 ms after it).
        // etcd without etcd-io/etcd#16822 (issues #15247, #12528; backported to 3.4 and 3.5 in late
        // 2023, after Debian 12's 3.4.23): a leader that was paused
        // still takes itself for the lessor when it resumes, sees every lease's expiry passed by
        // its stale clock, and revokes them through the new leader. The term's etcd lease is then
        // really gone, and standing down is right; the test injects one member down, not a store
        // that deletes live leases. It is told by the resumed member's own count of revocations.
        // Only a term that ended after the thaw can have been ended so: one that ended while the
        // member was frozen is another failure, and fails below.
        const atThaw = lost.length > 0 && sig === 'SIGSTOP' && who === 'leader' && lost.every((l) => l.endedAt! >= healedAt);
        const revokedAfter = atThaw ? await leaseExpiries(victim) : undefined;
        if (revokedAfter !== undefined && revokedBefore !== undefined && revokedAfter.revoked > revokedBefore.revoked) {
          t.skip(
            `etcd ${revokedAfter.version}: the resumed old leader revoked ${revokedAfter.revoked - revokedBefore.revoked} lease(s) as expired by its stale clock ` +
              '(etcd-io/etcd#15247, fixed by #16822), so the store itself ended the term: a defect of this etcd, not of the fault this test injects',
          );
          return;
        }
        if (lost.length > 0 && lost.every((l) => l.endedAt! - elected < RENEW_MS)) {
          t.skip(`etcd elected no leader until ${Math.round(elected - faultAt)}ms after the fault, under a renewal interval (${RENEW_MS}ms) before the term ended: the outage outlasted the term's slack, not what this test injects`);
          return;
        }
        assert.equal(lost.length, 0, `the term ended: ${lost.map((l) => `${l.reason} ${Math.round(l.endedAt! - faultAt)}ms after the fault`).join(', ')} (etcd had a leader again ${Math.round(elected - faultAt)}ms after it); the engine said (ms after the fault):\n${holder.said(faultAt)}`);
        assert.equal(holder.terms.length, 1, 'no second term');
        assert.equal(holder.terms[0]!.token, first.token);
      } finally {
        await holder.stop();
      }
    });
  }

  void it('a watch served by a member cut off from its cluster reports the channel down, then back', async (t) => {
    // Without etcd's require-leader metadata the watch on the lone member stays open and silent:
    // followers waiting on it would hear of nothing until their re-check, a minute later.
    await cluster?.stop();
    cluster = await mod.startEtcdCluster({ basePort: BASE });
    const leader = await cluster.waitForLeader();
    const lone = cluster.members.find((m) => m !== leader)!;
    const others = cluster.members.filter((m) => m !== lone);
    const store = await createEtcdStore({ url: `etcd://${lone.endpoint}`, prefix: `lhtopo-${Math.random().toString(36).slice(2, 10)}` });
    let downAt: number | undefined;
    let backAt: number | undefined;
    const stopWatching = await store.watchFreed(
      () => {},
      () => {
        backAt ??= performance.now();
      },
      () => {
        downAt ??= performance.now();
      },
    );
    const until = async (f: () => boolean, ms: number): Promise<void> => {
      const end = performance.now() + ms;
      while (!f() && performance.now() < end) await sleep(50);
    };
    try {
      assert.equal(downAt, undefined, 'the watch came up on a healthy cluster');
      const faultAt = performance.now();
      for (const m of others) m.signal('SIGSTOP');
      await until(() => downAt !== undefined, 30_000);
      const healAt = performance.now();
      for (const m of others) m.signal('SIGCONT');
      await until(() => backAt !== undefined, 30_000);
      t.diagnostic(
        `lone member: watch down ${downAt === undefined ? 'never' : `${Math.round(downAt - faultAt)}ms after the others froze`}, ` +
          `back ${backAt === undefined ? 'never' : `${Math.round(backAt - healAt)}ms after they thawed`}`,
      );
      assert.notEqual(downAt, undefined, 'the watch on a member without a leader stayed open and silent');
      assert.notEqual(backAt, undefined, 'the watch did not come back once the cluster had a leader again');
    } finally {
      for (const m of others) m.signal('SIGCONT');
      await stopWatching();
      await store.close();
    }
  });

  void it('quorum loss (two members frozen) still ends the term', async (t) => {
    await cluster?.stop();
    cluster = await mod.startEtcdCluster({ basePort: BASE });
    const leader = await cluster.waitForLeader();
    const holder = await holdWith(cluster.url);
    const frozen = cluster.members.filter((m) => m !== leader);
    try {
      const first = await holder.waitForTerm();
      await sleep(TTL_MS);
      const faultAt = performance.now();
      for (const m of frozen) m.signal('SIGSTOP');
      await sleep(2 * TTL_MS);
      const endedAt = first.endedAt;
      for (const m of frozen) m.signal('SIGCONT');
      t.diagnostic(`quorum lost: term ${endedAt === undefined ? 'still held (wrong)' : `ended (${first.reason}) ${Math.round(endedAt - faultAt)}ms after the fault`}`);
      assert.notEqual(endedAt, undefined, 'the holder carried on leading with no quorum behind it');
      const next = await holder.waitForTerm(30_000);
      assert.ok(next.token > first.token, `the next term's token ${next.token} is above ${first.token}`);
    } finally {
      for (const m of frozen) m.signal('SIGCONT');
      await holder.stop();
    }
  });
});
