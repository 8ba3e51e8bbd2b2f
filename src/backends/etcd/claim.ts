import { StoreUnavailableError } from '../../core/errors.js';
import { CONFLICT_DETAIL } from '../../core/claim-rule.js';
import { checkClaimBatch } from '../checks.js';
import type { ClaimRequest, ClaimResult, LostReason } from '../store.js';
import type { EtcdKeyValue, EtcdRequestOp, EtcdTxnResponse } from './client.js';
import type { MemberPool } from './members.js';
import { NEVER_SEEN, refusedSince, type SeenState } from './seen.js';
import { mapEtcdError } from './client.js';
import {
  json,
  parseRenew,
  parseState,
  parseTerm,
  stateToken,
  sessionTermValue,
  termValue,
  type EtcdKeys,
  type HistoryValue,
  type RenewValue,
  type StateValue,
} from './keys.js';
import { guarded, rangeOf, schemaOk } from './txn.js';
import type { SessionBook } from './session-book.js';
import { renewOnSessions, sessionKeyOf, settleInSession, ttlSecOf, type SessionContext } from './session.js';

/**
 * Acquire-or-renew for a batch, in as few round trips as etcd allows:
 *
 *   1. one LeaseGrant per distinct TTL in the batch (shared with concurrent claims, and reused
 *      while a granted lease still covers the whole requested TTL);
 *   2. one Txn per chunk of up to ~120 leases, chunks sent concurrently. Each lease is a nested
 *      Txn (etcd >= 3.3) with its own compares, so one lease's outcome never depends on another's.
 *
 * Renewals of terms a session holds never get here: session.ts answers them with one tick
 * (one Txn and one keepalive, whatever their number). What reaches the rounds below is every
 * acquisition, and each term's first renewal, which moves it onto its holder's session. Contending
 * is a grant and a txn when this store instance has seen the lease's state key before (or it has
 * never existed); otherwise the first txn answers with the current state and a second one acts on it.
 *
 * Renewal (`expect` set) is blind: compare the term key's value with [holder, nonce] for each
 * expected nonce (an OR, built from nested Txns), and on a match put [holder, nextNonce, 's'] on
 * the session's lease (or, for a client that cannot keep a lease alive, [holder, nextNonce] on a
 * fresh one). The put keeps the key's create revision, so the token stays; moving the key is
 * what extends the term, atomically with the nonce swap. From then on the session's keepalive
 * extends it, only ever together with the session's own compare-and-swap (session.ts), so two
 * restored clones still cannot both keep a term. A session term's value never matches the
 * two-element compare: a renewal of it from outside the session is read as a clone's.
 *
 * Contending compares "term key absent" (never held, released, revoked, or its lease ran out:
 * etcd deleted it) and "state key unchanged since we read it", then creates the term key on the
 * fresh lease; its create revision, the transaction's revision, is the new token. Revisions only
 * go up, cluster-wide, and survive restarts, so a recreated key always gets a larger token.
 *
 * Clones (store.ts, expectation 4b): when a renewal's compares all fail and its reads show a
 * term key holding our holder id with a nonce we do not hold (and not our own nextNonce, which
 * would be this request landed already), two processes share one term. The next round sends,
 * for that lease, a compare-and-delete: `create revision of the term key == the term's token`
 * (the same term, however often the other clone renewed it meanwhile: a term's holder and
 * create revision never change while it lives) ? delete the term key, put the state key with
 * `endedBy: 'conflict'`, put a 'conflict' history entry : the reads again. The answer is
 * lost/cloned. The delete wakes followers through watchFreed, as a release does. The other
 * clone's next renewal finds no term key and `endedBy: 'conflict'` in the state key, and is
 * answered lost/cloned too; the next acquisition creates the term key again, at a larger
 * revision. Only this (rare) case costs one more round trip: etcd cannot compare "the value
 * begins with our holder id" and still tell us the token to record.
 *
 * Quiet contention: a contender whose last read (by this store instance) found the term key held
 * by someone else, while this store's watch is established and has not reported that key deleted
 * since (store.ts clears the mark on the delete, and on any drop of the watch), sends only the
 * reads: no LeaseGrant (it would almost surely go unused) and no LeaseTimeToLive (its follower
 * waits on the watch, which reports the expiry; the busy answer's expiry is null, "could not
 * say", rather than a guess from the holder's clock). One Txn per check. If the reads find the
 * key gone after all, the next round grants and claims as usual.
 *
 * Every answer can be recognised if it already landed (a failover retry inside etcd3, see
 * client.ts): the term key then holds this very request's nextNonce, fresh randomness that no
 * other request carries. Across calls too: a move onto the session whose answer was lost holds
 * a nonce the engine's next renewal presents, on the lease of the session this call ticked, and
 * is answered 'renewed' (decide()). A conflict delete that landed and is retried fails its
 * compare, and the reads (no term key, `endedBy: 'conflict'`) give the same answer.
 */

export interface Grant {
  id: string;
  /** Seconds, as granted (etcd raises TTLs below its minimum, ~2s by default). */
  ttlSec: number;
  /** Local time just before the grant was sent: etcd's expiry is at least this + ttl. */
  sentAtMs: number;
  /** A session's lease (session.ts): a term put on it is written as a session term. */
  session?: true;
}

interface ClaimContext {
  client: MemberPool;
  /** The caller's abandonment and the per-attempt budget, for every Txn of the batch. */
  call: { signal: AbortSignal | undefined; attemptMs: number };
  keys: EtcdKeys;
  /** etcd's --max-txn-ops (default 128): a nested Txn counts against its parent's budget. */
  maxOpsPerTxn: number;
  seen: Map<string, SeenState>;
  /** This store's watch on term-key deletes is established right now. */
  watched(): boolean;
  leaseFor(ttlMs: number, deadline: number): Promise<Grant>;
  /** Sessions, when the client can keep a lease alive (session.ts); otherwise every renewal moves its terms. */
  sessions?: SessionBook;
  /** Before the first round that may grant a term: refuses on a restored etcd (restore.ts). */
  beforeGrant?(deadline: number): Promise<void>;
}

/** A live term two clones renew: the round after the reads ends it (see above). */
interface ConflictTarget {
  /** The term key's create revision (the term's token less the floor). */
  token: string;
  /** The nonce the other clone stored. */
  nonce: string;
  startedAtMs: number | undefined;
  /** The term key's etcd lease: the conflict marks the delete there for its session (session.ts). */
  lease: string;
}

const MAX_ROUNDS = 5;
const SEEN_CAP = 100_000;

interface Plan {
  index: number;
  req: ClaimRequest;
  /** Undefined for a quiet contender's reads (see above). */
  grant: Grant | undefined;
  atMs: number;
  seen: SeenState;
  conflict: ConflictTarget | undefined;
  op: EtcdRequestOp;
}

/** What the innermost nested Txn answered: our put, or the three reads of the failure branch. */
type Leaf = { kind: 'put'; prevTerm: EtcdKeyValue | undefined } | { kind: 'read'; term?: EtcdKeyValue; state?: EtcdKeyValue; renew?: EtcdKeyValue };

type Decided =
  | { result: ClaimResult; ttlLookup?: { lease: string; renew: RenewValue | null; nonce: string } }
  | { retry: SeenState }
  | { conflict: ConflictTarget; seen: SeenState };

interface Pending {
  index: number;
  req: ClaimRequest;
  seen: SeenState;
  conflict?: ConflictTarget;
  quiet?: boolean;
}

/**
 * The shortest TTL of a batch, by a loop: a spread of the batch's TTLs into Math.min made an
 * array of them and passed up to 5,000 arguments, at every renewal tick.
 */
export function shortestTtlMs(requests: readonly ClaimRequest[]): number {
  let ms = Infinity;
  for (const r of requests) ms = Math.min(ms, r.ttlMs);
  return ms;
}

export async function claimBatch(ctx: ClaimContext, requests: readonly ClaimRequest[], deadline: number): Promise<ClaimResult[]> {
  checkClaimBatch(requests);
  const lookups: { index: number; lease: string; renew: RenewValue | null; nonce: string }[] = [];

  const grants = new Map<number, Grant>();
  const watched = ctx.watched();
  const sessionCtx: SessionContext | undefined =
    ctx.sessions === undefined ? undefined : { client: ctx.client, keys: ctx.keys, call: ctx.call, maxOpsPerTxn: ctx.maxOpsPerTxn, book: ctx.sessions };
  // Renewals of terms a session holds are answered by its tick; the rest go through the rounds.
  const pass = sessionCtx === undefined ? undefined : await renewOnSessions(sessionCtx, requests, deadline);
  const results: (ClaimResult | undefined)[] = pass?.answered ?? new Array<ClaimResult | undefined>(requests.length);
  const sessionGrant = (req: ClaimRequest): Grant | undefined =>
    req.expect === null || req.expect.length === 0 ? undefined : pass?.grants.get(sessionKeyOf(req.holder, ttlSecOf(req.ttlMs)));
  const grantOf = (req: ClaimRequest): Grant | undefined => sessionGrant(req) ?? grants.get(req.ttlMs);
  try {
    return await rounds();
  } finally {
    // Every move registered in its session is settled, answered or not (session.ts).
    if (sessionCtx !== undefined) {
      for (const [index, seq] of pass!.seqs) settleInSession(sessionCtx, requests[index]!, results[index], sessionGrant(requests[index]!)!, seq);
    }
  }

  async function rounds(): Promise<ClaimResult[]> {
  let pending: Pending[] = (pass?.rest ?? requests.map((_, i) => i)).map((index) => {
    const req = requests[index]!;
    const seen = ctx.seen.get(req.name) ?? NEVER_SEEN;
    return { index, req, seen, quiet: req.expect === null && ((watched && seen.termHeld === true) || refusedSince(req, seen, ctx.client.clock.wallNow())) };
  });
  let checked = false;
  for (let round = 0; pending.length > 0; round++) {
    if (round >= MAX_ROUNDS) {
      throw new StoreUnavailableError(
        `etcd: the state of ${pending.length} lease(s) kept changing under contention (${pending[0]!.req.name}, ...); try again`,
      );
    }
    // A caller that gave up has sent (or will send) its next claim with this one's nonce among
    // the expected ones: a later round from here would act on that successor's state (and read
    // its nonce as a clone's, ending a healthy term as a conflict). Nothing more goes out.
    if (ctx.call.signal?.aborted === true) {
      throw new StoreUnavailableError('the claim was abandoned by its caller before round ' + String(round + 1) + '; this is retryable');
    }
    // A contender that is not quiet may be granted a term, at a token a restored etcd would
    // issue again; a quiet read that finds the key gone comes back here as not quiet.
    if (!checked && ctx.beforeGrant !== undefined && pending.some((p) => p.quiet !== true && p.req.expect === null)) {
      checked = true;
      await ctx.beforeGrant(deadline);
    }
    // One LeaseGrant per distinct TTL, the first time a non-quiet request of the batch needs it.
    const ttls = [...new Set(pending.filter((p) => p.quiet !== true && grantOf(p.req) === undefined).map((p) => p.req.ttlMs))];
    if (ttls.length > 0) {
      try {
        const granted = await Promise.all(ttls.map((t) => ctx.leaseFor(t, deadline)));
        ttls.forEach((t, i) => grants.set(t, granted[i]!));
      } catch (err) {
        throw mapEtcdError(err, 'lease grant');
      }
    }
    const atMs = ctx.client.clock.wallNow();
    const chunks = chunk(pending, ctx.maxOpsPerTxn).map((c) =>
      c.map((p, seq) =>
        p.conflict !== undefined
          ? planConflict(ctx, p.index, seq, p.req, grantOf(p.req)!, atMs, p.seen, p.conflict)
          : p.quiet === true
            ? planReads(ctx, p.index, p.req, atMs, p.seen)
            : plan(ctx, p.index, seq, p.req, grantOf(p.req)!, atMs, p.seen),
      ),
    );
    let responses: EtcdTxnResponse[];
    try {
      responses = await Promise.all(chunks.map((c) => ctx.client.kv.txn(guarded(ctx.keys, c.map((p) => p.op)), { deadline, ...ctx.call })));
    } catch (err) {
      throw mapEtcdError(err, 'claim');
    }
    const storeNowMs = ctx.client.clock.wallNow();
    const next: Pending[] = [];
    chunks.forEach((c, ci) => {
      const resp = responses[ci]!;
      schemaOk(ctx.keys, resp);
      const revision = resp.header?.revision ?? '0';
      c.forEach((p, i) => {
        const inner = resp.responses[i]?.response_txn;
        if (inner == null) throw new StoreUnavailableError(`etcd answered claim of "${p.req.name}" without a transaction response`);
        const d =
          p.conflict !== undefined && inner.succeeded ? ended(ctx, p, p.conflict, revision, storeNowMs) : decide(ctx, p, leaf(inner), revision, storeNowMs, pass?.fromSession.has(p.index) === true);
        // A retry is never quiet: the reads just found the term key gone.
        if ('retry' in d) next.push({ index: p.index, req: p.req, seen: d.retry });
        else if ('conflict' in d) next.push({ index: p.index, req: p.req, seen: d.seen, conflict: d.conflict });
        else {
          results[p.index] = d.result;
          if (d.ttlLookup !== undefined) lookups.push({ index: p.index, ...d.ttlLookup });
        }
      });
    });
    pending = next;
  }

  if (lookups.length > 0) await fillExpiry(ctx, results, lookups, deadline);
  if (ctx.seen.size > SEEN_CAP) ctx.seen.clear();
  return results as ClaimResult[];
  }
}

/** A quiet contender's round: the three reads, nothing written (decide() answers busy or retry). */
function planReads(ctx: ClaimContext, index: number, req: ClaimRequest, atMs: number, seen: SeenState): Plan {
  const k = ctx.keys;
  const reads: EtcdRequestOp[] = [rangeOf(k.term(req.name)), rangeOf(k.state(req.name)), rangeOf(k.renew(req.name))];
  return { index, req, grant: undefined, atMs, seen, conflict: undefined, op: { request_txn: { compare: [], success: reads, failure: [] } } };
}

function plan(ctx: ClaimContext, index: number, seq: number, req: ClaimRequest, grant: Grant, atMs: number, seen: SeenState): Plan {
  const k = ctx.keys;
  const T = k.term(req.name);
  const renew: RenewValue = { nonce: req.nextNonce, renewedAtMs: atMs, expiresAtMs: grant.sentAtMs + grant.ttlSec * 1000 };
  const reads: EtcdRequestOp[] = [rangeOf(T), rangeOf(k.state(req.name)), rangeOf(k.renew(req.name))];
  const value = grant.session === true ? sessionTermValue(req.holder, req.nextNonce) : termValue(req.holder, req.nextNonce);
  const putTerm: EtcdRequestOp = { request_put: { key: T, value, lease: grant.id, prev_kv: true } };
  const putRenew: EtcdRequestOp = { request_put: { key: k.renew(req.name), value: json(renew) } };

  if (req.expect === null) {
    const takeover = seen.rev !== '0' && !seen.ended;
    const state: StateValue = { holder: req.holder, startedAtMs: atMs };
    const entry: HistoryValue = {
      name: req.name,
      event: takeover ? 'takeover' : 'acquired',
      holder: req.holder,
      previousHolder: takeover ? seen.holder : null,
      atMs,
      detail: null,
      seq,
    };
    const op: EtcdRequestOp = {
      request_txn: {
        compare: [
          { key: T, target: 'Create', result: 'Equal', create_revision: 0 },
          { key: k.state(req.name), target: 'Mod', result: 'Equal', mod_revision: seen.rev },
        ],
        success: [
          putTerm,
          { request_put: { key: k.state(req.name), value: json(state) } },
          putRenew,
          { request_put: { key: k.history(req.name, req.nextNonce), value: json(entry) } },
        ],
        failure: reads,
      },
    };
    return { index, req, grant, atMs, seen, conflict: undefined, op };
  }

  if (req.expect.length === 0) {
    // Nothing to compare against: the answer is 'lost', worked out from the reads.
    return { index, req, grant, atMs, seen, conflict: undefined, op: { request_txn: { compare: [], success: reads, failure: [] } } };
  }
  // An OR over the expected nonces: Txn(e1 ? put : Txn(e2 ? put : ... : reads)).
  let failure = reads;
  for (let i = req.expect.length - 1; ; i--) {
    const txn = {
      compare: [{ key: T, target: 'Value' as const, result: 'Equal' as const, value: termValue(req.holder, req.expect[i]!) }],
      success: [putTerm, putRenew],
      failure,
    };
    if (i === 0) return { index, req, grant, atMs, seen, conflict: undefined, op: { request_txn: txn } };
    failure = [{ request_txn: txn }];
  }
}

/**
 * Ends a term two clones renew: `create revision == token` (the same term is still live) ?
 * delete it, record how it ended, and write the history entry : the reads, to decide again.
 */
function planConflict(
  ctx: ClaimContext,
  index: number,
  seq: number,
  req: ClaimRequest,
  grant: Grant,
  atMs: number,
  seen: SeenState,
  c: ConflictTarget,
): Plan {
  const k = ctx.keys;
  const T = k.term(req.name);
  const state: StateValue = {
    holder: req.holder,
    token: k.token(c.token).toString(),
    startedAtMs: c.startedAtMs ?? atMs,
    endedBy: 'conflict',
    endedAtMs: atMs,
    nonce: c.nonce,
  };
  const entry: HistoryValue = {
    name: req.name,
    event: 'conflict',
    holder: null,
    previousHolder: req.holder,
    token: k.token(c.token).toString(),
    atMs,
    detail: CONFLICT_DETAIL,
    seq,
  };
  const op: EtcdRequestOp = {
    request_txn: {
      // The lease too: the marker goes where the term is now (a renewal may have moved it since
      // the reads; then the reads below decide again).
      compare: [
        { key: T, target: 'Create', result: 'Equal', create_revision: c.token },
        { key: T, target: 'Lease', result: 'Equal', lease: c.lease },
      ],
      success: [
        { request_delete_range: { key: T } },
        { request_put: { key: k.state(req.name), value: json(state) } },
        // This request's nextNonce was never stored: a fresh, unique history id.
        { request_put: { key: k.history(req.name, req.nextNonce), value: json(entry) } },
        // For the session the term was on, if any (session.ts): its tick would not see the delete.
        ...(c.lease === '0' ? [] : [{ request_put: { key: k.ended(c.lease, req.name), value: Buffer.from(c.token), lease: c.lease } }]),
      ],
      failure: [rangeOf(T), rangeOf(k.state(req.name)), rangeOf(k.renew(req.name))],
    },
  };
  return { index, req, grant, atMs, seen, conflict: c, op };
}

/** The conflict delete landed: the term is over for both clones. */
function ended(ctx: ClaimContext, p: Plan, c: ConflictTarget, revision: string, storeNowMs: number): Decided {
  ctx.seen.set(p.req.name, { rev: revision, holder: p.req.holder, ended: true });
  return {
    result: { name: p.req.name, outcome: 'lost', reason: 'cloned', holder: null, token: ctx.keys.token(c.token), expiresAtMs: p.atMs, storeNowMs },
  };
}

/**
 * etcd checks --max-txn-ops per level, and a nested Txn's budget is what its parent left: a
 * chunk fits when (leases in it) + (the deepest chain of ops under one lease) <= maxOps.
 */
function opCost(req: ClaimRequest, conflict: boolean): number {
  if (conflict) return 4; // compares 2, delete + puts + marker 4, reads 3
  if (req.expect === null) return 4; // compares 2, puts 4, reads 3
  if (req.expect.length === 0) return 3;
  return 3 + 2 * (req.expect.length - 1); // each OR level: compare 1, puts 2, nested 1; last: reads 3
}

function chunk<T extends Pending>(items: T[], maxOps: number): T[][] {
  const out: T[][] = [];
  let cur: T[] = [];
  let maxCost = 0;
  for (const item of items) {
    const own = opCost(item.req, item.conflict !== undefined);
    const cost = Math.max(maxCost, own);
    if (cur.length > 0 && cur.length + 1 + cost > maxOps) {
      out.push(cur);
      cur = [];
    }
    cur.push(item);
    maxCost = cur.length === 1 ? own : cost;
  }
  if (cur.length > 0) out.push(cur);
  return out;
}

function leaf(txn: EtcdTxnResponse): Leaf {
  for (let r = txn; ; ) {
    const op = r.responses[0];
    if (op?.response_txn != null) {
      r = op.response_txn;
      continue;
    }
    if (op?.response_put != null) return { kind: 'put', prevTerm: op.response_put.prev_kv ?? undefined };
    const kv = (i: number): EtcdKeyValue | undefined => r.responses[i]?.response_range?.kvs[0];
    return { kind: 'read', term: kv(0), state: kv(1), renew: kv(2) };
  }
}

/**
 * @param fromSession a session held this term until this call (session.ts): a term key gone
 * without a mark ran out with the session's lease, so the loss is 'expired', not 'cloned'.
 */
function decide(ctx: ClaimContext, p: Plan, l: Leaf, revision: string, storeNowMs: number, fromSession: boolean): Decided {
  const { req, grant } = p;
  const mine = (token: bigint, outcome: 'acquired' | 'renewed'): Decided => {
    // Only a request that put the term key gets here, and only a quiet one has no grant.
    if (grant === undefined) throw new StoreUnavailableError(`etcd: "${req.name}" was answered as granted to a claim that wrote nothing`);
    return { result: { name: req.name, outcome, token, holder: req.holder, expiresAtMs: grant.sentAtMs + grant.ttlSec * 1000, storeNowMs } };
  };

  if (l.kind === 'put') {
    if (req.expect === null) {
      // Acquired: the term key was created by this transaction, at its revision.
      ctx.seen.set(req.name, { rev: revision, holder: req.holder, ended: false });
      return mine(ctx.keys.token(revision), 'acquired');
    }
    if (l.prevTerm === undefined) throw new StoreUnavailableError(`etcd renewed "${req.name}" without returning the previous term`);
    return mine(ctx.keys.token(l.prevTerm.create_revision!), 'renewed');
  }

  const term = parseTerm(l.term);
  const stateVal = parseState(l.state);
  const renew = parseRenew(l.renew);
  // An unreadable state key still has a revision to compare against; count its term as ended.
  const seen: SeenState =
    l.state === undefined
      ? NEVER_SEEN
      : {
          rev: l.state.mod_revision,
          holder: stateVal?.holder ?? null,
          ended: stateVal === null || stateVal.endedBy !== undefined,
          ...(stateVal?.endedBy === 'released' && typeof stateVal.startedAtMs === 'number' ? { releasedStartedAtMs: stateVal.startedAtMs } : {}),
        };
  // Marked held only by a contender's read: the next contention may then be quiet (see above).
  ctx.seen.set(req.name, req.expect === null && l.term !== undefined ? { ...seen, termHeld: true } : seen);

  if (l.term !== undefined) {
    const token = ctx.keys.token(l.term.create_revision!);
    if (term === null) {
      // Not a value leasehold writes: someone else's key under our prefix. Never take it over.
      const result: ClaimResult =
        req.expect === null
          ? { name: req.name, outcome: 'busy', holder: null, token, expiresAtMs: null, storeNowMs }
          : { name: req.name, outcome: 'lost', reason: 'superseded', holder: null, token, expiresAtMs: null, storeNowMs };
      return { result };
    }
    if (term.holder === req.holder && term.nonce === req.nextNonce) {
      // This very request landed already (an attempt whose answer was lost, retried by the client).
      return mine(token, req.expect === null ? 'acquired' : 'renewed');
    }
    if (term.holder === req.holder && term.session && req.expect?.includes(term.nonce) === true && grant?.session === true && l.term.lease === grant.id) {
      // An earlier call's move onto this very session landed without its answer, and the
      // engine presents that move's nonce: ours, kept alive by the session's tick in this call.
      return mine(token, 'renewed');
    }
    const lookup = { lease: l.term.lease, renew, nonce: term.nonce };
    if (req.expect === null) {
      // When the term began: its state key's start, as its claimant's clock bound said (time.ts).
      const granted = stateVal?.holder === term.holder && stateVal.endedBy === undefined && stateVal.startedAtMs !== undefined ? { grantedAtMs: stateVal.startedAtMs } : {};
      const result: ClaimResult = { name: req.name, outcome: 'busy', holder: term.holder, token, expiresAtMs: null, storeNowMs, ...granted };
      // Quiet: its follower waits on the watch; the expiry stays unknown rather than cost a lookup.
      // Not one sent the reads for unlessReleasedSince: its caller looks again at that expiry.
      return p.grant === undefined && !refusedSince(req, p.seen, p.atMs) ? { result } : { result, ttlLookup: lookup };
    }
    if (term.holder === req.holder) {
      // Our holder id, a nonce we do not hold, a live term: two processes renew one term.
      const startedAtMs = stateVal?.holder === req.holder ? stateVal.startedAtMs : undefined;
      return { conflict: { token: l.term.create_revision, nonce: term.nonce, startedAtMs, lease: String(l.term.lease ?? '0') }, seen };
    }
    const reason: LostReason = 'superseded';
    return { result: { name: req.name, outcome: 'lost', reason, holder: term.holder, token, expiresAtMs: null, storeNowMs }, ttlLookup: lookup };
  }

  // No live term: free (never held, released, revoked) or its etcd lease ran out.
  if (req.expect === null) {
    // Released by a term begun since the contender's time: nothing written, nobody holds it.
    if (refusedSince(req, seen, storeNowMs)) return { result: { name: req.name, outcome: 'busy', holder: null, token: stateToken(l.state!, stateVal!, ctx.keys), expiresAtMs: null, storeNowMs, releasedSince: true } };
    return { retry: seen };
  }
  const token = l.state !== undefined && stateVal !== null ? stateToken(l.state, stateVal, ctx.keys) : null;
  let reason: LostReason;
  let holder: string | null = null;
  let lostExpiry: number | null = null;
  if (stateVal?.endedBy !== undefined) {
    // A term ended by a clone conflict is lost to both clones as 'cloned'.
    reason = stateVal.endedBy === 'conflict' ? 'cloned' : stateVal.endedBy;
    lostExpiry = stateVal.endedAtMs ?? null;
  } else if (stateVal !== null) {
    holder = stateVal.holder;
    lostExpiry = renew?.expiresAtMs ?? null;
    // A session's term keeps the renew record of its move: gone without a mark, it ran out with
    // the session's lease (a pause) or went with a raised floor; a clone would have left one.
    reason = stateVal.holder !== req.holder ? 'superseded' : renew === null || req.expect.includes(renew.nonce) || fromSession ? 'expired' : 'cloned';
  } else {
    reason = 'expired';
  }
  return { result: { name: req.name, outcome: 'lost', reason, holder, token, expiresAtMs: lostExpiry, storeNowMs } };
}

/**
 * etcd has no clock API: a busy answer's expiry comes from LeaseTimeToLive, which reports whole
 * seconds, truncated, so the real expiry lies in [now + TTL, now + TTL + 1s). The holder's own
 * record (its clock) pins it down inside that window when the two agree; when they do not (clock
 * skew, or etcd extended the lease on a leader change), the window wins. One lookup per
 * distinct etcd lease, concurrently; a failed lookup leaves the expiry unknown (null).
 */
async function fillExpiry(
  ctx: ClaimContext,
  results: (ClaimResult | undefined)[],
  lookups: { index: number; lease: string; renew: RenewValue | null; nonce: string }[],
  deadline: number,
): Promise<void> {
  const ttl = await leaseRemaining(ctx.client, [...new Set(lookups.map((l) => l.lease))], deadline);
  for (const l of lookups) {
    const r = results[l.index];
    if (r === undefined || r.outcome === 'acquired' || r.outcome === 'renewed') continue;
    const remaining = ttl.get(l.lease);
    if (remaining === undefined) continue;
    r.expiresAtMs = estimateExpiry(remaining, l.renew?.nonce === l.nonce ? l.renew.expiresAtMs : null);
    r.storeNowMs = remaining.atMs;
  }
}

export function estimateExpiry(remaining: { ttlSec: number; atMs: number }, recordedMs: number | null): number {
  if (remaining.ttlSec < 0) return remaining.atMs; // the lease is gone: the key goes with it
  const lo = remaining.atMs + remaining.ttlSec * 1000;
  const hi = lo + 1000;
  return recordedMs === null ? hi : Math.min(hi, Math.max(lo, recordedMs));
}

/** Remaining TTL per etcd lease id, with the local (wall, the pool's clock) time of each answer. Failed lookups are left out. */
export async function leaseRemaining(client: MemberPool, leases: string[], deadline: number): Promise<Map<string, { ttlSec: number; atMs: number; grantedSec: number }>> {
  const out = new Map<string, { ttlSec: number; atMs: number; grantedSec: number }>();
  await Promise.all(
    leases.map(async (id) => {
      if (id === '0') return;
      try {
        const r = await client.leaseClient.leaseTimeToLive({ ID: id }, { deadline });
        out.set(id, { ttlSec: Number(r.TTL), atMs: client.clock.wallNow(), grantedSec: Number(r.grantedTTL) });
      } catch {
        // expiry unknown; the answer itself stands
      }
    }),
  );
  return out;
}
