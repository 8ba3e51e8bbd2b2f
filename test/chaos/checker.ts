/**
 * The invariant checker, run once at the end over three independent records:
 *  - the resource's log of accepted writes (commit order),
 *  - the store's lease history,
 *  - every worker's own JSON-lines log (claims with send and answer times, beliefs, outcomes).
 *
 * Safety (any violation fails the run; `--unfenced` must produce some):
 *  1. accepted writes carry non-decreasing tokens;
 *  2. no write is accepted from a term after a term granted later has written;
 *  3. tokens issued by the store strictly increase: in its history, and across every grant the
 *     workers saw (which survives a store that lost its data on restart);
 *  4. no two terms' writes interleave at the resource (a term = one holder id with one token;
 *     two processes restored from one snapshot share both, and are one term to the store).
 * Liveness:
 *  5. after every fault a leader is back (a write accepted from a healthy term) within
 *     TTL (as the store grants it) + renew interval + the longest unit + a small bound;
 *  6. followers stayed within their request budget.
 * Health:
 *  7. no worker died on its own.
 * Measured, never failed: belief overlap (two processes believing they lead at once), and
 * terms whose writes came from more than one process (restores of one snapshot).
 */
import type { HistoryEntry } from '../../src/backends/store.js';
import { PROCESS_FAULTS, type FaultKind, type FaultRecord, type ResourceRow, type Timing, type WorkerInfo } from './types.js';

export interface CheckInput {
  timing: Timing;
  unfenced: boolean;
  runStart: number;
  runEnd: number;
  writes: ResourceRow[];
  counters: { rejected: number; duplicate: number };
  workers: WorkerInfo[];
  /** Oldest first. */
  history: HistoryEntry[];
  faults: FaultRecord[];
  slack: FailoverSlack;
  /**
   * The store's transactions run inside the worker process and hold a lock every other process
   * needs (SQLite's file write lock): a process frozen inside one freezes the store for all.
   */
  inProcessLocks?: boolean;
}

/** What "a small bound" is, on top of TTL + renew interval + the longest unit. */
export interface FailoverSlack {
  /** A process fault: the other workers see the lease expire and take it. */
  processMs: number;
  /**
   * A store fault, measured from when the store came back: a call sent into the outage is
   * answered by its timeout (the TTL here), and a follower may be in a backoff sleep (at most
   * one TTL) when it heals.
   */
  storeMs: number;
}

export interface Verdict {
  name: string;
  title: string;
  safety: boolean;
  ok: boolean;
  detail: string;
  violations: string[];
}

export interface Grant {
  worker: string;
  holder: string;
  token: bigint;
  /** When the claim was sent, and when its answer arrived (mono). */
  sent: number;
  at: number;
}

export interface Belief {
  worker: string;
  token: string;
  from: number;
  to: number;
  /** Why it ended: the lost reason, 'released', or how the process ended. */
  end: string;
  /** Sub-intervals in jeopardy. */
  jeopardy: Array<[number, number]>;
}

/**
 * A leader ended from outside (SIGKILL, or its session ended on the server while its process
 * lived): when it stopped believing it leads, and when another process began to. Times from the
 * fault's start; overlap is how long both believed at once (the window the fence covers).
 */
export interface Takeover {
  n: number;
  kind: FaultKind;
  worker: string;
  stoodDownMs: number | null;
  tookOverMs: number | null;
  by: string | null;
  overlapMs: number | null;
  /** liveness 'session': the store had tied the ended term to its holder's session (else it could only end at its TTL). */
  tied: boolean;
}

export interface Failover {
  n: number;
  kind: FaultKind;
  ms: number | null;
  boundMs: number;
  by: string | null;
  /** Set when failover is measured from somewhere other than the fault's usual reference. */
  from?: string;
}

export interface Budget {
  worker: string;
  claims: number;
  followerMs: number;
  perTtl: number;
  /** Most acquisition claims within any one TTL. */
  peakPerTtl: number;
  allowed: number;
}

export interface CheckResult {
  verdicts: Verdict[];
  /** Every verdict held. */
  ok: boolean;
  /** A safety verdict failed (what `--unfenced` must show). */
  safetyViolated: boolean;
  grants: Grant[];
  beliefs: Belief[];
  overlap: { totalMs: number; episodes: number; longestMs: number; longestAt: number | null; maxConcurrent: number };
  failovers: Failover[];
  worstFailover: Failover | null;
  budgets: Budget[];
  /** Every kill and session-end of a leader (measured, never failed). */
  takeovers: Takeover[];
  cloneTerms: Array<{ token: string; workers: string[] }>;
  counts: {
    accepted: number;
    rejected: number;
    duplicates: number;
    writeErrors: number;
    units: number;
    terms: number;
    historyGrants: number;
    resumedWrites: number;
    /** liveness 'session': acquisitions the store tied to the winner's session (the rest end at their TTL). */
    sessionTied: number;
  };
  faultsByKind: Partial<Record<FaultKind, number>>;
}

const MAX_LISTED = 25;

function verdict(name: string, title: string, safety: boolean, violations: string[], detail: string): Verdict {
  return { name, title, safety, ok: violations.length === 0, detail, violations: violations.slice(0, MAX_LISTED) };
}

/** True when `worker` had term `token` renewed by a claim sent at or after `from` and answered by `by`. */
function renewedAfter(workers: WorkerInfo[], worker: string, token: bigint, from: number, by: number): boolean {
  const w = workers.find((x) => x.id === worker);
  return (
    w?.events.some((e) => e.ev === 'claim' && e.outcome === 'renewed' && e.token === token.toString() && e.sent >= from && e.t <= by) === true
  );
}

/** True when a target of the pause sent a claim before the SIGSTOP and got its answer after it. */
function frozeInsideClaim(workers: WorkerInfo[], f: FaultRecord): boolean {
  return workers.some(
    (w) => f.targets.includes(w.id) && w.events.some((e) => e.ev === 'claim' && e.sent <= f.start && e.t >= f.start),
  );
}

export function grantsOf(workers: WorkerInfo[]): Grant[] {
  const out: Grant[] = [];
  for (const w of workers) {
    for (const e of w.events) {
      if (e.ev === 'claim' && e.kind === 'acquire' && e.outcome === 'acquired' && e.token !== undefined) {
        out.push({ worker: w.id, holder: e.holder, token: BigInt(e.token), sent: e.sent, at: e.t });
      }
    }
  }
  return out.sort((a, b) => a.at - b.at);
}

export function beliefsOf(workers: WorkerInfo[], runEnd: number): Belief[] {
  const out: Belief[] = [];
  for (const w of workers) {
    let open: Belief | null = null;
    let jeopardySince: number | null = null;
    const close = (t: number, end: string): void => {
      if (open === null) return;
      if (jeopardySince !== null) open.jeopardy.push([jeopardySince, t]);
      open.to = t;
      open.end = end;
      out.push(open);
      open = null;
      jeopardySince = null;
    };
    for (const e of w.events) {
      if (e.ev === 'acquired') {
        close(e.t, 'superseded by a new term');
        open = { worker: w.id, token: e.token, from: e.t, to: e.t, end: '', jeopardy: [] };
      } else if ((e.ev === 'lost' || e.ev === 'released') && open !== null && open.token === e.token) {
        close(e.t, e.ev === 'lost' ? e.reason : 'released');
      } else if (e.ev === 'jeopardy' && open !== null) {
        jeopardySince = e.t;
      } else if (e.ev === 'recovered' && open !== null && jeopardySince !== null) {
        open.jeopardy.push([jeopardySince, e.t]);
        jeopardySince = null;
      }
    }
    close(w.exitedAt ?? runEnd, w.exitedAt === null ? 'run ended' : w.exit.split(':')[0]!);
  }
  return out.sort((a, b) => a.from - b.from);
}

export function takeoversOf(faults: FaultRecord[], beliefs: Belief[], workers: WorkerInfo[]): Takeover[] {
  const out: Takeover[] = [];
  for (const f of faults) {
    if ((f.kind !== 'kill' && f.kind !== 'session-end') || f.role !== 'leader' || f.params['skipped'] === true) continue;
    const target = f.targets[0];
    if (target === undefined) continue;
    const held = beliefs.find((b) => b.worker === target && b.from <= f.start && b.to >= f.start);
    // A SIGKILLed process believes nothing from the signal on (when the harness hears of its exit is its own latency).
    const downAt = f.kind === 'kill' ? f.start : held === undefined ? null : held.to;
    const next = beliefs.find((b) => b.worker !== target && b.from >= f.start);
    const w = workers.find((x) => x.id === target);
    const tied =
      held !== undefined &&
      w?.events.some((e) => e.ev === 'claim' && e.outcome === 'acquired' && e.token === held.token && e.session === true) === true;
    const stoodDownMs = downAt === null ? null : Math.max(0, Math.round(downAt - f.start));
    const tookOverMs = next === undefined ? null : Math.round(next.from - f.start);
    out.push({
      n: f.n,
      kind: f.kind,
      worker: target,
      stoodDownMs,
      tookOverMs,
      by: next === undefined ? null : `${next.worker} (token ${next.token})`,
      overlapMs: stoodDownMs === null || tookOverMs === null ? null : Math.max(0, stoodDownMs - tookOverMs),
      tied,
    });
  }
  return out;
}

function overlapOf(beliefs: Belief[]): CheckResult['overlap'] {
  const edges: Array<[number, number]> = [];
  for (const b of beliefs) if (b.to > b.from) edges.push([b.from, 1], [b.to, -1]);
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let n = 0;
  let since = 0;
  let totalMs = 0;
  let episodes = 0;
  let longestMs = 0;
  let longestAt: number | null = null;
  let maxConcurrent = 0;
  for (const [t, d] of edges) {
    const before = n;
    n += d;
    maxConcurrent = Math.max(maxConcurrent, n);
    if (before < 2 && n >= 2) since = t;
    if (before >= 2 && n < 2) {
      const len = t - since;
      totalMs += len;
      episodes++;
      if (len > longestMs) {
        longestMs = len;
        longestAt = since;
      }
    }
  }
  return { totalMs: Math.round(totalMs), episodes, longestMs: Math.round(longestMs), longestAt, maxConcurrent };
}

export function check(input: CheckInput): CheckResult {
  const { writes, workers, timing } = input;
  const grants = grantsOf(workers);
  const grantByTerm = new Map<string, Grant>();
  for (const g of grants) grantByTerm.set(`${g.holder}|${g.token}`, g);
  const verdicts: Verdict[] = [];

  // 1. Accepted writes carry non-decreasing tokens.
  {
    const bad: string[] = [];
    for (let i = 1; i < writes.length; i++) {
      const a = writes[i - 1]!;
      const b = writes[i]!;
      if (b.token < a.token) bad.push(`write #${b.id} by ${b.worker} carries token ${b.token} after #${a.id} by ${a.worker} with ${a.token}`);
    }
    verdicts.push(verdict('tokens-non-decreasing', 'accepted writes carry non-decreasing tokens', true, bad, `${writes.length} accepted writes in commit order`));
  }

  // 2. No write from a term after a later-granted term has written. "Later" is by the workers'
  // own clocks of send and answer: term U was certainly granted after term G when U's claim was
  // sent after G's answer arrived.
  {
    const bad: string[] = [];
    let latest: { sent: number; write: ResourceRow; grant: Grant } | null = null;
    for (const w of writes) {
      const g = grantByTerm.get(`${w.holder}|${w.token}`);
      if (g === undefined) {
        bad.push(`write #${w.id} by ${w.worker} carries token ${w.token} under holder ${w.holder}, which no process was granted`);
        continue;
      }
      if (latest !== null && latest.sent > g.at) {
        bad.push(
          `write #${w.id} by ${w.worker} (token ${w.token}, granted to ${g.worker}) was accepted after #${latest.write.id} by ${latest.write.worker} ` +
            `from a term granted later (token ${latest.grant.token}, to ${latest.grant.worker})`,
        );
      }
      if (latest === null || g.sent > latest.sent) latest = { sent: g.sent, write: w, grant: g };
    }
    verdicts.push(
      verdict('no-write-after-later-term', 'no write accepted from a term after a later term has written', true, bad, `${grants.length} grants seen by the workers`),
    );
  }

  // 3. Tokens issued by the store strictly increase.
  const historyGrants = input.history.filter((h) => h.event === 'acquired' || h.event === 'takeover');
  {
    const bad: string[] = [];
    for (let i = 1; i < historyGrants.length; i++) {
      const a = historyGrants[i - 1]!;
      const b = historyGrants[i]!;
      if (b.token <= a.token) bad.push(`store history: ${b.event} with token ${b.token} (entry ${b.id}) after token ${a.token} (entry ${a.id})`);
    }
    // Across every grant the workers saw: one whose claim was sent after another's answer
    // arrived must carry a larger token. This survives a store that lost its history.
    const bySent = [...grants].sort((a, b) => a.sent - b.sent);
    let i = 0;
    let max: Grant | null = null;
    for (const b of bySent) {
      while (i < grants.length && grants[i]!.at < b.sent) {
        const g = grants[i]!;
        if (max === null || g.token > max.token) max = g;
        i++;
      }
      if (max !== null && b.token <= max.token) {
        bad.push(`${b.worker} was granted token ${b.token} after ${max.worker} had been granted ${max.token}`);
      }
    }
    const restarts = input.faults.filter((f) => f.kind === 'restart' && f.params['skipped'] !== true).length;
    verdicts.push(
      verdict(
        'store-tokens-increase',
        'tokens issued by the store strictly increase',
        true,
        bad,
        `${historyGrants.length} grants in the store's history, ${grants.length} seen by workers, across ${restarts} store restart(s)`,
      ),
    );
  }

  // 4. No two terms' writes interleave: once another term has written, an earlier one never again.
  {
    const bad: string[] = [];
    const closed = new Set<string>();
    let cur: string | null = null;
    const name = new Map<string, string>();
    for (const w of writes) {
      const key = `${w.holder}|${w.token}`;
      if (!name.has(key)) name.set(key, `${w.worker}/token ${w.token}`);
      if (key === cur) continue;
      if (closed.has(key)) bad.push(`write #${w.id}: term ${name.get(key)} wrote again after ${cur === null ? '?' : name.get(cur)} had written`);
      if (cur !== null) closed.add(cur);
      cur = key;
    }
    verdicts.push(
      verdict(
        'no-interleaving',
        "no two terms' writes interleave at the resource",
        true,
        bad,
        `a term is one holder id with one token (copies of one snapshot share both; their copies of a unit share its idempotency key)`,
      ),
    );
  }

  // 5. Failover after every fault.
  const failovers: Failover[] = [];
  {
    const bad: string[] = [];
    const injected = input.faults.filter((f) => f.params['skipped'] !== true);
    const base = timing.storeTtlMs + timing.renewMs + timing.workMaxMs;
    for (let k = 0; k < injected.length; k++) {
      const f = injected[k]!;
      // A SIGSTOP that landed inside a SQLite transaction (a renewal's fsync, say) leaves the
      // file's write lock with a frozen process: no other process can claim until it resumes,
      // which is SQLite's single-writer design, not a failover the engine can shorten. That
      // pause is a store outage to everyone else, measured from its heal like one.
      const frozenInStore =
        input.inProcessLocks === true && f.kind === 'pause' && f.heal > 0 && frozeInsideClaim(input.workers, f);
      const ref = frozenInStore ? f.heal : f.ref;
      const processFault = PROCESS_FAULTS.has(f.kind) && !frozenInStore;
      const boundMs = Math.round(base + (processFault ? input.slack.processMs : input.slack.storeMs));
      // Writes that do not show a leader is back: from the faulted process's old term (frozen,
      // draining, standing down after a clock jump) or from restored copies of it. A fork or a
      // new old-clock process leaves the leader alone, and a store fault touches everyone.
      const compromised = f.kind === 'fork' || f.kind === 'clock-past' ? [] : f.targets;
      const untouched = new Set([...compromised, ...(f.kind === 'snapshot' ? f.spawned : [])]);
      const next = injected[k + 1]?.start ?? input.runEnd;
      const first = writes.find((w) => {
        if (w.t < ref) return false;
        if (!untouched.has(w.worker)) return true;
        const g = grantByTerm.get(`${w.holder}|${w.token}`);
        if (g !== undefined && g.sent >= f.start) return true; // the faulted process itself, in a term begun after the fault
        // A clock jump the engine rightly shrugged off (expiry is the store's, deadlines are
        // monotonic): the leader never left if the store renewed its term after the jump landed.
        return f.kind === 'clock-jump' && renewedAfter(input.workers, w.worker, w.token, f.ref, w.t);
      });
      const ms = first === undefined ? null : Math.round(first.t - ref);
      failovers.push({
        n: f.n,
        kind: f.kind,
        ms,
        boundMs,
        by: first === undefined ? null : `${first.worker} (token ${first.token})`,
        ...(frozenInStore ? { from: 'heal: frozen inside a store transaction' } : {}),
      });
      if (ms === null) bad.push(`fault #${f.n} (${f.kind}): no healthy term wrote after it`);
      else if (first!.t > next && ms > boundMs) bad.push(`fault #${f.n} (${f.kind}): no healthy term wrote before the next fault began`);
      else if (ms > boundMs) bad.push(`fault #${f.n} (${f.kind}): first write from a healthy term after ${ms}ms (bound ${boundMs}ms)`);
    }
    const worst = failovers.reduce<Failover | null>((w, f) => (f.ms !== null && (w === null || (w.ms ?? 0) < f.ms) ? f : w), null);
    verdicts.push(
      verdict(
        'failover-bounded',
        'after every fault a leader is back within the bound',
        false,
        bad,
        worst === null ? 'no faults' : `worst ${worst.ms}ms after #${worst.n} ${worst.kind} (bound ${worst.boundMs}ms)`,
      ),
    );
  }

  // 6. Follower request budget: acquisition attempts while not leading, per TTL of follower time.
  const beliefs = beliefsOf(workers, input.runEnd);
  const budgets: Budget[] = [];
  {
    const bad: string[] = [];
    const storeFaults = input.faults.filter((f) => !PROCESS_FAULTS.has(f.kind));
    for (const w of workers) {
      const end = w.exitedAt ?? input.runEnd;
      const life = end - w.spawnedAt;
      const leading = beliefs.filter((b) => b.worker === w.id).reduce((s, b) => s + (b.to - b.from), 0);
      const stopped = w.stopped.reduce((s, [a, b]) => s + (b - a), 0);
      const followerMs = Math.max(0, life - leading - stopped);
      const claims = w.events.filter((e) => e.ev === 'claim' && e.kind === 'acquire').length;
      const hits = storeFaults.filter((f) => f.start < end && f.heal + timing.ttlMs > w.spawnedAt).length;
      // About one claim per TTL while the lease is held (sleep until the reported expiry), plus
      // a wake-up per release notification, a burst per store fault (backoff from 100ms), and a
      // fixed allowance for the last second of a dead holder's term on a store that knows expiry
      // only to the second (etcd: followers then poll every 100ms or so). A tight loop, the
      // thing this catches, makes hundreds of claims per TTL.
      const releases = workers.reduce(
        (s, o) => s + o.events.filter((e) => e.ev === 'released' && e.t >= w.spawnedAt && e.t <= end && o.id !== w.id).length,
        0,
      );
      const allowed = Math.ceil((3 * followerMs) / timing.ttlMs) + 20 + 4 * hits + releases;
      const perTtl = followerMs > 0 ? Math.round((claims / (followerMs / timing.ttlMs)) * 100) / 100 : 0;
      const sent = w.events.flatMap((e) => (e.ev === 'claim' && e.kind === 'acquire' ? [e.sent] : []));
      let peak = 0;
      for (let a = 0, b = 0; b < sent.length; b++) {
        while (sent[b]! - sent[a]! >= timing.ttlMs) a++;
        peak = Math.max(peak, b - a + 1);
      }
      budgets.push({ worker: w.id, claims, followerMs: Math.round(followerMs), perTtl, peakPerTtl: peak, allowed });
      if (claims > allowed) bad.push(`${w.id}: ${claims} acquisition claims in ${Math.round(followerMs)}ms as a follower (budget ${allowed})`);
    }
    const worst = budgets.filter((b) => b.followerMs >= 3 * timing.ttlMs).sort((a, b) => b.perTtl - a.perTtl)[0];
    const peak = [...budgets].sort((a, b) => b.peakPerTtl - a.peakPerTtl)[0];
    verdicts.push(
      verdict(
        'follower-budget',
        'followers stayed within their request budget',
        false,
        bad,
        worst === undefined || peak === undefined
          ? 'no follower time'
          : `worst average ${worst.perTtl} claims per TTL as a follower (${worst.worker}), peak ${peak.peakPerTtl} in one TTL (${peak.worker}); budget 3 per TTL plus bursts`,
      ),
    );
  }

  // 7. No worker died on its own.
  {
    const bad: string[] = [];
    for (const w of workers) {
      const crashed = !w.askedToStop && w.exit !== 'running' && w.exit !== 'exit 0';
      if (crashed) bad.push(`${w.id} (${w.origin}) ended on its own: ${w.exit}`);
      for (const e of w.events) if (e.ev === 'error' && !w.askedToStop) bad.push(`${w.id}: ${e.message}`);
    }
    verdicts.push(verdict('workers-healthy', 'no worker crashed on its own', false, bad, `${workers.length} worker processes`));
  }

  const byToken = new Map<string, Set<string>>();
  for (const w of writes) {
    const k = String(w.token);
    if (!byToken.has(k)) byToken.set(k, new Set());
    byToken.get(k)!.add(w.worker);
  }
  const cloneTerms = [...byToken].filter(([, s]) => s.size > 1).map(([token, s]) => ({ token, workers: [...s] }));

  const all = workers.flatMap((w) => w.events);
  const faultsByKind: Partial<Record<FaultKind, number>> = {};
  for (const f of input.faults) if (f.params['skipped'] !== true) faultsByKind[f.kind] = (faultsByKind[f.kind] ?? 0) + 1;
  const worstFailover = failovers.reduce<Failover | null>((w, f) => (f.ms !== null && (w === null || (w.ms ?? 0) < f.ms) ? f : w), null);
  const safetyViolated = verdicts.some((v) => v.safety && !v.ok);
  return {
    verdicts,
    ok: verdicts.every((v) => v.ok),
    safetyViolated,
    grants,
    beliefs,
    overlap: overlapOf(beliefs),
    failovers,
    worstFailover,
    budgets,
    takeovers: takeoversOf(input.faults, beliefs, workers),
    cloneTerms,
    counts: {
      accepted: writes.length,
      rejected: input.counters.rejected,
      duplicates: input.counters.duplicate,
      writeErrors: all.filter((e) => e.ev === 'write-error').length,
      units: all.filter((e) => e.ev === 'unit').length,
      terms: grants.length,
      historyGrants: historyGrants.length,
      resumedWrites: all.filter((e) => e.ev === 'accepted' && e.resumed === true).length,
      sessionTied: all.filter((e) => e.ev === 'claim' && e.kind === 'acquire' && e.outcome === 'acquired' && e.session === true).length,
    },
    faultsByKind,
  };
}
