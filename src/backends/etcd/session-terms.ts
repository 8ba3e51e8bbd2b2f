/**
 * The tables a session's tick reads per renewed term (session.ts), kept cheap because a tick
 * renews every term of the session: up to 10,000 and more at once.
 */
import type { ClaimRequest } from '../store.js';
import type { SessionTerm } from './tick.js';

/**
 * The names a tick renews, as the batches that joined it sent them (their requests at these
 * indexes: not even an array of names is made per batch). Only the sweep asks about
 * a name, and only of a term unrenewed for a whole TTL, so the set is built on the first such
 * question: hashing 10,000 names on every tick, to answer none, was a fifth of its client time.
 */
export class Renewing {
  private parts: [readonly ClaimRequest[], readonly number[]][];
  private set: Set<string> | undefined;

  constructor(requests: readonly ClaimRequest[], indexes: readonly number[]) {
    this.parts = [[requests, indexes]];
  }

  join(requests: readonly ClaimRequest[], indexes: readonly number[]): void {
    if (this.set === undefined) this.parts.push([requests, indexes]);
    else for (const i of indexes) this.set.add(requests[i]!.name);
  }

  has(name: string): boolean {
    if (this.set === undefined) {
      this.set = new Set();
      for (const [requests, indexes] of this.parts) for (const i of indexes) this.set.add(requests[i]!.name);
      this.parts = [];
    }
    return this.set.has(name);
  }
}

/**
 * A session's terms, counting the calls that change them. Every change goes through set,
 * delete or clear, so a term read from it is still its name's entry while `changes` has not
 * moved: a tick's answers then skip looking each renewed name up again (at 10,000 leases those
 * lookups were a tenth of a tick's client time), and look them up as before when it has.
 */
export class TermTable extends Map<string, SessionTerm> {
  changes = 0;

  override set(name: string, term: SessionTerm): this {
    this.changes++;
    return super.set(name, term);
  }

  override delete(name: string): boolean {
    this.changes++;
    return super.delete(name);
  }

  override clear(): void {
    this.changes++;
    super.clear();
  }
}
