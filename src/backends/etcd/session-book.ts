/**
 * The sessions of one store instance (./session.ts explains what a session is): found by holder
 * and TTL, opened once for every concurrent caller, dropped when unused for well past their TTL.
 */
import type { EtcdKeys } from './keys.js';
import { Session, sessionKeyOf, type SessionTerm } from './session.js';
import type { Clock } from './time.js';

/** Every session of one store instance, by holder and TTL. */
export class SessionBook {
  private readonly byKey = new Map<string, Session>();
  private readonly opening = new Map<string, Promise<Session>>();

  constructor(private readonly clock: Clock) {}

  get(holder: string, ttlSec: number): Session | undefined {
    return this.byKey.get(sessionKeyOf(holder, ttlSec));
  }
  drop(s: Session): void {
    if (s.state.over === undefined) s.state = { ...s.state, over: { kind: 'gone' } };
    const key = sessionKeyOf(s.holder, s.askedSec);
    if (this.byKey.get(key) === s) this.byKey.delete(key);
  }
  /**
   * Forgets sessions unused for much longer than their TTL (a holder id replaced, a TTL no
   * longer used): their leases have run out. Monotonic time: a wall-clock step must not drop a
   * live session (its terms would then be read as a clone's at their next renewal).
   */
  prune(): void {
    const now = this.clock.monoNow();
    for (const s of this.byKey.values()) {
      if (s.moving.size === 0 && s.state.usedAt + s.ttlSec * 1000 + 60_000 < now) this.drop(s);
    }
  }
  /** The live session of (holder, TTL), opening one (once, for every concurrent caller) if there is none. */
  ensure(holder: string, ttlSec: number, open: () => Promise<Session>): Promise<Session> {
    this.prune();
    const key = sessionKeyOf(holder, ttlSec);
    const live = this.byKey.get(key);
    if (live !== undefined && live.over === undefined) return Promise.resolve(live);
    let opening = this.opening.get(key);
    if (opening === undefined) {
      opening = open().then(
        (s) => {
          this.opening.delete(key);
          this.byKey.set(key, s);
          return s;
        },
        (err: unknown) => {
          this.opening.delete(key);
          throw err;
        },
      );
      this.opening.set(key, opening);
    }
    return opening;
  }
  /** This store ended the term itself (release, revoke): no session renews it any more. */
  forget(name: string): void {
    for (const s of this.byKey.values()) s.terms.delete(name);
  }
  /** The term `name` as a session of `holder` holds it, if one does. */
  find(holder: string, name: string): SessionTerm | undefined {
    for (const s of this.byKey.values()) {
      const t = s.holder === holder ? s.terms.get(name) : undefined;
      if (t !== undefined) return t;
    }
    return undefined;
  }
  /**
   * Copies every session into `into`, as restoring one process snapshot in two places copies
   * them: the way tests make a clone whose store is a copy of ours.
   */
  copyInto(into: SessionBook, keys: EtcdKeys): void {
    for (const [key, s] of this.byKey) {
      const c = new Session(s.holder, s.askedSec, s.ttlSec, s.leaseId, keys, Buffer.from(s.state.value), s.state.expiresAtMs, into.clock.monoNow());
      c.state = { ...c.state, pending: s.state.pending.map((p) => Buffer.from(p)), markers: new Map(s.state.markers) };
      for (const [name, t] of s.terms) c.terms.set(name, { ...t });
      into.byKey.set(key, c);
    }
  }
  clear(): void {
    this.byKey.clear();
  }
  get size(): number {
    return this.byKey.size;
  }
}
