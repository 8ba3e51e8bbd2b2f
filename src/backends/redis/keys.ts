/**
 * Where a store keeps things. Every key carries the hash tag `{prefix}`, so all of one store's
 * keys live in one Cluster slot and a batch claim is one script on one node.
 */
export interface RedisKeys {
  /** Hash per lease: holder, nonce, token, exp, start, renewed, ended (released/revoked/conflict), gc. */
  lease(name: string): string;
  /** Stream per lease: its own history, capped. */
  leaseHistory(name: string): string;
  /** Stream of every lease's history, capped. */
  readonly history: string;
  /** Sorted set of lease names (score: last acquisition, ms), for list(). */
  readonly names: string;
  /** The key layout version written by migrate(). */
  readonly layout: string;
  /** The token floor written by migrate({ minToken }): every token issued is above it. */
  readonly floor: string;
  /** TIME in microseconds when the floor was last raised: the floor moves with the clock from then. */
  readonly floorAt: string;
  /** Pub/sub channel on which releases, revocations and clone conflicts publish the lease name. */
  readonly channel: string;
}

export function keysFor(prefix: string): RedisKeys {
  const tag = `{${prefix}}`;
  return {
    lease: (name) => `${tag}:lease:${name}`,
    leaseHistory: (name) => `${tag}:events:${name}`,
    history: `${tag}:events`,
    names: `${tag}:names`,
    layout: `${tag}:layout`,
    floor: `${tag}:floor`,
    floorAt: `${tag}:floor-at`,
    channel: `${prefix}:freed`,
  };
}
