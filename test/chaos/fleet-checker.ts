/**
 * The fleet invariants, judged after the run from records kept apart from the registry under
 * test: what each agent process heard from the store about its liveness lease (claims, with the
 * store's now and expiry), what each client was answered (with mono send/receive times and, for
 * changes, the store's placed_at), the fenced resource's own log of accepted writes (commit
 * order), and the registry's final state. See docs/chaos.md, "Fleet".
 */
import type { ResourceRow } from './types.js';
import type { AgentEvent } from './fleet-agent.js';

/** One client call and its answer. Times: mono ms (`sent`, `got`); `placedAt`: the store's clock. */
export type ClientEvent = { c: string; sent: number; got: number; r: string } & (
  | { ev: 'place'; outcome: 'placed' | 'owned' | 'no-agent' | 'error'; agent?: string; gen?: string; placedAt?: number; error?: string }
  | { ev: 'reassign'; from: string; why: 'dead' | 'rebalance'; outcome: 'moved' | 'owner-changed' | 'no-agent' | 'error'; agent?: string; gen?: string; placedAt?: number; error?: string }
  | { ev: 'lookup'; via: 'store' | 'cache'; hit: boolean; answer: 'live' | 'dead' | 'none' | 'error'; agent?: string; gen?: string; heartbeatAgeMs?: number; error?: string }
  | { ev: 'write'; why: 'takeover' | 'cached'; gen: string; outcome: string }
);

export interface FleetCheckInput {
  clients: ClientEvent[];
  agents: AgentEvent[];
  /** Accepted writes in commit order: holder is the resource, token the generation. */
  writes: ResourceRow[];
  /** The registry's final generation per placed resource (absent: no record at the end). */
  finalGens: Map<string, bigint>;
  staleAfterMs: number;
}

export interface FleetVerdict {
  name: string;
  ok: boolean;
  detail: string;
  violations: string[];
}

export interface FleetCheckResult {
  ok: boolean;
  verdicts: FleetVerdict[];
  counts: Record<string, number>;
  worst: Record<string, number | null>;
}

/** A change of owner as a client saw it answered. */
interface Change {
  r: string;
  sent: number;
  got: number;
  gen: string;
  agent: string;
}

/** A stretch of mono time in which the store certainly held agent `id` live. */
interface Fresh {
  from: number;
  to: number;
}

const MAX_LISTED = 20;
/** How late a claim sent by a process that then stopped may still reach the store. */
const UNANSWERED_SLACK_MS = 1000;

function verdict(name: string, violations: string[], detail: string): FleetVerdict {
  return { name, ok: violations.length === 0, detail: violations.length === 0 ? detail : `${violations.length} violation(s); ${detail}`, violations: violations.slice(0, MAX_LISTED) };
}

const isConfirmed = (e: AgentEvent): e is Extract<AgentEvent, { ev: 'claim' }> & { expiresAt: number } =>
  e.ev === 'claim' && (e.outcome === 'acquired' || e.outcome === 'renewed') && e.expiresAt !== undefined;

export function checkFleet(input: FleetCheckInput): FleetCheckResult {
  const { clients, agents, writes, finalGens, staleAfterMs } = input;
  const claimsById = new Map<string, Array<Extract<AgentEvent, { ev: 'claim' }> & { expiresAt: number }>>();
  /** Anything that can end an agent's liveness before its expiry: a lost claim, a release, a deregistration. */
  const endsById = new Map<string, number[]>();
  // Claims sent with no answer logged (the process was stopped or killed with the claim in
  // flight): the store may have renewed the lease without anyone seeing it.
  // A claim that failed with an error (a timeout, a dropped connection) is as unanswered as one
  // never heard back from: the store may have applied it. (A loaded run on MySQL: a renewal
  // timed out after 1.6 s, "Query inactivity timeout", had renewed the agent, and a placement
  // on it 0.8 s later was charged as one on a stale agent.)
  const answered = new Set(agents.flatMap((e) => (e.ev === 'claim' && e.outcome !== 'error' ? [`${e.pid}:${e.sent}`] : [])));
  const unansweredById = new Map<string, number[]>();
  for (const e of agents) {
    if (e.ev !== 'claim-sent' || answered.has(`${e.pid}:${e.sent}`)) continue;
    const list = unansweredById.get(e.id) ?? [];
    list.push(e.sent);
    unansweredById.set(e.id, list);
  }
  for (const e of agents) {
    if (isConfirmed(e)) {
      const list = claimsById.get(e.id) ?? [];
      list.push(e);
      claimsById.set(e.id, list);
    } else if ((e.ev === 'claim' && e.outcome.startsWith('lost')) || e.ev === 'release' || e.ev === 'deregistering' || e.ev === 'lost') {
      const list = endsById.get(e.id) ?? [];
      list.push(e.ev === 'claim' || e.ev === 'release' ? e.sent : e.t);
      endsById.set(e.id, list);
    }
  }

  // 1. No placement (or reassign target) on an agent stale by the store's clock at placement time.
  // The store placed at `placedAt` (its clock). Some claim of agent/<target> sent before the
  // placement's answer came back must have expired after that (expiry by the same clock).
  const v1: string[] = [];
  let placements = 0;
  let unverified = 0;
  let unverifiedInFlight = 0;
  let closest: number | null = null;
  for (const e of clients) {
    if (!((e.ev === 'place' && e.outcome === 'placed') || (e.ev === 'reassign' && e.outcome === 'moved'))) continue;
    placements++;
    if (e.placedAt === undefined || e.agent === undefined) {
      unverified++;
      continue;
    }
    const before = (claimsById.get(e.agent) ?? []).filter((c) => c.sent < e.got);
    const margin = before.length === 0 ? -Infinity : Math.max(...before.map((c) => c.expiresAt)) - e.placedAt;
    // A renewal sent within a TTL (and a second for delivery) before the placement's answer,
    // whose answer nobody logged, may have kept the agent live: neither proof nor violation.
    const inFlight = margin <= 0 && (unansweredById.get(e.agent) ?? []).some((sent) => sent < e.got && sent > e.got - staleAfterMs - UNANSWERED_SLACK_MS);
    if (inFlight) {
      unverified++;
      unverifiedInFlight++;
      continue;
    }
    if (margin <= 0) {
      v1.push(
        `${e.ev} of ${e.r} on ${e.agent} (generation ${e.gen}) at store time ${e.placedAt}: ` +
          (before.length === 0 ? 'the agent had no confirmed heartbeat before it' : `its last confirmed expiry was ${-margin}ms earlier`),
      );
    } else closest = closest === null ? margin : Math.min(closest, margin);
  }

  // 2. No owned resource is ever answered "no owner": a lookup sent after a placement of it came
  // back must find a record (nothing in the run removes one).
  const placedAt = new Map<string, number>();
  for (const e of clients) if (e.ev === 'place' && (e.outcome === 'placed' || e.outcome === 'owned')) placedAt.set(e.r, Math.min(placedAt.get(e.r) ?? Infinity, e.got));
  const v2: string[] = [];
  for (const e of clients) {
    if (e.ev !== 'lookup' || e.answer !== 'none') continue;
    const p = placedAt.get(e.r);
    if (p !== undefined && e.sent > p) v2.push(`${e.c} was told "${e.r}" has no owner (via ${e.via}) ${Math.round(e.sent - p)}ms after it was placed`);
  }

  // 3. Generations strictly increase per resource: every change has its own generation, a change
  // asked after another's answer has a larger one, a store lookup never goes back to an older
  // one, and the registry's final record is at least the last one seen.
  const v3: string[] = [];
  const changes: Change[] = clients.flatMap((e) =>
    ((e.ev === 'place' && e.outcome === 'placed') || (e.ev === 'reassign' && e.outcome === 'moved')) && e.gen !== undefined && e.agent !== undefined
      ? [{ r: e.r, sent: e.sent, got: e.got, gen: e.gen, agent: e.agent }]
      : [],
  );
  const seenGen = new Map<string, string>();
  for (const c of changes) {
    const prev = seenGen.get(c.gen);
    if (prev !== undefined) v3.push(`generation ${c.gen} was issued twice (${prev} and ${c.r})`);
    seenGen.set(c.gen, c.r);
  }
  const byResource = new Map<string, Change[]>();
  for (const c of changes) byResource.set(c.r, [...(byResource.get(c.r) ?? []), c]);
  for (const [r, list] of byResource) {
    for (const a of list) {
      for (const b of list) if (b.sent > a.got && BigInt(b.gen) <= BigInt(a.gen)) v3.push(`${r}: a change asked after generation ${a.gen} was answered got ${b.gen}`);
    }
    const last = list.reduce((m, c) => (BigInt(c.gen) > m ? BigInt(c.gen) : m), 0n);
    const fin = finalGens.get(r);
    if (fin === undefined || fin < last) v3.push(`${r}: the registry ends at generation ${fin ?? 'none'}, below ${last} which it issued`);
  }
  for (const e of clients) {
    if (e.ev !== 'lookup' || e.via !== 'store' || e.gen === undefined) continue;
    const older = (byResource.get(e.r) ?? []).filter((c) => c.got < e.sent && BigInt(c.gen) > BigInt(e.gen!));
    if (older.length > 0) v3.push(`${e.r}: a store lookup answered generation ${e.gen} after generation ${older[0]!.gen} had been issued`);
  }

  // 4. No write accepted with an old generation after a newer one reached the fence: per
  // resource, accepted generations never go down in commit order. Takeover writes put the new
  // generation on the fence as soon as a reassign commits.
  const v4: string[] = [];
  const high = new Map<string, bigint>();
  for (const w of writes) {
    const h = high.get(w.holder);
    if (h !== undefined && w.token < h) v4.push(`${w.holder}: write #${w.id} by ${w.worker} accepted with generation ${w.token} after generation ${h}`);
    if (h === undefined || w.token > h) high.set(w.holder, w.token);
  }
  const takeovers = clients.filter((e) => e.ev === 'write' && e.why === 'takeover' && e.outcome === 'accepted').length;

  // 5. No false "dead": a "dead" answer naming an agent whose heartbeat the store certainly held
  // fresh for the whole lookup. Certainly fresh: from a confirmed claim's answer until its send
  // time plus stale-after (the store's expiry is at least that far), unless something that can
  // end the lease early (a lost claim, a release, a deregistration) happened in between.
  // A process that acquires its id's lease is not an agent yet: Agent.start registers it after the
  // claim (and clears a predecessor's deregistration), then the process logs 'live'. Until then the
  // store rightly answers "dead" for an id whose last process deregistered, so an acquisition makes
  // the heartbeat certainly fresh only from that process's 'live' on (a chaos run on PostgreSQL: a
  // lookup 4 ms after a restarted f2's claim, 6 ms before its registration, was charged as false).
  const liveAt = new Map<number, number>();
  for (const e of agents) if (e.ev === 'live' && !liveAt.has(e.pid)) liveAt.set(e.pid, e.t);
  const freshById = new Map<string, Fresh[]>();
  for (const [id, list] of claimsById) {
    const ends = endsById.get(id) ?? [];
    freshById.set(
      id,
      list.map((c) => {
        const registered = c.outcome === 'acquired' ? (liveAt.get(c.pid) ?? Infinity) : -Infinity;
        const from = Math.max(c.t, registered);
        const to = Math.min(c.sent + staleAfterMs - 20, ...ends.filter((x) => x > c.sent - staleAfterMs));
        return { from, to };
      }),
    );
  }
  // The owner is the one on record during the lookup: when no change of the resource was in
  // flight, the last change answered before it; else only the agent the answer named is judged.
  const falseDead = { cache: [] as string[], store: [] as string[] };
  for (const e of clients) {
    if (e.ev !== 'lookup' || e.answer !== 'dead' || e.agent === undefined) continue;
    const list = byResource.get(e.r) ?? [];
    const inFlight = list.some((c) => c.sent < e.got && c.got > e.sent);
    const before = list.filter((c) => c.got < e.sent).sort((a, b) => (BigInt(a.gen) < BigInt(b.gen) ? -1 : 1));
    const onRecord = inFlight ? undefined : before[before.length - 1]?.agent;
    for (const who of new Set([e.agent, ...(onRecord === undefined ? [] : [onRecord])])) {
      const f = (freshById.get(who) ?? []).find((x) => x.from <= e.sent && e.got <= x.to);
      if (f === undefined) continue;
      const named = who === e.agent ? '' : ` (it named ${e.agent}, generation ${e.gen}, no longer the owner)`;
      falseDead[e.via].push(`${e.c}: "${e.r}" answered dead via ${e.via}${e.hit ? ' (a cache hit)' : ''} while owner ${who}'s heartbeat was fresh for ${Math.round(f.to - e.got)}ms more${named}`);
      break;
    }
  }

  const lookups = clients.filter((e): e is Extract<ClientEvent, { ev: 'lookup' }> => e.ev === 'lookup');
  const count = (p: (e: Extract<ClientEvent, { ev: 'lookup' }>) => boolean): number => lookups.filter(p).length;
  const liveAges = lookups.filter((e) => e.answer === 'live' && e.heartbeatAgeMs !== undefined).map((e) => e.heartbeatAgeMs!);
  const deadFor: number[] = [];
  for (const e of clients) {
    if (e.ev !== 'reassign' || e.why !== 'dead' || e.outcome !== 'moved') continue;
    const last = (claimsById.get(e.from) ?? []).filter((c) => c.sent < e.sent).reduce((m, c) => Math.max(m, c.sent), -Infinity);
    if (last > -Infinity) deadFor.push(e.got - last);
  }
  const verdicts = [
    verdict('placement-on-live-agent', v1, `${placements} placements and reassigns, ${placements - unverified} checked against the agents' confirmed heartbeats`),
    verdict('owned-never-no-owner', v2, `${count((e) => e.answer === 'none')} "no owner" answers, none for a placed resource`),
    verdict('generations-increase', v3, `${changes.length} generations issued, per resource in order; final state agrees`),
    verdict('no-stale-generation-write', v4, `${writes.length} accepted writes over ${high.size} resources, generations never going back (${takeovers} takeovers)`),
    verdict('cache-never-false-dead', falseDead.cache, `${count((e) => e.via === 'cache' && e.answer === 'dead')} "dead" answers through the cache, all with a stale heartbeat`),
    verdict('store-never-false-dead', falseDead.store, `${count((e) => e.via === 'store' && e.answer === 'dead')} "dead" answers from the store, all with a stale heartbeat`),
  ];
  const writesBy = (o: string): number => clients.filter((e) => e.ev === 'write' && e.outcome === o).length + agents.filter((e) => e.ev === o).length;
  return {
    ok: verdicts.every((v) => v.ok),
    verdicts,
    counts: {
      placements: clients.filter((e) => e.ev === 'place' && e.outcome === 'placed').length,
      reassigns: clients.filter((e) => e.ev === 'reassign' && e.outcome === 'moved').length,
      reassignsRefused: clients.filter((e) => e.ev === 'reassign' && e.outcome !== 'moved').length,
      unverifiedPlacements: unverified,
      unverifiedByUnansweredRenewal: unverifiedInFlight,
      lookups: lookups.length,
      lookupsViaCache: count((e) => e.via === 'cache'),
      cacheHits: count((e) => e.hit),
      live: count((e) => e.answer === 'live'),
      dead: count((e) => e.answer === 'dead'),
      noOwner: count((e) => e.answer === 'none'),
      lookupErrors: count((e) => e.answer === 'error'),
      writesAccepted: writes.length,
      writesFenced: writesBy('fenced'),
      writesDuplicate: writesBy('duplicate'),
      confirmedHeartbeats: [...claimsById.values()].reduce((s, l) => s + l.length, 0),
    },
    worst: {
      closestPlacementMarginMs: closest === null ? null : Math.round(closest),
      oldestLiveHeartbeatAgeMs: liveAges.length === 0 ? null : Math.round(Math.max(...liveAges)),
      longestDeadBeforeReassignMs: deadFor.length === 0 ? null : Math.round(Math.max(...deadFor)),
    },
  };
}
