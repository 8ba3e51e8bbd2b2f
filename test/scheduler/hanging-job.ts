/**
 * The cron job of the tests that kill a replica mid-job (per-slot, per-slot-session): every run
 * logs `start SLOT TOKEN <extra>` and `end SLOT TOKEN`; the one run that takes the trigger
 * (armed by `arm()`, taken atomically by rename) first writes `PID SLOT`, by rename too so the
 * test never reads a half-written file, and hangs until killed.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { Sandbox } from '../cli/helpers.js';

export class HangingJob {
  /** The script to give `leasehold cron ... -- JOB`. */
  readonly job: string;
  private readonly log: string;
  private readonly trigger: string;
  private readonly pidFile: string;

  /** `extra`: more shell words on each start line (`$LEASEHOLD_HOLDER`, `$(date +%s%3N)`). */
  constructor(sb: Sandbox, tag: string, extra: string) {
    this.log = sb.path(`${tag}.log`);
    this.trigger = sb.path(`${tag}-trigger`);
    this.pidFile = sb.path(`${tag}-job.pid`);
    this.job = sb.script(
      `${tag}-job.sh`,
      [
        `echo "start $LEASEHOLD_SLOT $LEASEHOLD_TOKEN ${extra}" >> ${this.log}`,
        `if mv ${this.trigger} ${this.trigger}.taken 2>/dev/null; then echo "$$ $LEASEHOLD_SLOT" > ${this.pidFile}.tmp; mv ${this.pidFile}.tmp ${this.pidFile}; sleep 60; fi`,
        `echo "end $LEASEHOLD_SLOT $LEASEHOLD_TOKEN" >> ${this.log}`,
      ].join('\n'),
    );
  }

  /** Every line the runs wrote, split into words. */
  lines(): string[][] {
    const text = this.text();
    return text === '' ? [] : text.trim().split('\n').map((l) => l.split(' '));
  }

  /** The log as written (for a failure's message). */
  text(): string {
    return existsSync(this.log) ? readFileSync(this.log, 'utf8') : '';
  }

  /** The next run to start takes the trigger and hangs; the last hung run is forgotten. */
  arm(): void {
    rmSync(this.pidFile, { force: true });
    writeFileSync(this.trigger, '');
  }

  /** The hung run's process (a group leader: kill -PID) and slot, once it wrote them. */
  hung(): { pid: number; slot: string } | undefined {
    if (!existsSync(this.pidFile)) return undefined;
    const [pid, slot] = readFileSync(this.pidFile, 'utf8').trim().split(' ');
    return { pid: Number(pid), slot: slot! };
  }

  /**
   * A replica dying mid-job, as a crash does: the replica (`runnerPid`) first, then the hung run's
   * process group (its reaper would kill it too). Not the other way round: a replica that outlives
   * its job by a moment sees the job killed and records the slot 'failed' (exit 137), a final
   * outcome nobody reruns, before its own SIGKILL lands (ci4 of stop 50, MySQL: the killed
   * replica's last line was "command killed by SIGKILL" and its slot was never rerun).
   */
  killReplicaMidJob(runnerPid: number): void {
    process.kill(runnerPid, 'SIGKILL');
    this.killHung();
  }

  /** Kills the hung run's process group, if there is one still (finally blocks). */
  killHung(): void {
    const h = this.hung();
    if (h === undefined) return;
    try {
      process.kill(-h.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}
