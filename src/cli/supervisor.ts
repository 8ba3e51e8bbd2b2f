/**
 * `leasehold run`: contend for a lease; while leader, run a command; kill it if the lease is
 * lost. The runner's process and signal
 * handling (this file); the flags are in ./run-args.ts, the output in ./reporter.ts.
 *
 * Hazards this file exists to handle:
 * - The command must be dead before the store hands the lease to someone else. The lease's
 *   safety margin is the kill grace plus the library's default margin, so the local deadline
 *   fires early enough for SIGTERM, `--grace`, then SIGKILL to finish before the store-side
 *   expiry. When less than the grace is left (the runner itself was paused, or another holder
 *   already has the lease), it is SIGKILL at once. An operator's revocation is the exception:
 *   the store freed the lease on purpose, the fence rejects the old token from then on, and
 *   the operator asked for a stop, so the command gets SIGTERM and its grace.
 * - The command runs in its own session and process group (`detached`), so one kill reaches
 *   everything it started, and a Ctrl-C at the terminal reaches only the runner, which
 *   forwards it and keeps renewing until the command has drained. The lease is released only
 *   after that.
 * - If the runner is SIGKILLed (or crashes), nothing here runs. A reaper does the group kill
 *   instead: a tiny `/bin/sh`, the runner's own child in a session of its own, blocked reading
 *   a socket whose other end only the runner holds. When the runner dies, for any reason, the
 *   kernel closes that end, the read returns, and the reaper SIGKILLs COMMAND's process group
 *   (measured: about 2ms from the runner's SIGKILL to the last process of the group dead).
 *   COMMAND's shell waits for a "go" from the runner sent only once the reaper is running, so
 *   no process of the group ever exists unwatched; a runner that dies before that leaves a
 *   shell that exits without running anything. A runner that finishes normally kills the
 *   group itself, then its reaper, and waits for it (no zombie). With util-linux `setpriv`,
 *   COMMAND also gets a parent-death SIGKILL from the kernel: a second layer, for when the
 *   reaper was killed on its own (the runner reports that on stderr).
 * - What escapes: a descendant that leaves the process group (`setsid`, `setpgid`, a shell
 *   with job control, a daemon that double-forks into its own session), and, if the reaper
 *   and then the runner are both SIGKILLed, everything but COMMAND's own process. Only the
 *   fence stops those. A cgroup would catch them, but needs a delegated cgroup (systemd
 *   `Delegate=`, a container) that a plain `leasehold run` cannot assume.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { accessSync, constants as fsConstants, statSync, type Stats } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { delimiter, join } from 'node:path';
import { type Timing } from '../core/config.js';
import { LeaseLostError, errorMessage } from '../core/errors.js';
import type { Term } from '../core/lease.js';
import { redactUrl } from '../backends/url.js';
import { CliError, EXIT, findSetpriv, formatMs } from './common.js';
import { Reporter } from './reporter.js';

/** The signals the runner forwards to COMMAND (and `leasehold cron` to its job). */
export const FORWARDED = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

/**
 * Finds COMMAND the way execvp will (a name with a slash is a path, else each PATH entry), so
 * that a typo fails here, before a lease is taken and a token spent, with the shell's codes:
 * 127 not found, 126 found but not executable. The command may still vanish before it is
 * started; then its status is whatever the exec reported.
 */
export function checkCommand(file: string, env: NodeJS.ProcessEnv = process.env): void {
  const noLease = 'nothing was started and no lease was taken';
  const stat = (p: string): Stats | undefined => {
    try {
      return statSync(p);
    } catch {
      return undefined;
    }
  };
  const executable = (p: string): boolean => {
    try {
      accessSync(p, fsConstants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  const shown = JSON.stringify(file);
  if (file.includes('/')) {
    const st = stat(file);
    if (st === undefined) throw new CliError(127, `cannot run ${shown}: no such file; check the path (${noLease})`);
    if (st.isDirectory()) throw new CliError(126, `cannot run ${shown}: it is a directory; name a program (${noLease})`);
    if (!executable(file)) throw new CliError(126, `cannot run ${shown}: not executable; chmod +x it, or name its interpreter: sh ${file} (${noLease})`);
    return;
  }
  // An empty PATH entry is the current directory; with no PATH at all, execvp's default.
  const dirs = (env['PATH'] ?? '/usr/bin:/bin').split(delimiter).map((d) => (d === '' ? '.' : d));
  let notExecutable: string | undefined;
  for (const d of dirs) {
    const p = join(d, file);
    const st = stat(p);
    if (st === undefined || st.isDirectory()) continue;
    if (executable(p)) return;
    notExecutable ??= p;
  }
  if (notExecutable !== undefined) {
    throw new CliError(126, `cannot run ${shown}: ${notExecutable} is not executable; chmod +x it, or give the path of the one to run (${noLease})`);
  }
  throw new CliError(127, `cannot run ${shown}: not found in PATH; check the name, or give its path (${noLease})`);
}

/** The store URL as the child sees it: which store, without the password the runner used. */
export function childStoreUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return redactUrl(url);
  }
  let masked = false;
  if (u.password !== '') {
    u.password = '***';
    masked = true;
  }
  for (const key of [...u.searchParams.keys()]) {
    if (/pass|secret|token/i.test(key)) {
      u.searchParams.set(key, '***');
      masked = true;
    }
  }
  // Unchanged URLs are passed on as given, not as the URL parser would re-spell them.
  return masked ? u.toString() : url;
}

export function signalNumber(sig: NodeJS.Signals): number {
  return (osConstants.signals as Record<string, number | undefined>)[sig] ?? 0;
}

/**
 * COMMAND's own shell, in the new session and process group the runner spawned it into. $1 is
 * setpriv's path or empty; the rest is COMMAND. It waits on fd 3 (a socket to the runner) for
 * "go", sent once the reaper is watching the group; if the runner dies first, the read ends
 * without it and nothing runs.
 */
const LAUNCHER = [
  'IFS= read -r go <&3 && [ "$go" = go ] || exit 125',
  'exec 3<&-',
  's=$1; shift',
  'if [ -n "$s" ]; then exec "$s" --pdeathsig SIGKILL -- "$@"; fi',
  'exec "$@"',
].join('\n');

/**
 * The reaper: the runner's own child, in a session of its own (so a Ctrl-C, `timeout` or a
 * kill of the runner's process group does not reach it), holding no stdio of the runner's. Its
 * stdin is a socket whose other end only the runner holds, close-on-exec, so COMMAND never has
 * it. Nothing is ever written to it: the read ends only when the runner has died, for any
 * reason, and the kernel closed that end. Then it SIGKILLs COMMAND's process group ($1).
 */
const REAPER = `trap '' INT TERM HUP QUIT PIPE; while read -r _; do :; done; kill -KILL -"$1"`;

export interface ChildResult {
  /** The exit status to report: the child's code, 128 + signal number, or 127/126 if it never ran. */
  status: number;
  /** Set when the lease was lost while the child ran. */
  lost: LeaseLostError | undefined;
}

/** Runs one command for one term and kills its process group if the term ends. */
export class Supervisor {
  private child: ChildProcess | undefined;
  private pgid: number | undefined;
  private exited = false;
  private lost: LeaseLostError | undefined;
  private killTimer: NodeJS.Timeout | undefined;
  /** Monotonic estimate of the store-side expiry (answer time + store-reported time left). */
  private storeExpiryAt: number;

  constructor(
    private readonly name: string,
    private readonly term: Term,
    private readonly timing: Timing,
    private readonly graceMs: number,
    private readonly report: Reporter,
  ) {
    this.storeExpiryAt = performance.now() + timing.ttlMs;
  }

  /** For the lease's 'renewed' event: the store's answer says how long is left. */
  noteRenewed = (t: Term, expiresInMs: number): void => {
    if (t.token === this.term.token) this.storeExpiryAt = performance.now() + expiresInMs;
  };

  async run(command: string[], env: NodeJS.ProcessEnv): Promise<ChildResult> {
    const term = this.term;
    if (term.signal.aborted) {
      // Lost between acquire and spawn: nothing ran, nothing to kill.
      const reason: unknown = term.signal.reason;
      this.lost = reason instanceof LeaseLostError ? reason : new LeaseLostError(this.name, term.token, 'expired', 'the term ended before the command started');
      return { status: EXIT.LOST, lost: this.lost };
    }
    const setpriv = findSetpriv(env) ?? '';
    const onLost = (): void => this.onTermEnded();
    term.signal.addEventListener('abort', onLost, { once: true });
    let gate: Socket | null | undefined;
    let reaper: ChildProcess | undefined;
    try {
      // `leasehold-run` is $0: what the shell calls itself in its messages.
      const child = spawn('/bin/sh', ['-c', LAUNCHER, 'leasehold-run', setpriv, ...command], {
        detached: true,
        stdio: ['inherit', 'inherit', 'inherit', 'pipe'],
        env,
      });
      this.child = child;
      this.pgid = child.pid;
      gate = child.stdio[3] as Socket | null | undefined;
      // An error on a socket must not crash the runner; the child's exit tells what happened.
      gate?.on('error', () => {});
      if (this.pgid !== undefined) reaper = this.startReaper(this.pgid);
      // Only now may COMMAND start anything: the reaper covers every process it will create.
      gate?.end('go\n');
      const outcome = await new Promise<{ code: number | null; signal: NodeJS.Signals | null } | { error: Error }>((resolve) => {
        child.once('exit', (code, signal) => resolve({ code, signal }));
        child.once('error', (error) => resolve({ error }));
      });
      this.exited = true;
      if (this.killTimer !== undefined) clearTimeout(this.killTimer);
      // Whatever the command left behind in its group must not outlive the lease.
      this.killGroup('SIGKILL', true);
      let status: number;
      if ('error' in outcome) {
        const code = (outcome.error as NodeJS.ErrnoException).code;
        status = code === 'EACCES' ? 126 : 127;
        const msg = `cannot start ${JSON.stringify(command[0])}: ${errorMessage(outcome.error)}; check the command and PATH`;
        this.report.problem('error', msg, { exit: status }, `leasehold: ${msg}`);
      } else if (outcome.signal !== null) {
        status = 128 + signalNumber(outcome.signal);
        this.report.event('command-killed', `command killed by ${outcome.signal} (exit status ${status})`, { signal: outcome.signal, status });
      } else {
        status = outcome.code ?? 1;
        this.report.event('command-exited', `command exited with code ${status}`, { code: status, status });
      }
      return { status, lost: this.lost };
    } finally {
      term.signal.removeEventListener('abort', onLost);
      gate?.destroy();
      if (reaper !== undefined) await this.stopReaper(reaper);
    }
  }

  /** Never throws: without a reaper the command still runs, and the fence still holds. */
  private startReaper(pgid: number): ChildProcess | undefined {
    let reaper: ChildProcess;
    try {
      reaper = spawn('/bin/sh', ['-c', REAPER, 'leasehold-reaper', String(pgid)], { detached: true, stdio: ['pipe', 'ignore', 'ignore'] });
    } catch (e) {
      this.reaperGone(`could not start: ${errorMessage(e)}`);
      return undefined;
    }
    reaper.stdin?.on('error', () => {});
    reaper.once('error', (e) => this.reaperGone(`could not start: ${errorMessage(e)}`));
    reaper.once('exit', (code, signal) => {
      if (!this.exited) this.reaperGone(`exited (${signal ?? `code ${code}`})`);
    });
    return reaper;
  }

  private reaperGone(what: string): void {
    this.report.problem('reaper-gone', `the reaper ${what}; if this runner is killed now, what COMMAND started may outlive it (the fence still holds)`, {
      pgid: this.pgid,
    });
  }

  /** The group is dead already; the reaper goes too, and is waited for so it leaves no zombie. */
  private async stopReaper(reaper: ChildProcess): Promise<void> {
    if (reaper.exitCode !== null || reaper.signalCode !== null || reaper.pid === undefined) return;
    const gone = new Promise<void>((resolve) => reaper.once('exit', () => resolve()));
    reaper.kill('SIGKILL');
    await gone;
    reaper.stdin?.destroy();
  }

  /** SIGTERM/SIGINT/SIGHUP to the runner: pass it on; the caller waits for the child to exit. */
  forward(sig: NodeJS.Signals): void {
    if (this.exited || this.pgid === undefined) return;
    this.report.event('signal-forwarded', `${sig}: forwarding to process group ${this.pgid}; the lease is released once the command exits`, {
      signal: sig,
      pgid: this.pgid,
    });
    this.killGroup(sig);
  }

  private onTermEnded(): void {
    const reason: unknown = this.term.signal.reason;
    if (this.exited || !(reason instanceof LeaseLostError)) return;
    if (reason.reason === 'released') return;
    this.lost = reason;
    const remaining = this.storeExpiryAt - performance.now();
    // On an on-time local deadline `remaining` is about grace + the default margin. Half of that
    // default margin is slack for the answer's travel time, which the estimate leaves out.
    const slack = (this.timing.marginMs - this.graceMs) / 2;
    // An operator's revocation: the store freed the lease on purpose and the fence refuses this
    // token from now on, so the time left on the old term does not matter: the command gets
    // the clean shutdown the operator asked for.
    const noTimeLeft =
      reason.reason !== 'revoked' &&
      (reason.reason === 'suspended' || // this process was frozen or restored: no idea how long
        reason.reason === 'superseded' || // someone does hold it now
        reason.reason === 'stalled' || // the lease was released for another replica; the command is wedged anyway
        remaining < this.graceMs + slack); // the runner was paused past its deadline
    const pgid = this.pgid ?? '?';
    if (noTimeLeft || this.graceMs === 0) {
      this.report.event('lost', `lost the lease (${reason.reason}); killing process group ${pgid} now (SIGKILL)`, {
        reason: reason.reason,
        signal: 'SIGKILL',
        pgid: this.pgid,
      });
      this.killGroup('SIGKILL');
      return;
    }
    this.report.event('lost', `lost the lease (${reason.reason}); SIGTERM to process group ${pgid}, SIGKILL in ${formatMs(this.graceMs)}`, {
      reason: reason.reason,
      signal: 'SIGTERM',
      pgid: this.pgid,
      graceMs: this.graceMs,
    });
    this.killGroup('SIGTERM');
    this.killTimer = setTimeout(() => {
      this.killTimer = undefined;
      if (this.exited) return;
      this.report.event('grace-over', `grace of ${formatMs(this.graceMs)} is over; SIGKILL to process group ${pgid}`, { signal: 'SIGKILL', pgid: this.pgid });
      this.killGroup('SIGKILL');
    }, this.graceMs);
  }

  /** Never throws: a timer callback calls it. */
  private killGroup(sig: NodeJS.Signals, quietIfGone = false): void {
    if (this.pgid === undefined) return;
    try {
      process.kill(-this.pgid, sig);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ESRCH' && !quietIfGone) {
        this.report.problem('kill-failed', `could not send ${sig} to process group ${this.pgid}: ${errorMessage(e)}`, { signal: sig, pgid: this.pgid });
      }
    }
  }
}
