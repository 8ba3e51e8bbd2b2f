import { CONFLICT_DETAIL } from '../../core/claim-rule.js';
import { StoreUnavailableError } from '../../core/errors.js';
import { newNonce } from '../../core/identity.js';
import type { ClaimRequest, ClaimResult } from '../store.js';
import type { EtcdRequestOp, EtcdTxnRequest, EtcdTxnResponse } from './client.js';
import { mapEtcdError } from './client.js';
import type { Grant } from './claim.js';
import type { MemberPool } from './members.js';
import { json, parseSession, sessionTermValue, type EtcdKeys, type HistoryValue, type SessionValue, type StateValue } from './keys.js';
import { all, first, guarded, rangeOf, rangePrefix, schemaOk } from './txn.js';
import type { SessionBook } from './session-book.js';
import { Renewing, TermTable } from './session-terms.js';
import { afterKeepalive, afterSwap, openedState, planTick, swapSent, type KeepaliveAnswer, type SessionOver, type SessionState, type SessionTerm, type TickNow, type TickResult } from './tick.js';
import type { Clock } from './time.js';

export type { SessionTerm } from './tick.js';

/**
 * Sessions: renewal work per tick independent of the number of leases a process holds.
 *
 * A session is one etcd lease per (holder, TTL) in one store instance, with a session key
 * `{p}/session/{leaseId}` on it. A term's first renewal moves its term key onto the session's
 * lease (claim.ts: the put that swaps the nonce, as every renewal did before sessions); from
 * then on a tick renews every term on the session at once:
 *
 *   - one Txn: compare the session key's value with the value this session last wrote, and put
 *     a fresh one (fresh randomness); read the session's `ended/` markers;
 *   - then one LeaseKeepAlive of the session's lease.
 *
 * Why this is as clone-safe as the per-term nonce swap it replaces: a process restored twice
 * from one snapshot has two copies of the session (same lease, same last value). The first
 * tick of either swaps the value; the other's next tick finds a value it never wrote, and ends
 * every term of the session as a clone conflict (state `endedBy: 'conflict'`, a history entry,
 * the term key deleted) and deletes the session key, so the first one's next tick finds the
 * session gone. Neither keeps a term past its next renewal, which is the guarantee the nonce
 * swap gave. A keepalive only ever follows a successful swap.
 *
 * What a tick cannot see by itself is a term key deleted by someone else while the session
 * lives: a release or revoke by another process, or a clone conflict found by another store
 * instance. Every such delete (store.ts endTerm, claim.ts planConflict) also puts a marker
 * `{p}/ended/{leaseId}/{name}` = the term's create revision on the deleted term's etcd lease,
 * which the same Txn compares (so the lease exists: etcd deletes a lease's keys with it). A
 * tick reads the markers of its lease in the same Txn and drops every marked term from the
 * session at once, renewed in this tick or not: a marked term is never answered 'renewed'
 * again but decided from the store like any other (lost: revoked, released, cloned). A marker
 * names its term by create revision, so one left by an earlier term of the same name ends
 * nothing. Markers read are deleted by later ticks (they also expire with the lease); until
 * then every tick reads them again, which costs reads, never a wrong answer.
 *
 * A term the engine stopped renewing (it stood down on an unanswered renewal, or never renewed
 * again) would otherwise live as long as the session: a tick deletes, with a compare on its
 * create revision, every term of the session not renewed for a whole TTL, timed by the
 * monotonic clock (a wall-clock step must not delete a term its holder still believes in: the
 * engine's own deadline, on the same clock, always comes first). Such a term ends at most one
 * renew interval after its own TTL. A term whose move onto the session landed without its
 * answer is in the session too (by its value, until an answer tells its create revision), so it
 * is swept the same way rather than kept alive for as long as the session lives.
 *
 * A renewal sent by a store instance that does not hold the term's session (another process
 * with the same holder id: a clone whose store is not a copy of ours) never matches the
 * session term's value (claim.ts compares [holder, nonce]; a session term is
 * [holder, nonce, 's']): its reads find our holder id with a nonce it does not hold, and it
 * ends the term as a clone conflict. So a clone is refused even when it renews first; safe,
 * and the term ends for both, as the contract asks.
 */

/**
 * One session: its etcd lease and what is fixed with it, its state (one immutable record,
 * ./tick.ts, replaced by each transition), the terms it renews, and the bookkeeping of calls in
 * flight that move terms onto it.
 */
export class Session {
  readonly terms = new TermTable();
  /** The TTL in whole seconds as asked for (etcd may grant more): the session's key in its book. */
  readonly askedSec: number;
  readonly key: Buffer;
  /** The token floor's revision when the session opened: raising the floor deletes every term key. */
  readonly floorRev: string;
  state: SessionState;
  /**
   * Renewal requests are numbered as they enter renewOnSessions: an entry is only ever replaced
   * by a later request's answer, never by a slow older call's (a late settle would bring back a
   * nonce the engine has moved past, and its next renewal would be read as a clone's).
   */
  seq = 0;
  /** The highest sequence number that answered or settled each name, while a move of it is in flight. */
  readonly settled = new Map<string, number>();
  /**
   * Names whose move onto this session is in flight (claim.ts's rounds, until settleInSession):
   * a tick reads their markers but never deletes them, so the first tick after the move settles
   * still finds a delete that happened meanwhile.
   */
  readonly moving = new Map<string, number>();
  /** Bumped by each tick: a tick given up at its deadline must not write the session's state when it ends. */
  private gen = 0;
  /** The tick not yet sent, which concurrent renewals join; and the last one sent. */
  private upcoming: { names: Renewing; result: Promise<TickResult> } | undefined;
  private last: Promise<unknown> = Promise.resolve();

  constructor(
    readonly holder: string,
    askedSec: number,
    readonly ttlSec: number,
    readonly leaseId: string,
    keys: EtcdKeys,
    value: Buffer,
    expiresAtMs: number,
    monoNow: number,
  ) {
    this.askedSec = askedSec;
    this.key = keys.session(leaseId);
    this.floorRev = keys.floorRev;
    this.state = openedState(value, expiresAtMs, monoNow);
  }

  /** Over: gone or cloned, found by a tick or dropped from its book. Nothing renews on it again. */
  get over(): SessionOver | undefined {
    return this.state.over;
  }

  /**
   * A tick that starts after this call, shared with every renewal that joins before it starts.
   * Ticks of one session never overlap: two at once would each find the other's swap and take
   * it for a clone's. The scheduler sends a tick's batches concurrently; they share one tick.
   */
  renew(ctx: SessionContext, requests: readonly ClaimRequest[], indexes: readonly number[], deadline: number): Promise<TickResult> {
    if (this.upcoming !== undefined) {
      this.upcoming.names.join(requests, indexes);
      return this.upcoming.result;
    }
    const joined = new Renewing(requests, indexes);
    // Shared by every caller that joins: no one caller's abandonment may fail the others'.
    const shared: SessionContext = { ...ctx, call: { signal: undefined, attemptMs: ctx.call.attemptMs } };
    const result = this.last
      .catch(() => undefined)
      // One turn of the event loop: the other batches of the same scheduler tick join.
      .then(() => new Promise<void>((r) => setImmediate(r)))
      .then(async (): Promise<TickResult> => {
        this.upcoming = undefined;
        if (this.state.over !== undefined) return this.state.over;
        // A tick that hangs (a member that never answers) must not hold every later tick of
        // the session: past the deadline it is given up (a swap of it that lands later is
        // recognised by the next tick, as any unanswered one is: `pending`).
        const gen = ++this.gen;
        const r = await withDeadline(
          ctx.client.clock,
          tick(shared, this, joined, deadline, () => this.gen === gen),
          deadline,
          `etcd: session ${this.leaseId} renewal got no answer in time; this is retryable`,
        );
        // Recorded here, not by the tick: one given up at its deadline ends nothing when its
        // answer comes (the next tick finds the same, and ends a cloned session's terms too).
        if (r.kind !== 'alive') this.state = { ...this.state, over: r };
        if (r.kind === 'cloned') await endAsCloned(shared, this, deadline);
        return r;
      });
    this.upcoming = { names: joined, result };
    this.last = result;
    return result;
  }

  /** The lease as a grant, for claim.ts's renewal that moves a term onto it. */
  grant(): Grant {
    return { id: this.leaseId, ttlSec: this.ttlSec, sentAtMs: this.state.expiresAtMs - this.ttlSec * 1000, session: true };
  }
}

/** A batch's renewals a session can answer, in parallel arrays (no object per renewal). */
interface FastRenewals {
  /** The session's TermTable.changes when these terms were read. */
  changes: number;
  indexes: number[];
  terms: SessionTerm[];
  seqs: number[];
}

/** The one session of (holder, TTL) in a store instance, by this key. */
export function sessionKeyOf(holder: string, ttlSec: number): string {
  return `${ttlSec}/${holder}`;
}

export function ttlSecOf(ttlMs: number): number {
  return Math.max(1, Math.ceil(ttlMs / 1000));
}

export interface SessionContext {
  client: MemberPool;
  keys: EtcdKeys;
  call: { signal: AbortSignal | undefined; attemptMs: number };
  maxOpsPerTxn: number;
  book: SessionBook;
}

function sessionValue(holder: string, atMs: number): Buffer {
  const v: SessionValue = { h: holder, n: newNonce(), at: atMs };
  return json(v);
}

async function txn(ctx: SessionContext, req: EtcdTxnRequest, deadline: number, what: string): Promise<EtcdTxnResponse> {
  try {
    return await ctx.client.kv.txn(req, { deadline, ...ctx.call });
  } catch (err) {
    throw mapEtcdError(err, what);
  }
}

/** A new session: one LeaseGrant and one Txn that creates the session key on it. */
async function openSession(ctx: SessionContext, holder: string, ttlSec: number, deadline: number): Promise<Session> {
  const sentAtMs = ctx.client.clock.wallNow();
  let g;
  try {
    // No caller's signal: like claim.ts's grants, a grant outlives one caller giving up.
    g = await ctx.client.leaseClient.leaseGrant({ TTL: ttlSec }, { deadline, attemptMs: ctx.call.attemptMs });
  } catch (err) {
    throw mapEtcdError(err, 'session lease grant');
  }
  if (g.error !== undefined && g.error !== '') throw new StoreUnavailableError(`etcd refused a lease grant: ${g.error}`);
  const granted = Number(g.TTL);
  const value = sessionValue(holder, sentAtMs);
  const key = ctx.keys.session(g.ID);
  const r = await txn(
    ctx,
    guarded(ctx.keys, [{ request_put: { key, value, lease: g.ID } }], [{ key, target: 'Create', result: 'Equal', create_revision: 0 }]),
    deadline,
    'session',
  );
  // The key exists already only if this very put landed and was sent again (a failover retry).
  if (!schemaOk(ctx.keys, r) && !first(r.responses[2])?.value.equals(value)) {
    throw new StoreUnavailableError(`etcd: the session key of fresh etcd lease ${g.ID} was written by someone else; this is retryable`);
  }
  return new Session(holder, ttlSec, granted, g.ID, ctx.keys, value, sentAtMs + granted * 1000, ctx.client.clock.monoNow());
}

const MAX_ROUNDS = 3;

/** The two clocks a plan reads (time.ts). */
function nowOf(clock: Clock): TickNow {
  return { mono: clock.monoNow(), wall: clock.wallNow() };
}

/**
 * One tick (see above): each round a plan (./tick.ts), then its Txn; then one keepalive. The
 * session's state is replaced by the plan's transitions, except that the end of the session is
 * left to Session.renew. `renewing`: the names renewed now; a term not among them and not
 * renewed for a TTL is deleted as an orphan.
 */
async function tick(ctx: SessionContext, s: Session, renewing: { has(name: string): boolean }, deadline: number, current: () => boolean): Promise<TickResult> {
  const k = ctx.keys;
  const clock = ctx.client.clock;
  const given = (): StoreUnavailableError => new StoreUnavailableError(`etcd: a session renewal answered after it was given up; this is retryable`);
  // Read when the tick starts: a later round of the same tick goes on with its swap.
  const floorMoved = k.floorRev !== s.floorRev;
  const swapped = await (async (): Promise<TickResult | { kind: 'swapped'; ended: Set<string> }> => {
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const view = { ttlSec: s.ttlSec, floorMoved, deadline, terms: s.terms, renewing, moving: s.moving, maxOpsPerTxn: ctx.maxOpsPerTxn };
      const plan = planTick(s.state, view, nowOf(clock));
      if (plan.kind === 'give-up') throw new StoreUnavailableError(`etcd: session ${s.leaseId} renewal passed its deadline; this is retryable`);
      if (plan.kind === 'stand-down') return plan.result;
      s.state = plan.state;
      const next = sessionValue(s.holder, plan.valueAtMs);
      const ops: EtcdRequestOp[] = [
        { request_put: { key: s.key, value: next, lease: s.leaseId } },
        rangePrefix(k.endedOf(s.leaseId)),
        ...plan.markers.map((key): EtcdRequestOp => ({ request_delete_range: { key } })),
        ...plan.orphans.map(
          ([name, t]): EtcdRequestOp => ({
            request_txn: {
              // A term whose move was never answered is known by the value the move wrote.
              compare: [
                t.rev === undefined
                  ? { key: k.term(name), target: 'Value', result: 'Equal', value: t.moved }
                  : { key: k.term(name), target: 'Create', result: 'Equal', create_revision: t.rev },
              ],
              success: [{ request_delete_range: { key: k.term(name) } }],
              failure: [],
            },
          }),
        ),
      ];
      const compared = s.state.value;
      s.state = swapSent(s.state, next);
      const r = await txn(ctx, guarded(k, ops, [{ key: s.key, target: 'Value', result: 'Equal', value: compared }]), deadline, 'session renewal');
      // Given up at its deadline, and a later tick has started: what this one saw is stale, and
      // writing it (the session's value above all) would make the later ticks misjudge.
      if (!current()) throw given();
      const prefix = k.endedOf(s.leaseId);
      const stored = first(r.responses[2]);
      const outcome = afterSwap(
        s.state,
        schemaOk(k, r)
          ? { kind: 'swapped', markersRead: all(r.responses[1]).map((kv) => ({ id: kv.key.toString('latin1'), key: kv.key, name: k.nameIn(kv.key, prefix), rev: kv.value.toString() })) }
          : { kind: 'refused', stored: stored?.value, storedHolder: stored === undefined ? undefined : parseSession(stored)?.h },
        { holder: s.holder, sent: next, plan, terms: s.terms, moving: s.moving },
      );
      if (outcome.kind === 'over') return outcome.result;
      s.state = outcome.state;
      if (outcome.kind === 'again') continue;
      for (const name of outcome.remove) s.terms.delete(name);
      return { kind: 'swapped', ended: outcome.ended };
    }
    throw new StoreUnavailableError(`etcd: session ${s.leaseId} kept changing under its own renewals; this is retryable`);
  })();
  if (swapped.kind !== 'swapped') return swapped;
  // After the swap, not with it: a keepalive only ever follows a swap that proved this process
  // is not a clone, and it goes to the member that just answered (the pool prefers it), which
  // has just reached a working etcd leader. Sent together, the two had separate retry schedules
  // while a frozen leader was replaced, and the tick waited for the slower one: CI lost a TTL-4s
  // term in test/topologies/etcd-cluster.test.ts that way. The cost is one round trip per tick.
  const sentAtMs = clock.wallNow();
  let answer: KeepaliveAnswer;
  try {
    const ka = await ctx.client.leaseClient.leaseKeepAliveOnce(s.leaseId, { deadline, signal: ctx.call.signal, attemptMs: ctx.call.attemptMs });
    answer = { kind: 'answered', ttlSec: Number(ka.TTL) };
  } catch (err) {
    answer = { kind: 'unseen', error: mapEtcdError(err, 'session keepalive') };
  }
  if (!current() && answer.kind === 'answered') throw given();
  if (answer.kind === 'answered' && !(answer.ttlSec > 0)) answer = await confirmGone(ctx, s, deadline, answer);
  const kept = afterKeepalive(s.state, s.ttlSec, sentAtMs, answer, nowOf(clock));
  if (kept.kind === 'over') return kept.result;
  s.state = kept.state;
  if (kept.kind === 'lost') throw kept.error;
  return { kind: 'alive', expiresAtMs: kept.expiresAtMs, storeNowMs: kept.storeNowMs, ended: swapped.ended };
}

/**
 * A keepalive answered "no such lease" (TTL 0), checked before it ends every term of the session.
 * A keepalive is not a linearizable read: a member that was frozen while a new etcd leader was
 * elected can answer it from its own stale lessor once it thaws, before it hears of the new
 * term, and call a live lease expired (test/topologies/etcd-cluster, SIGSTOP of the leader: the
 * term ended about 100 ms after SIGCONT, in 2 of 5 CI runs). A Txn is linearizable: if the
 * session key, which lives on the lease, is still there, the lease is, and this tick counts
 * as unanswered (nothing renewed; "unknown is not yes"), so the local deadline still bounds the
 * term if no keepalive succeeds. If the key is gone, so is the lease.
 */
async function confirmGone(ctx: SessionContext, s: Session, deadline: number, answer: KeepaliveAnswer): Promise<KeepaliveAnswer> {
  let r: EtcdTxnResponse;
  try {
    r = await txn(ctx, { compare: [], success: [rangeOf(s.key)], failure: [] }, deadline, 'session keepalive check');
  } catch (err) {
    return { kind: 'unseen', error: err };
  }
  const kv = first(r.responses[0]);
  if (kv === undefined || String(kv.lease) !== String(s.leaseId)) return answer;
  return { kind: 'unseen', error: new StoreUnavailableError(`etcd: a member answered the session keepalive with lease ${s.leaseId} gone, but a linearizable read still finds it (a member behind the cluster); this is retryable`) };
}

/**
 * A clone shares this session: end every term on it as a clone conflict, and delete the
 * session key so the other copy's next tick finds it gone. Only this rare path costs work per
 * term (a few Txns of ~120 terms each, concurrently).
 */
async function endAsCloned(ctx: SessionContext, s: Session, deadline: number): Promise<void> {
  const k = ctx.keys;
  const atMs = ctx.client.clock.wallNow();
  const perTxn = Math.max(1, ctx.maxOpsPerTxn - 4);
  const terms = [...s.terms];
  const chunks: EtcdRequestOp[][] = [[{ request_delete_range: { key: s.key } }]];
  for (const [name, t] of terms) {
    // A move never answered: the term, if it is here, ends with the session's lease.
    if (t.rev === undefined) continue;
    let cur = chunks[chunks.length - 1]!;
    if (cur.length >= perTxn) chunks.push((cur = []));
    const token = k.token(t.rev).toString();
    const state: StateValue = { holder: s.holder, token, startedAtMs: atMs, endedBy: 'conflict', endedAtMs: atMs, nonce: t.nonce };
    const entry: HistoryValue = { name, event: 'conflict', holder: null, previousHolder: s.holder, token, atMs, detail: CONFLICT_DETAIL, seq: cur.length };
    cur.push({
      request_txn: {
        compare: [{ key: k.term(name), target: 'Create', result: 'Equal', create_revision: t.rev }],
        success: [
          { request_delete_range: { key: k.term(name) } },
          { request_put: { key: k.state(name), value: json(state) } },
          { request_put: { key: k.history(name, newNonce()), value: json(entry) } },
        ],
        failure: [],
      },
    });
  }
  await Promise.all(chunks.map((c) => txn(ctx, guarded(k, c), deadline, 'ending a cloned session').then((r) => schemaOk(k, r))));
  s.terms.clear();
}

/** How claim.ts hands a batch to the sessions, and what it gets back. */
interface SessionPass {
  /** Answers given here, by request index (an array as long as the batch: claim.ts fills in the rest). */
  answered: (ClaimResult | undefined)[];
  /** Request indexes left for claim.ts's rounds. */
  rest: number[];
  /** The session lease a renewal left for the rounds moves its term onto, by SessionBook.keyOf. */
  grants: Map<string, Grant>;
  /** Rest requests whose term a session held until this call: if its key is gone, it expired with the session. */
  fromSession: Set<number>;
  /** Rest renewals registered as moving in their session, with their sequence numbers: settleInSession (or unmove) each. */
  seqs: Map<number, number>;
}

/**
 * Renews what the sessions hold, ticks (or opens) the session of every other renewal in the
 * batch, and leaves everything else to claim.ts.
 */
export async function renewOnSessions(ctx: SessionContext, requests: readonly ClaimRequest[], deadline: number): Promise<SessionPass> {
  const answered = new Array<ClaimResult | undefined>(requests.length);
  const rest: number[] = [];
  const fromSession = new Set<number>();
  const fast = new Map<Session, FastRenewals>();
  const needed = new Map<string, { holder: string; ttlSec: number }>();
  // Per request only what must be: a batch is usually one holder and one TTL.
  let lastHolder: string | undefined;
  let lastTtlMs: number | undefined;
  let s: Session | undefined;
  let list: FastRenewals | undefined;
  for (let i = 0; i < requests.length; i++) {
    const req = requests[i]!;
    if (req.expect === null || req.expect.length === 0) {
      rest.push(i);
      continue;
    }
    if (req.holder !== lastHolder || req.ttlMs !== lastTtlMs) {
      lastHolder = req.holder;
      lastTtlMs = req.ttlMs;
      const ttlSec = ttlSecOf(req.ttlMs);
      needed.set(sessionKeyOf(req.holder, ttlSec), { holder: req.holder, ttlSec });
      s = ctx.book.get(req.holder, ttlSec);
      list = s === undefined ? undefined : fast.get(s);
      // Nothing below changes a session's terms before the answers are read (renew only queues).
      if (s !== undefined && list === undefined) fast.set(s, (list = { changes: s.terms.changes, indexes: [], terms: [], seqs: [] }));
    }
    const t = s?.terms.get(req.name);
    if (s !== undefined && t?.rev !== undefined && req.expect.includes(t.nonce)) {
      list!.indexes.push(i);
      list!.terms.push(t);
      list!.seqs.push(++s.seq);
      continue;
    }
    // Not the session's to answer: a first renewal (the rounds move it onto the session), or a
    // nonce the session never gave out (the rounds read the store and call it a clone).
    rest.push(i);
  }
  if (needed.size === 0) return { answered, rest, grants: new Map(), fromSession, seqs: new Map() };

  const grants = new Map<string, Grant>();
  await Promise.all(
    [...needed].map(async ([key, { holder, ttlSec }]) => {
      const s = ctx.book.get(holder, ttlSec);
      if (s !== undefined) {
        const mine = fast.get(s) ?? { changes: s.terms.changes, indexes: [], terms: [], seqs: [] };
        const r = await s.renew(ctx, requests, mine.indexes, deadline);
        if (r.kind === 'alive') {
          // Read once, after the keepalive's answer: later than when etcd restarted the TTL, so
          // the sweep (renewedAt + TTL) still comes after the engine's own deadline for the term.
          const renewedAt = ctx.client.clock.monoNow();
          const moving = s.moving.size > 0;
          // No set, delete or clear since the terms were read: each is still its name's entry.
          const unchanged = s.terms.changes === mine.changes;
          for (let j = 0; j < mine.indexes.length; j++) {
            const index = mine.indexes[j]!;
            const term = mine.terms[j]!;
            const seq = mine.seqs[j]!;
            const req = requests[index]!;
            // Ended by a marker (or replaced meanwhile): the rounds read the store.
            if (!unchanged && s.terms.get(req.name) !== term) {
              rest.push(index);
              fromSession.add(index);
              continue;
            }
            term.nonce = req.nextNonce;
            term.renewedAt = renewedAt;
            if (seq > term.seq) term.seq = seq;
            if (moving && s.moving.has(req.name)) s.settled.set(req.name, Math.max(s.settled.get(req.name) ?? 0, seq));
            answered[index] = { name: req.name, outcome: 'renewed', token: (term.token ??= ctx.keys.token(term.rev!)), holder: req.holder, expiresAtMs: r.expiresAtMs, storeNowMs: r.storeNowMs };
          }
          grants.set(key, s.grant());
          return;
        }
        ctx.book.drop(s);
        const storeNowMs = ctx.client.clock.wallNow();
        for (let j = 0; j < mine.indexes.length; j++) {
          const index = mine.indexes[j]!;
          const term = mine.terms[j]!;
          const req = requests[index]!;
          if (r.kind === 'cloned' && term.rev !== undefined) {
            answered[index] = { name: req.name, outcome: 'lost', reason: 'cloned', holder: null, token: ctx.keys.token(term.rev), expiresAtMs: storeNowMs, storeNowMs };
          } else {
            // Gone: every term on it ended; the rounds read how.
            rest.push(index);
            fromSession.add(index);
          }
        }
      }
      const fresh = await ctx.book.ensure(holder, ttlSec, () => openSession(ctx, holder, ttlSec, deadline));
      grants.set(key, fresh.grant());
    }),
  );
  rest.sort((a, b) => a - b);
  // A first renewal is in its session before it is sent: if the move lands and its answer is
  // lost, the session still sweeps the term (by its value) once nobody renews it. And it is
  // "moving" until settled: its markers stay, its entry is not swept.
  const seqs = new Map<number, number>();
  for (const index of rest) {
    const req = requests[index]!;
    if (req.expect === null || req.expect.length === 0) continue;
    const s = ctx.book.get(req.holder, ttlSecOf(req.ttlMs));
    if (s === undefined || grants.get(sessionKeyOf(req.holder, ttlSecOf(req.ttlMs)))?.id !== s.leaseId) continue;
    const seq = ++s.seq;
    seqs.set(index, seq);
    s.moving.set(req.name, (s.moving.get(req.name) ?? 0) + 1);
    if (s.terms.has(req.name)) continue;
    const moved = sessionTermValue(req.holder, req.nextNonce);
    s.terms.set(req.name, { rev: undefined, moved, moveNonce: req.nextNonce, nonce: req.nextNonce, renewedAt: ctx.client.clock.monoNow(), seq });
  }
  return { answered, rest, grants, fromSession, seqs };
}

/**
 * After the rounds, for a renewal registered as moving onto session lease `grant` with sequence
 * number `seq`: a renewed term joins the session (if it is still the live one on that lease); a
 * lost one leaves it; `result` undefined (the rounds failed) only ends the move. An answer older
 * than the entry's last writer changes nothing.
 */
export function settleInSession(ctx: SessionContext, req: ClaimRequest, result: ClaimResult | undefined, grant: Grant, seq: number): void {
  const s = ctx.book.get(req.holder, ttlSecOf(req.ttlMs)) ?? undefined;
  if (s === undefined || s.leaseId !== grant.id) return;
  const left = (s.moving.get(req.name) ?? 1) - 1;
  if (left > 0) s.moving.set(req.name, left);
  else s.moving.delete(req.name);
  const newer = (s.settled.get(req.name) ?? 0) > seq || (s.terms.get(req.name)?.seq ?? 0) > seq;
  if (left > 0 && !newer) s.settled.set(req.name, seq);
  if (left === 0) s.settled.delete(req.name);
  if (newer || result === undefined) return;
  if (result.outcome !== 'renewed' || s.over !== undefined) {
    // Lost (or on a session that died meanwhile: its lease ends with it): not ours to tick.
    s.terms.delete(req.name);
    return;
  }
  const prev = s.terms.get(req.name);
  s.terms.set(req.name, {
    rev: (result.token - ctx.keys.floor).toString(),
    token: result.token,
    moved: prev?.moved ?? sessionTermValue(req.holder, req.nextNonce),
    moveNonce: prev?.moveNonce ?? req.nextNonce,
    nonce: req.nextNonce,
    renewedAt: ctx.client.clock.monoNow(),
    seq,
  });
}

/** `p`, or a retryable StoreUnavailableError once `deadline` (wall ms on `clock`) passes. */
function withDeadline<T>(clock: Clock, p: Promise<T>, deadline: number, message: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = clock.setTimeout(() => reject(new StoreUnavailableError(message)), Math.max(1, deadline - clock.wallNow()));
    p.then(
      (v) => {
        clock.clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clock.clearTimeout(timer);
        reject(e as Error);
      },
    );
  });
}
