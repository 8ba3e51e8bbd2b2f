/**
 * A session's tick as a pure plan (session.ts explains sessions and does the I/O): what one
 * session knows is one immutable {@link SessionState}, and each step of a tick is a function of
 * that state, the time, and the store's answer, returning the next state and what to do. Nothing
 * here reads a clock, draws randomness or sends anything, so every rule is proven with plain
 * numbers on the fake clock (test/unit/etcd-tick.test.ts):
 *
 *   planTick(state, view, now)   -> stand down | give up | keepalive (the Txn's deletes, then the keepalive)
 *   swapSent(state, value)       -> the state while the Txn is out (its value may land unseen)
 *   afterSwap(state, answer, ..) -> swapped (markers read end terms) | again (adopt our own) | over
 *   afterKeepalive(state, answer) -> alive until a new expiry | over (the lease is gone) | lost (no answer seen)
 *
 * Unknown is not yes: the session's expiry moves only when a keepalive's answer is seen. A
 * keepalive that failed or was never answered leaves it where the last seen answer put it, and
 * the tick is a loss (a retryable error: each term's own deadline, in the engine, runs on).
 */

/** What one session knows of one of its terms. */
export interface SessionTerm {
  /**
   * The term key's create revision (its token, less the floor); undefined while the renewal
   * that moves it here has not been answered (it may have landed: then `moved` is its value).
   */
  rev: string | undefined;
  /**
   * The token (`rev` plus the token floor), kept once known: answering 10,000 renewals a tick
   * must not parse as many decimal strings into bigints. The floor cannot move under a live
   * session (raising it ends every session: TickView.floorMoved).
   */
  token?: bigint;
  /** The term key's value as the move wrote it: [holder, move nonce, 's']. */
  moved: Buffer;
  /** The nonce the move wrote: what the renew record names (claim.ts tells 'expired' by it). */
  moveNonce: string;
  /** The nonce the last answered renewal was sent with (the engine presents it next). */
  nonce: string;
  /** Monotonic time (the store's clock) of the last renewal that named it: unnamed for a TTL, it is an orphan. */
  renewedAt: number;
  /** The session's sequence number of the request that last wrote this entry (see Session.seq). */
  seq: number;
}

/** How a session ended: nothing renews on it again. */
export type SessionOver =
  /** The lease ran out (a pause longer than the TTL), a clone ended the session, or the token floor was raised. */
  | { kind: 'gone' }
  /**
   * Another process swapped the session key: a clone of this one, or this one is the clone.
   * Every term of the session (`terms`, as they were) was then ended as a clone conflict.
   */
  | { kind: 'cloned'; terms: ReadonlyMap<string, SessionTerm> };

export type TickResult =
  /** Every term of the session lives until at least `expiresAtMs`, except those in `ended`. */
  | { kind: 'alive'; expiresAtMs: number; storeNowMs: number; ended: Set<string> }
  | SessionOver;

/**
 * The session's own state, for the life of its etcd lease: one record, replaced whole by each
 * transition below and never edited.
 */
export interface SessionState {
  /** The session key's value as this session last saw it written. */
  readonly value: Buffer;
  /** Values sent by ticks whose answer never came: one of them may be the stored value. */
  readonly pending: readonly Buffer[];
  /** Lower bound of the etcd lease's expiry, in the store's time (local wall ms at etcd's answers). */
  readonly expiresAtMs: number;
  /** Markers read, deleted by later ticks (by latin1 key). */
  readonly markers: ReadonlyMap<string, Buffer>;
  /** Monotonic time of the last look for abandoned terms. */
  readonly sweptAt: number;
  /** Monotonic time of the last tick or the opening: a session unused for long is pruned. */
  readonly usedAt: number;
  /** Set once a tick found the session gone or cloned (or it was dropped): nothing renews on it again. */
  readonly over: SessionOver | undefined;
}

/** A fresh session's state: its value just written, its lease just granted. */
export function openedState(value: Buffer, expiresAtMs: number, monoNow: number): SessionState {
  return { value, pending: [], expiresAtMs, markers: new Map(), sweptAt: 0, usedAt: monoNow, over: undefined };
}

/** When a step happens: monotonic ms for local intervals, wall ms for the store's time and deadlines (time.ts). */
export interface TickNow {
  mono: number;
  wall: number;
}

/** What a tick's plan reads besides the session's state. */
export interface TickView {
  /** The session lease's TTL in seconds, as granted. */
  ttlSec: number;
  /** `migrate --min-token` (any process) raised the floor since the session opened: it deleted every term key. */
  floorMoved: boolean;
  /** The call's deadline, wall ms. */
  deadline: number;
  terms: ReadonlyMap<string, SessionTerm>;
  /**
   * The names renewed by this tick: never orphans. Asked only of a term already unrenewed for a
   * TTL (rare), so a caller may build it lazily rather than hash every name on every tick.
   */
  renewing: { has(name: string): boolean };
  /** Names whose move onto the session is in flight: the call that moves it decides, then it is swept. */
  moving: ReadonlyMap<string, number>;
  /** etcd's --max-txn-ops. */
  maxOpsPerTxn: number;
}

export type TickPlan =
  /** The session is over: every term on it stands down (the rounds read how). Nothing is sent. */
  | { kind: 'stand-down'; state: SessionState; result: SessionOver }
  /** The call's deadline has passed: nothing is sent, the session lives on, and the renewal is retryable. */
  | { kind: 'give-up' }
  /**
   * Swap the session key's value (a fresh one, stamped `valueAtMs`) in one Txn that also deletes
   * `markers` and, by compare, the `orphans`; once the swap proves this process is no clone,
   * keep the session's lease alive.
   */
  | { kind: 'keepalive'; state: SessionState; markers: Buffer[]; orphans: [string, SessionTerm][]; valueAtMs: number };

/** The first step of every round of a tick. */
export function planTick(state: SessionState, view: TickView, now: TickNow): TickPlan {
  if (state.over !== undefined) return { kind: 'stand-down', state, result: state.over };
  if (view.floorMoved) {
    const result: SessionOver = { kind: 'gone' };
    return { kind: 'stand-down', state: { ...state, over: result }, result };
  }
  // Sent now, it would be abandoned on arrival: gRPC fails a call whose deadline has passed.
  if (now.wall >= view.deadline) return { kind: 'give-up' };
  const ttlMs = view.ttlSec * 1000;
  // The operations besides the swap and the read share the Txn's --max-txn-ops with them.
  const room = Math.max(2, view.maxOpsPerTxn - 4);
  const markers = [...state.markers.values()].slice(0, Math.floor(room / 2));
  const orphans: [string, SessionTerm][] = [];
  // A look at every term a few times per TTL is enough: a sweep is at most that much later.
  // Monotonic: a wall-clock step must not delete a term its holder still believes in (the
  // engine's own deadline, on the same clock, always comes first).
  const sweep = now.mono - state.sweptAt >= ttlMs / 4;
  for (const [name, t] of sweep ? view.terms : []) {
    if (orphans.length >= room - markers.length) break;
    if (t.renewedAt + ttlMs < now.mono && !view.moving.has(name) && !view.renewing.has(name)) orphans.push([name, t]);
  }
  return { kind: 'keepalive', state: { ...state, usedAt: now.mono, sweptAt: sweep ? now.mono : state.sweptAt }, markers, orphans, valueAtMs: now.wall };
}

/** The Txn carrying `value` is on its way: until its answer is seen, the stored value may be it. */
export function swapSent(state: SessionState, value: Buffer): SessionState {
  return { ...state, pending: [...state.pending, value].slice(-4) };
}

/** A marker the Txn read: `{p}/ended/{lease}/{name}` = the ended term's create revision. */
export interface MarkerRead {
  /** The marker key as latin1: its identity in SessionState.markers. */
  id: string;
  key: Buffer;
  /** The term's name (null: a key this layout does not name). */
  name: string | null;
  /** The create revision of the term it ended. */
  rev: string;
}

type SwapAnswer =
  /** The compare held: our value is stored now; the markers of the session's lease as read. */
  | { kind: 'swapped'; markersRead: readonly MarkerRead[] }
  /** The compare failed: what the session key holds (undefined: gone), and the holder it names. */
  | { kind: 'refused'; stored: Buffer | undefined; storedHolder: string | undefined };

type SwapOutcome =
  /** This process is no clone. `remove`: terms that leave the session (orphans deleted, terms marked ended); `ended`: the marked ones. */
  | { kind: 'swapped'; state: SessionState; remove: string[]; ended: Set<string> }
  /** A tick of ours landed without its answer reaching us: it is adopted, and the next round swaps again. */
  | { kind: 'again'; state: SessionState }
  | { kind: 'over'; state: SessionState; result: SessionOver };

/** What the Txn's answer is read against: the round it answers, and the session's tables as they are when it arrives. */
interface SwapContext {
  /** The session's holder id. */
  holder: string;
  /** The value the Txn carried. */
  sent: Buffer;
  plan: Extract<TickPlan, { kind: 'keepalive' }>;
  terms: ReadonlyMap<string, SessionTerm>;
  moving: ReadonlyMap<string, number>;
}

/** The Txn's answer. */
export function afterSwap(state: SessionState, answer: SwapAnswer, { holder, sent, plan, terms, moving }: SwapContext): SwapOutcome {
  if (answer.kind === 'swapped') {
    const deleted = new Set(plan.markers.map((m) => m.toString('latin1')));
    const markers = new Map([...state.markers].filter(([id]) => !deleted.has(id)));
    const remove = plan.orphans.map(([name]) => name);
    const gone = new Set(remove);
    const ended = new Set<string>();
    for (const m of answer.markersRead) {
      // A marker names the term it ended by create revision: an older term of the same name
      // (released, then acquired again and moved here) is not this one. A marked term leaves
      // the session now, whether or not this tick renews it: the marker may be deleted before
      // its next renewal comes. A move not yet answered has no create revision to match: it is
      // never answered 'renewed' here, and the rounds that moved it read the store themselves.
      const t = m.name === null || gone.has(m.name) ? undefined : terms.get(m.name);
      if (t?.rev !== undefined && t.rev === m.rev && !ended.has(m.name!)) {
        ended.add(m.name!);
        remove.push(m.name!);
      }
      // Kept for a later tick to delete, unless this one did, or the term's move is in flight
      // (the first tick after it settles must still find the delete that happened meanwhile).
      if (!deleted.has(m.id) && (m.name === null || !moving.has(m.name))) markers.set(m.id, m.key);
    }
    return { kind: 'swapped', state: { ...state, value: sent, pending: [], markers }, remove, ended };
  }
  if (answer.stored === undefined) return over(state, { kind: 'gone' });
  const stored = answer.stored;
  const mine = state.pending.find((p) => p.equals(stored));
  if (mine !== undefined) return { kind: 'again', state: { ...state, value: mine, pending: [] } };
  // Our holder id on a value we never wrote: another copy of this session swapped it.
  return over(state, answer.storedHolder === holder ? { kind: 'cloned', terms: new Map(terms) } : { kind: 'gone' });
}

function over(state: SessionState, result: SessionOver): SwapOutcome {
  return { kind: 'over', state: { ...state, over: result }, result };
}

export type KeepaliveAnswer =
  /** etcd answered: the lease's TTL now, in seconds (0 or less: the lease is gone). */
  | { kind: 'answered'; ttlSec: number }
  /** No answer was seen (an error, or none in time): it may or may not have reached etcd. */
  | { kind: 'unseen'; error: unknown };

type KeepaliveOutcome =
  | { kind: 'alive'; state: SessionState; expiresAtMs: number; storeNowMs: number }
  | { kind: 'over'; state: SessionState; result: SessionOver }
  /** Unknown is not yes: this tick renews nothing, the session's expiry stays, and the caller may retry. */
  | { kind: 'lost'; state: SessionState; error: unknown };

/**
 * The keepalive's answer. `sentAtMs`: wall time just before it was sent (etcd restarts the TTL
 * when it receives it, later); `now`: when the answer arrived; `ttlSec`: the session's TTL.
 */
export function afterKeepalive(state: SessionState, ttlSec: number, sentAtMs: number, answer: KeepaliveAnswer, now: TickNow): KeepaliveOutcome {
  if (answer.kind === 'unseen') return { kind: 'lost', state, error: answer.error };
  if (!(answer.ttlSec > 0)) {
    const result: SessionOver = { kind: 'gone' };
    return { kind: 'over', state: { ...state, over: result }, result };
  }
  // etcd may grant more than asked (its minimum TTL); the session counts on what it asked for.
  const expiresAtMs = sentAtMs + Math.min(answer.ttlSec, ttlSec) * 1000;
  return { kind: 'alive', state: { ...state, expiresAtMs }, expiresAtMs, storeNowMs: now.wall };
}
