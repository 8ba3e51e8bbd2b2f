import { StoreRestoredError } from '../../core/errors.js';
import { mapEtcdError } from './client.js';
import type { EtcdKeys } from './keys.js';
import type { MemberPool } from './members.js';
import { rangePrefix } from './txn.js';

/**
 * Tokens are create revisions, and an etcd restored from an old backup rewinds its revisions:
 * new terms would get tokens already issued, and a fence accepts a token equal to its high-water
 * mark, so a reissued token lets a second holder through. Nothing in etcd's answers says "I was
 * restored" (cluster id, member id and raft term come back the same, measured on 3.4), so this
 * guard refuses every grant, with a StoreRestoredError, when either:
 *
 * 1. **The raft log is younger than the revisions.** Every revision is made by one applied raft
 *    entry, and some entries make none (elections, lease grants, compactions, a Txn whose compare
 *    failed), so in a history that was never restored `revision - raftAppliedIndex` starts below
 *    zero and never grows. `etcdctl snapshot restore` (and `etcdutl`, with or without
 *    `--bump-revision`) starts a new raft log under the snapshot's revisions: the gap jumps above
 *    what it was. `migrate --min-token` records the gap it leaves (`{p}/restore/ack`), so a later
 *    restore, even from a snapshot taken after that, is caught again. Read from a member's Status.
 * 2. **This process saw a later revision** (members.ts: KV answers are linearizable, so they
 *    never go back). This catches a restore that brought the raft log back too (a copy of the
 *    data dir, a volume snapshot), but only in a process that was running across it; it leaves
 *    `{p}/restore/rewound` so fresh processes refuse too.
 *
 * Not caught: a file-level copy of the data dir restored while no leasehold process was running
 * (nothing anywhere remembers the later history; the fence refuses every lower token, but one
 * equal to its high-water mark gets through), and a client passed in without `maintenance`
 * loses rule 1. `migrate --min-token N` deletes the mark and records the new gap.
 */

/** How long a clean check covers further grants. A restore restarts etcd, so a failed call also ends it. */
const RECHECK_MS = 10_000;

interface Refusal {
  error: StoreRestoredError;
  /** The revision of the first answer after the drop: an acknowledgement written later clears it. */
  foundRevision: bigint;
}

export class RestoreGuard {
  /** Monotonic time (the pool's clock) of the last clean check: a wall-clock step must not extend or end its cover. */
  private checkedAt = -Infinity;
  private inFlight: Promise<void> | undefined;
  /** A drop this process saw itself: refused until an acknowledgement newer than the drop. */
  private remembered: Refusal | undefined;

  constructor(
    private readonly client: MemberPool,
    private readonly keys: EtcdKeys,
  ) {}

  /** The next grant checks again (after a failed call: etcd may have been restarted from a backup). */
  recheck(): void {
    this.checkedAt = -Infinity;
  }

  /**
   * Before a claim that may grant a term.
   * @throws {StoreRestoredError} etcd was restored and nobody has run `migrate --min-token` since.
   * @throws {StoreUnavailableError} the check could not be made (nothing is granted unchecked).
   */
  async beforeGrant(deadline: number, attemptMs: number): Promise<void> {
    this.noteDrop();
    if (this.remembered === undefined && this.client.clock.monoNow() - this.checkedAt < RECHECK_MS) return;
    this.inFlight ??= this.check(deadline, attemptMs).finally(() => (this.inFlight = undefined));
    await this.inFlight;
  }

  /**
   * After a claim that may have granted: a drop seen in its answers means the grants were made on
   * a rewound etcd. They are not reported as won (nobody uses them; they run out with their TTL).
   * @throws {StoreRestoredError}
   */
  async afterGrant(deadline: number, attemptMs: number): Promise<void> {
    this.noteDrop();
    if (this.remembered === undefined) return;
    await this.leaveMark(this.remembered, { deadline, attemptMs });
    throw this.remembered.error;
  }

  /** What `doctor` shows: the refusal, or undefined when etcd looks unrestored. */
  async status(deadline: number): Promise<StoreRestoredError | undefined> {
    try {
      await this.check(deadline, Math.max(200, deadline - this.client.clock.wallNow()));
      return undefined;
    } catch (err) {
      if (err instanceof StoreRestoredError) return err;
      throw err;
    }
  }

  /** The gap `migrate --min-token` records, read just after its floor Txn (undefined: no Status). */
  async currentGap(deadline: number): Promise<bigint | undefined> {
    const s = await this.client.status({ deadline })?.catch((err: unknown) => {
      throw mapEtcdError(err, 'restore check (member status)');
    });
    return s === undefined ? undefined : gapOf(s);
  }

  /** Forget a drop this process saw: `migrate --min-token` ran here. */
  acknowledged(): void {
    this.noteDrop();
    this.remembered = undefined;
    this.checkedAt = -Infinity;
  }

  private noteDrop(): void {
    const drop = this.client.takeRewound();
    if (drop === undefined) return;
    const seen = this.keys.token(drop.seen);
    this.remembered ??= {
      foundRevision: drop.found,
      error: new StoreRestoredError(
        `etcd under "${this.keys.prefix}/" went back in history: this process saw revision ${drop.seen}, etcd now answers ${drop.found} ` +
          `(restored from a backup, or wiped). Tokens up to at least ${seen} were issued before and would be issued again, so no term is ` +
          `granted until you run \`leasehold migrate --store URL --min-token N\`, N at least ${seen} and at least the highest token any ` +
          'fenced resource has accepted (its high-water mark; `leasehold doctor --fence-high-water N` compares)',
        { seenToken: seen },
      ),
    };
  }

  private async check(deadline: number, attemptMs: number): Promise<void> {
    const opts = { deadline, attemptMs };
    let status, marks;
    try {
      [status, marks] = await Promise.all([this.client.status(opts), this.client.kv.range(rangePrefix(this.keys.restorePrefix).request_range!, opts)]);
    } catch (err) {
      throw mapEtcdError(err, 'restore check');
    }
    this.noteDrop();
    const ack = marks.kvs.find((kv) => kv.key.equals(this.keys.restoreAck));
    const mark = marks.kvs.find((kv) => kv.key.equals(this.keys.restoreRewound));
    if (this.remembered !== undefined && ack !== undefined && BigInt(ack.mod_revision) > this.remembered.foundRevision) this.remembered = undefined;
    if (this.remembered !== undefined) {
      await this.leaveMark(this.remembered, opts);
      throw this.remembered.error;
    }
    if (mark !== undefined) throw markError(this.keys, mark.value.toString());
    if (status !== undefined) {
      const gap = gapOf(status);
      const accepted = ack === undefined ? 0n : BigInt(ack.value.toString());
      if (gap !== undefined && gap > accepted) {
        const rev = status.header?.revision ?? '?';
        const error = new StoreRestoredError(
          `etcd under "${this.keys.prefix}/" was restored from a snapshot: its revision (${rev}) is ${gap} ahead of its raft log ` +
            `(${status.raftAppliedIndex}), which only a restore does. Tokens issued after that snapshot was taken would be issued again, ` +
            'so no term is granted until you run `leasehold migrate --store URL --min-token N`, N at least the highest token any fenced ' +
            'resource has accepted (its high-water mark; `leasehold doctor --fence-high-water N` compares)',
        );
        // The gap shrinks with every raft entry that makes no revision (lease grants, failed
        // compares), and those go on after a restore: the mark keeps the refusal until migrate.
        await this.leaveMark({ error, foundRevision: BigInt(status.header?.revision ?? '0') }, opts);
        throw error;
      }
    }
    this.checkedAt = this.client.clock.monoNow();
  }

  /** Leaves the drop in etcd for fresh processes, unless an acknowledgement came after it. */
  private async leaveMark(r: Refusal, opts: { deadline: number; attemptMs: number }): Promise<void> {
    const value = JSON.stringify({ seen: r.error.seenToken?.toString(), found: r.foundRevision.toString(), atMs: this.client.clock.wallNow() });
    try {
      await this.client.kv.txn(
        {
          compare: [
            { key: this.keys.restoreRewound, target: 'Create', result: 'Equal', create_revision: 0 },
            { key: this.keys.restoreAck, target: 'Mod', result: 'Less', mod_revision: (r.foundRevision + 1n).toString() },
          ],
          success: [{ request_put: { key: this.keys.restoreRewound, value: Buffer.from(value) } }],
          failure: [],
        },
        opts,
      );
    } catch {
      // Best effort: this process refuses either way, and tries again at its next grant.
    }
  }
}

function gapOf(s: { header?: { revision: string } | null; raftAppliedIndex?: string }): bigint | undefined {
  const rev = s.header?.revision;
  const applied = s.raftAppliedIndex;
  if (rev === undefined || applied === undefined || applied === '0') return undefined;
  return BigInt(rev) - BigInt(applied);
}

function markError(keys: EtcdKeys, raw: string): StoreRestoredError {
  let seen: bigint | undefined;
  try {
    const v = JSON.parse(raw) as { seen?: unknown };
    if (typeof v.seen === 'string' && /^\d+$/.test(v.seen)) seen = BigInt(v.seen);
  } catch {
    // an unreadable mark still refuses
  }
  return new StoreRestoredError(
    `etcd under "${keys.prefix}/" went back in history (a leasehold process saw it and left ${keys.prefix}/restore/rewound): ` +
      `tokens${seen === undefined ? '' : ` up to at least ${seen}`} would be issued again, so no term is granted until you run ` +
      `\`leasehold migrate --store URL --min-token N\`, N at least ${seen ?? 'that'} and at least the highest token any fenced resource has accepted`,
    { seenToken: seen },
  );
}

