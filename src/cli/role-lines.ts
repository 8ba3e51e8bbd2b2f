/**
 * What a `leasehold cron` replica says about its role: whom it follows, and when it takes over
 * (./cron.ts). Kept apart so that its rules are tested without a process.
 */
import type { Term } from '../core/lease.js';
import type { CronMode } from '../scheduler/cron.js';
import { formatMs } from './common.js';
import type { Reporter } from './reporter.js';

/**
 * The following and taking-over lines (see the file's comment). Per-slot, every replica tries
 * the lease once per slot and the winner changes all the time, so "following" is said once per
 * other replica (its holder id: a restarted replica is a new one) and "taking over" once after
 * each such line; leader, each is said once per change of leader.
 */
export class RoleLines {
  private readonly followed = new Set<string>();
  private following: string | undefined;

  constructor(
    private readonly report: Reporter,
    private readonly mode: CronMode,
    private readonly schedule: string,
    /** This replica's holder id now (it changes on a fork or restore). */
    private readonly self: () => string,
  ) {}

  busy(holder: string | null, expiresInMs: number | null): void {
    // Its own earlier slot's term, its release still in flight: not another replica to follow
    // (CI4 printed "following: <its own id>", then "taking over ... after following" itself).
    if (holder !== null && holder === this.self()) return;
    const who = holder ?? 'another replica';
    if (this.followed.has(who)) return;
    this.followed.add(who);
    this.following = who;
    const fields = { holder, expiresInMs };
    if (this.mode === 'per-slot') {
      this.report.event('following', `following: ${who} holds the lease for this slot; this replica tries every slot and runs those it wins (said once per replica)`, fields);
    } else {
      const left = expiresInMs === null ? '' : ` (its lease ends in ${formatMs(expiresInMs)} by the store's clock unless renewed)`;
      this.report.event('following', `following: ${who} leads${left}; this replica takes over if it stops renewing`, fields);
    }
  }

  acquired(t: Term): void {
    const from = this.following;
    this.following = undefined;
    if (this.mode === 'leader') {
      // A new leader may follow the same holder again after it loses: said again then.
      this.followed.clear();
      const how = from === undefined ? 'leader' : `taking over from ${from}: leader`;
      this.report.event('acquired', `${how}: token ${t.token} (holder ${t.holder}); schedule ${this.schedule}`, from === undefined ? {} : { previous: from });
    } else if (from !== undefined) {
      this.report.event('taking-over', `taking over: won the slot's term (token ${t.token}) after following ${from}; this replica runs the slots it wins`, { previous: from });
    }
    // Per-slot, a term is one slot's: its slot-started line says so, once per slot.
  }

  /** Leader mode: the term ended without this replica stopping; it contends again. */
  lost(): void {
    this.followed.clear();
  }
}
