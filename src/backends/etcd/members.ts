import { StoreUnavailableError } from '../../core/errors.js';
import { grpcDeadline, realClock, type Clock } from './time.js';
import type { Etcd3Like, EtcdCallOptions, EtcdKeepAliveStream, EtcdRangeRequest, EtcdRangeResponse, EtcdStatusResponse, EtcdTxnRequest, EtcdTxnResponse, EtcdWatchBuilderLike } from './client.js';
import { EtcdKeepAliveError, isTransient } from './errors.js';

/**
 * What the store asks of a call: the overall deadline, the caller's abandonment, and how long
 * one attempt on one member may take before the next member is tried.
 */
interface MemberCallOptions {
  /** Wall-clock ms on the pool's clock (time.ts: this store's time domain). */
  deadline: number;
  signal?: AbortSignal | undefined;
  attemptMs?: number | undefined;
}

/** One attempt on one member when the caller names no budget (reads, migrate, admin calls). */
const DEFAULT_ATTEMPT_MS = 1000;

/** How long a member that refused a call, or hung, is tried last. */
const REFUSED_FOR_MS = 2000;

/**
 * The store's view of an etcd cluster: one `etcd3` client per member (each talking to that
 * member only, with no retry of its own), and the choice of member made here, per attempt.
 *
 * Why not one `etcd3` client over every member: it moves to another member only after a
 * fast error. A member that hangs (frozen, partitioned, a leader that stopped answering)
 * holds each call until the whole call deadline, so one sick member out of three cost a
 * TTL-3s holder its term. Here every attempt has its own gRPC deadline, well inside a renew
 * interval (`attemptMs`, from the claim's TTL); when it passes, gRPC cancels the call and the
 * next member gets a fresh one, so a retry never shares the hung original's fate. The member
 * that answered last is tried first, so a healthy cluster costs one round trip per call.
 * Attempts double their budget after as many hung attempts as there are members (a cluster
 * slow everywhere, not one member hung), always inside the caller's deadline; a member that
 * answers with an error is not asked again in the same call until an attempt on another has
 * hung, so a cluster that is down fails the call at once rather than at its deadline, and one
 * whose leader froze (the others answering "no leader" until they elect one) is asked again.
 *
 * A retried write is safe: every write leasehold sends is recognisable when it already landed
 * (claim.ts). A caller that gives up (`signal`) has its pending attempt abandoned at once
 * (gRPC cancels it at its own deadline, at most `attemptMs` later) and nothing more is sent
 * for it: a late attempt must not act on a state that its caller's successor has since made.
 *
 * The watch (wake-ups on release) stays on one client over every member: etcd3's watch
 * manager reconnects on its own, and a missed wake-up costs only latency.
 */
export class MemberPool {
  private preferred = 0;
  /**
   * Monotonic time (the pool's clock) when each member last failed an attempt: refused it
   * outright (down: connection refused or reset) or let it run out its time (frozen, partitioned).
   */
  private readonly failedAt: number[];
  private readonly members: readonly Etcd3Like[];
  private readonly watcher: Etcd3Like;
  private readonly owned: readonly Etcd3Like[];

  /**
   * @param owned the clients `close()` closes (none for a client the caller passed in).
   * @param clock every time this store reads (time.ts): the pool is what all its parts share.
   */
  constructor(
    members: readonly Etcd3Like[],
    watcher: Etcd3Like,
    owned: readonly Etcd3Like[],
    readonly clock: Clock = realClock,
  ) {
    this.members = members;
    this.watcher = watcher;
    this.owned = owned;
    this.failedAt = members.map(() => -Infinity);
  }

  readonly kv = {
    txn: (req: EtcdTxnRequest, o: MemberCallOptions): Promise<EtcdTxnResponse> => this.noted(this.call((c, d) => c.kv.txn(req, d), o)),
    range: (req: EtcdRangeRequest, o: MemberCallOptions): Promise<EtcdRangeResponse> => this.noted(this.call((c, d) => c.kv.range(req, d), o)),
  };

  /** The highest revision a KV answer carried, and the first answer found below what came before it. */
  private highestRevision = 0n;
  private rewound: { seen: bigint; found: bigint } | undefined;

  /**
   * KV answers are linearizable (leasehold never asks for serializable reads), so an answer to a
   * call sent after another's answer arrived carries at least that revision, whichever member
   * serves it. Lower means etcd's history went back: a restore or a wipe (restore.ts). Answers
   * to calls that overlapped may come back in any order, so each is compared only with what had
   * arrived before it was sent.
   */
  private noted<T extends { header?: { revision: string } | null }>(p: Promise<T>): Promise<T> {
    const before = this.highestRevision;
    return p.then((r) => {
      const raw = r.header?.revision;
      if (raw === undefined || raw === '' || raw === '0') return r;
      const rev = BigInt(raw);
      if (rev < before && this.rewound === undefined) this.rewound = { seen: before, found: rev };
      if (rev > this.highestRevision) this.highestRevision = rev;
      return r;
    });
  }

  /** The revision drop seen since the last call, if any (consumed: the caller remembers it). */
  takeRewound(): { seen: bigint; found: bigint } | undefined {
    const r = this.rewound;
    this.rewound = undefined;
    if (r !== undefined) this.highestRevision = r.found;
    return r;
  }

  /** Status of a member (undefined: a client passed in without `maintenance`). */
  status(o: MemberCallOptions): Promise<EtcdStatusResponse> | undefined {
    if (!this.members.every((c) => c.maintenance !== undefined)) return undefined;
    return this.call((c, d) => c.maintenance!.status(d), o);
  }

  readonly leaseClient = {
    leaseGrant: (req: { TTL: number }, o: MemberCallOptions): Promise<{ ID: string; TTL: string; error?: string }> =>
      this.call((c, d) => c.leaseClient.leaseGrant(req, d), o),
    leaseTimeToLive: (req: { ID: string }, o: MemberCallOptions): Promise<{ ID: string; TTL: string; grantedTTL: string }> =>
      this.call((c, d) => c.leaseClient.leaseTimeToLive(req, d), o),
    /** One keepalive of etcd lease `id`, on a stream of its own; TTL '0' (or less): the lease is gone. */
    leaseKeepAliveOnce: (id: string, o: MemberCallOptions): Promise<{ ID: string; TTL: string }> =>
      this.call((c, d, attemptDeadline) => keepAliveOnce(c, id, d, this.clock, attemptDeadline), o),
  };

  /** Every member's client can keep a lease alive (a client passed in may not: client.ts). */
  get canKeepAlive(): boolean {
    return this.members.every((c) => typeof c.leaseClient.leaseKeepAlive === 'function');
  }

  watch(): EtcdWatchBuilderLike {
    return this.watcher.watch();
  }

  close(): void {
    for (const c of this.owned) c.close();
  }

  /** `fn` gets gRPC's options (time.ts converts the deadline) and the attempt's deadline on the pool's clock. */
  private async call<T>(fn: (client: Etcd3Like, options: EtcdCallOptions, attemptDeadline: number) => Promise<T>, o: MemberCallOptions): Promise<T> {
    const n = this.members.length;
    const base = o.attemptMs ?? DEFAULT_ATTEMPT_MS;
    const refused = new Set<number>();
    let lastError: unknown;
    /** Attempts of this call that ran out their time (hung). */
    let hung = 0;
    const gaveUp = (): boolean => o.signal?.aborted === true;
    for (let attempt = 0; ; attempt++) {
      if (gaveUp()) throw abandoned(lastError);
      const now = this.clock.wallNow();
      if (attempt > 0 && now >= o.deadline) throw lastError;
      const index = this.pick(refused, this.clock.monoNow());
      const attemptDeadline = Math.min(o.deadline, now + base * 2 ** Math.min(Math.floor(hung / n), 6));
      try {
        return await untilAbandoned(fn(this.members[index]!, { deadline: grpcDeadline(this.clock, attemptDeadline) }, attemptDeadline), o.signal);
      } catch (err) {
        if (gaveUp()) throw abandoned(err);
        if (!isTransient(err)) throw err;
        lastError = err;
        // Everyone moves off a member that failed, not only this call.
        if (this.preferred === index) this.preferred = (index + 1) % n;
        // A member that answered with an error (refused, unavailable) is not asked again in
        // this call; once every member has, the cluster is down: say so now, the engine
        // retries. Only a member that hung (its attempt ran out) is worth a longer attempt.
        if (!ranOut(err, now, attemptDeadline, this.clock.wallNow())) {
          refused.add(index);
        } else {
          // It hung. The members that answered with an error did so before this attempt's time
          // ran out, and are worth asking again: during an election the others answer "no
          // leader" at once while a frozen leader hangs, and skipping them for the rest of the
          // call left it on the frozen member alone, its budget doubling, until the call's
          // deadline, long after a new leader was elected (test/stores/etcd-members).
          refused.clear();
          hung++;
        }
        this.failedAt[index] = this.clock.monoNow();
        if (refused.size >= n) throw err;
      }
    }
  }

  /**
   * The preferred member, unless this call already had an error from it, or it refused a call or
   * hung in the last couple of seconds (a killed or frozen member: the next call would spend an
   * attempt on it while the others elect a leader) and another has not.
   */
  private pick(refused: ReadonlySet<number>, monoNow: number): number {
    const n = this.members.length;
    let fallback: number | undefined;
    for (let k = 0; k < n; k++) {
      const i = (this.preferred + k) % n;
      if (refused.has(i)) continue;
      if (monoNow - this.failedAt[i]! >= REFUSED_FOR_MS) return i;
      fallback ??= i;
    }
    return fallback ?? this.preferred;
  }
}

/**
 * Whether an attempt that failed ran out its time (a hung member) rather than was answered with
 * an error. Past its deadline by the wall clock, or a deadline error after at least half its
 * budget: gRPC's deadline timer can fire a few ms before the wall clock reaches the deadline
 * (a Node timer starts from the event loop's cached time, which lags on a loaded host), and
 * that early end counted as a refusal made a call with the other members answering "no leader"
 * give up at once, as if the whole cluster were down (test/stores/etcd-members). A deadline error
 * that comes early in the budget is the server's own (a request it timed out), an answer.
 */
function ranOut(err: unknown, startedAt: number, deadline: number, now: number): boolean {
  if (now >= deadline) return true;
  const name = (err as { constructor?: { name?: string } } | null)?.constructor?.name;
  return name === 'GRPCDeadlineExceededError' && now - startedAt >= (deadline - startedAt) / 2;
}

function abandoned(cause: unknown): StoreUnavailableError {
  return new StoreUnavailableError('the etcd call was abandoned by its caller (it gave up waiting); this is retryable', { cause });
}

/** The call's own promise, or a rejection as soon as the caller abandons it. */
function untilAbandoned<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abandoned(signal.reason));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e as Error);
      },
    );
  });
}

/**
 * Sends one keepalive and waits for its answer, until `deadline` (the attempt's, on `clock`).
 * Any failure is an EtcdKeepAliveError (transient: the pool tries another member); a keepalive
 * is idempotent.
 */
async function keepAliveOnce(c: Etcd3Like, id: string, o: EtcdCallOptions, clock: Clock, deadline: number): Promise<{ ID: string; TTL: string }> {
  // The attempt's clock starts before the stream is opened: opening can wait too (a member
  // that accepts the connection and never answers, or etcd3 fetching an auth token).
  return new Promise((resolve, reject) => {
    let done = false;
    let stream: EtcdKeepAliveStream | undefined;
    const finish = (f: () => void): void => {
      if (done) return;
      done = true;
      clock.clearTimeout(timer);
      try {
        stream?.end();
      } catch {
        // the stream is already over
      }
      f();
    };
    const timer = clock.setTimeout(
      () =>
        finish(() => {
          stream?.cancel?.();
          reject(new EtcdKeepAliveError(`no answer to a keepalive of etcd lease ${id} in time`));
        }),
      Math.max(1, deadline - clock.wallNow()),
    );
    c.leaseClient.leaseKeepAlive!(o).then(
      (s) => {
        stream = s;
        if (done) {
          // Given up while it opened.
          s.cancel?.();
          return;
        }
        s.on('data', (res) => finish(() => resolve(res)));
        s.on('error', (err) => finish(() => reject(new EtcdKeepAliveError(`keepalive of etcd lease ${id} failed: ${err.message}`, { cause: err }))));
        s.write({ ID: id });
      },
      (err: unknown) => finish(() => reject(new EtcdKeepAliveError(`could not open a keepalive stream: ${(err as Error).message}`, { cause: err }))),
    );
  });
}
