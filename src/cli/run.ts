/**
 * `leasehold run`: contend for a lease; while leader, run a command; kill it if the lease is
 * lost. All of the runner's process and signal handling lives in this file.
 *
 * Hazards this file exists to handle:
 * - The command must be dead before the store hands the lease to someone else. The lease's
 *   safety margin is the kill grace plus the library's default margin, so the local deadline
 *   fires early enough for SIGTERM, `--grace`, then SIGKILL to finish before the store-side
 *   expiry. When less than the grace is left (the runner itself was paused, or the store has
 *   already given the lease away), it is SIGKILL at once.
 * - The command runs in its own process group (`detached`), so one kill reaches everything it
 *   started, and a Ctrl-C at the terminal reaches only the runner, which forwards it and keeps
 *   renewing until the command has drained. The lease is released only after that.
 * - If the runner is SIGKILLed, nothing here runs. `setpriv --pdeathsig SIGKILL` makes the
 *   kernel kill the command when the runner dies. It covers the command's own process only:
 *   grandchildren are not covered by pdeathsig (on a normal loss the process-group kill covers
 *   them). Without setpriv, a SIGKILLed runner leaves its command running; `leasehold doctor`
 *   warns about it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { parseArgs } from 'node:util';
import { DEFAULT_TTL_MS, resolveTiming, validateLeaseName, type Timing } from '../core/config.js';
import { AbortedError, LeaseLostError, NotAcquiredError, errorMessage } from '../core/errors.js';
import { Leasehold } from '../core/leasehold.js';
import type { Lease, Term } from '../core/lease.js';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LoggerLike } from '../core/logger.js';
import {
  EXIT,
  STORE_OPTIONS,
  durationOption,
  err,
  errorLine,
  exitCodeFor,
  findSetpriv,
  flagOrEnv,
  formatMs,
  openStoreFromFlags,
  out,
  requireCurrentSchema,
  usageError,
} from './common.js';

export const RUN_USAGE = `Usage: leasehold run --name NAME [--store URL] [--ttl D] [--renew D] [--wait D | --no-wait]
                     [--grace D] [--marker PATH] [--progress-timeout D] [--quiet] -- COMMAND [ARGS...]

Contends for lease NAME. While leader, runs COMMAND in its own process group with these in its
environment: LEASEHOLD_NAME, LEASEHOLD_TOKEN (the fencing token, decimal), LEASEHOLD_HOLDER,
LEASEHOLD_STORE and LEASEHOLD_IDEMPOTENCY_KEY (leasehold:NAME:TOKEN). Pass the token with every
write to a fenced resource; use the idempotency key for side effects a fence cannot cover.

  --name NAME    the lease (env LEASEHOLD_NAME)
  --store URL    env LEASEHOLD_STORE; default: the embedded SQLite file
  --ttl D        how long each renewal is granted for (env LEASEHOLD_TTL; default 30s)
  --renew D      how often to renew (env LEASEHOLD_RENEW; default ttl/3, at most ttl/2)
  --wait D       give up (exit 75) if not leader within D (env LEASEHOLD_WAIT; default: forever)
  --no-wait      one attempt: exit 75 at once if another process holds the lease
  --grace D      after SIGTERM, how long COMMAND gets before SIGKILL when the lease is lost
                 (env LEASEHOLD_GRACE; default 5s, ttl/6 for ttls under 30s; must be < ttl - renew)
  --marker PATH  a file written (name, holder, token) while leader and deleted on standing down;
                 any marker already there is deleted, unread, before contending: it was
                 inherited from a fork, a snapshot or a crash (env LEASEHOLD_MARKER)
  --progress-timeout D
                 COMMAND must touch the file named in LEASEHOLD_PROGRESS_FILE at least every D;
                 if it does not, the lease is released so another replica can lead, and the
                 command is killed (env LEASEHOLD_PROGRESS_TIMEOUT)
  --quiet        no progress lines on stderr (errors still print; "not leader" does not)

When the lease is lost (expired, revoked, superseded, this process suspended), the process
group gets SIGTERM and, after --grace, SIGKILL, so it is dead before the store-side expiry. If
less than the grace is left (the runner was paused, an operator revoked the lease, another
holder already has it), it gets SIGKILL at once. SIGTERM, SIGINT and SIGHUP to the runner are
forwarded to the group; the runner keeps the lease until COMMAND exits, then releases it.
Anything COMMAND left running in its process group is killed before the lease is released.
With util-linux setpriv installed, COMMAND also dies if the runner is SIGKILLed (its own
children are not covered by that; they are by the group kill on a normal loss).

Exit: COMMAND's status (128+N if killed by signal N); 2 usage; 3 store unreachable or schema
missing; 75 never became leader; 76 lost the lease while COMMAND was running.`;

const RUN_OPTIONS = {
  ...STORE_OPTIONS,
  name: { type: 'string' },
  ttl: { type: 'string' },
  renew: { type: 'string' },
  wait: { type: 'string' },
  'no-wait': { type: 'boolean' },
  grace: { type: 'string' },
  marker: { type: 'string' },
  'progress-timeout': { type: 'string' },
  quiet: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

const FORWARDED = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

export interface RunSettings {
  name: string;
  command: string[];
  timing: Timing;
  graceMs: number;
  wait: boolean | number;
  quiet: boolean;
  store: string | undefined;
  schema: string | undefined;
  marker: string | undefined;
  progressTimeoutMs: number | undefined;
}

/** Parses and validates everything before any store is touched: every mistake here is exit 2. */
export function parseRunArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): RunSettings | 'help' {
  const sep = argv.indexOf('--');
  const flagArgs = sep === -1 ? argv : argv.slice(0, sep);
  const command = sep === -1 ? [] : argv.slice(sep + 1);
  let parsed;
  try {
    parsed = parseArgs({ args: flagArgs, options: RUN_OPTIONS, strict: true, allowPositionals: true });
  } catch (e) {
    // `leasehold run --name x sh -c 'exit 7'`: the command's own flags look unknown to us.
    if (sep === -1 && missingSeparator(argv) !== undefined) throw missingSeparatorError(argv);
    throw e;
  }
  const { values, positionals } = parsed;
  if (values.help === true) return 'help';
  if (sep === -1 && positionals.length > 0) throw missingSeparatorError(argv);
  if (positionals.length > 0) {
    throw usageError(`unexpected argument ${JSON.stringify(positionals[0])} before \`--\`; options go before \`--\`, the command after it`);
  }
  if (command.length === 0) {
    throw usageError('run needs a command after `--`; write leasehold run --name NAME -- COMMAND [ARGS...]');
  }
  if (command[0] === '') throw usageError('the command after `--` is empty; name a program to run');

  const nameOpt = flagOrEnv(values.name, 'LEASEHOLD_NAME', env);
  if (nameOpt === undefined) throw usageError('run needs --name NAME (or LEASEHOLD_NAME): the lease that makes COMMAND a singleton');
  const name = validateLeaseName(nameOpt.value);

  const ttlMs = durationOption(values.ttl, 'ttl', 'LEASEHOLD_TTL', env) ?? DEFAULT_TTL_MS;
  const renewMs = durationOption(values.renew, 'renew', 'LEASEHOLD_RENEW', env);
  // Without the grace: checks ttl and renew on their own, with the library's messages.
  const base = resolveTiming({ ttl: ttlMs, ...(renewMs === undefined ? {} : { renewInterval: renewMs }) });
  const graceOpt = durationOption(values.grace, 'grace', 'LEASEHOLD_GRACE', env);
  // 5s at the default 30s ttl; scaled down for short ttls so `--ttl 3s` works without --grace.
  const graceMs = graceOpt ?? Math.min(5000, Math.floor(base.ttlMs / 6));
  if (graceMs >= base.ttlMs - base.renewMs) {
    throw usageError(
      `--grace ${graceMs}ms must be shorter than ttl - renew (${base.ttlMs - base.renewMs}ms): the command must be dead ` +
        'before the store-side expiry; lower --grace or raise --ttl',
    );
  }
  // The child is SIGKILLed `grace` after the local deadline; the default margin stays as slack.
  const timing = resolveTiming({ ttl: base.ttlMs, renewInterval: base.renewMs, safetyMargin: base.marginMs + graceMs });

  if (values['no-wait'] === true && values.wait !== undefined) throw usageError('--wait and --no-wait contradict each other; pick one');
  let wait: boolean | number = true;
  if (values['no-wait'] === true) wait = false;
  else {
    const w = flagOrEnv(values.wait, 'LEASEHOLD_WAIT', env);
    if (w !== undefined && w.from !== 'flag' && /^(forever|true|yes)$/i.test(w.value)) wait = true;
    else if (w !== undefined && w.from !== 'flag' && /^(no|false)$/i.test(w.value)) wait = false;
    else if (w !== undefined) wait = durationOption(values.wait, 'wait', 'LEASEHOLD_WAIT', env) ?? true;
  }
  return {
    name,
    command,
    timing,
    graceMs,
    wait,
    quiet: values.quiet === true,
    store: values.store,
    schema: flagOrEnv(values.schema, 'LEASEHOLD_SCHEMA', env)?.value,
    marker: flagOrEnv(values.marker, 'LEASEHOLD_MARKER', env)?.value,
    progressTimeoutMs: progressTimeout(values['progress-timeout'], env),
  };
}

function progressTimeout(flag: string | undefined, env: NodeJS.ProcessEnv): number | undefined {
  const ms = durationOption(flag, 'progress-timeout', 'LEASEHOLD_PROGRESS_TIMEOUT', env);
  if (ms !== undefined && ms < 100) throw usageError(`--progress-timeout ${ms}ms is too short to be met; use at least 100ms`);
  return ms;
}

/** The command the user meant, when they forgot `--`: everything from the first positional on. */
function missingSeparator(argv: string[]): string[] | undefined {
  const loose = parseArgs({ args: argv, options: RUN_OPTIONS, strict: false, allowPositionals: true, tokens: true });
  const first = loose.tokens.find((t) => t.kind === 'positional');
  return first === undefined ? undefined : argv.slice(first.index);
}

function missingSeparatorError(argv: string[]): Error {
  const rest = missingSeparator(argv) ?? [];
  const shown = rest.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
  return usageError(
    `missing \`--\` before the command; write leasehold run --name NAME [options] -- ${shown.length > 60 ? `${shown.slice(0, 57)}...` : shown}`,
  );
}

function signalNumber(sig: NodeJS.Signals): number {
  return (osConstants.signals as Record<string, number | undefined>)[sig] ?? 0;
}

/** A logger for the library: warnings and errors on stderr, prefixed with the lease name. */
function stderrLogger(say: (line: string) => void): LoggerLike {
  const write = (obj: object, msg?: string): void => {
    const fields = Object.entries(obj as Record<string, unknown>)
      .filter(([k, v]) => k !== 'lease' && v !== undefined)
      .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
    say(`${(msg ?? '').replace(/^leasehold: /, '')}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}`);
  };
  const noop = (): void => {};
  return { debug: noop, info: noop, warn: write, error: write };
}

export async function runCommand(argv: string[]): Promise<number> {
  const settings = parseRunArgs(argv);
  if (settings === 'help') {
    out(RUN_USAGE);
    return EXIT.OK;
  }
  const { name, command, timing, graceMs, wait, quiet } = settings;
  const say = quiet ? (): void => {} : (line: string): void => err(`leasehold[${name}]: ${line}`);

  // Signals arriving before the command runs stop the contention; after, they are forwarded.
  const contention = new AbortController();
  let stopSignal: NodeJS.Signals | undefined;
  let onSignalWhileRunning: ((sig: NodeJS.Signals) => void) | undefined;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (onSignalWhileRunning !== undefined) {
      onSignalWhileRunning(sig);
      return;
    }
    stopSignal ??= sig;
    contention.abort();
  };
  for (const s of FORWARDED) process.on(s, onSignal);
  try {
    const { store, url } = await openStoreFromFlags({ store: settings.store, schema: settings.schema });
    const lh = new Leasehold({ store, closeStore: true, logger: stderrLogger(say) });
    try {
      // Fail fast (exit 3) on an unreachable store or a missing schema instead of retrying for ever.
      await requireCurrentSchema(store);
      const lease = lh.lease(name, {
        ttl: timing.ttlMs,
        renewInterval: timing.renewMs,
        safetyMargin: timing.marginMs,
        ...(settings.marker === undefined ? {} : { marker: settings.marker }),
        ...(settings.progressTimeoutMs === undefined ? {} : { progressTimeout: settings.progressTimeoutMs }),
      });
      let lastBusy: string | null | undefined;
      lease.on('busy', (holder, expiresInMs) => {
        if (holder === lastBusy) return;
        lastBusy = holder;
        say(`waiting: held by ${holder ?? 'another process'}${expiresInMs === null ? '' : `, expires in ${formatMs(expiresInMs)} by the store's clock`}`);
      });
      lease.on('acquired', (t) => say(`acquired token ${t.token} (holder ${t.holder})`));
      lease.on('recovered', (t) => say(`renewal landed; out of jeopardy (token ${t.token})`));
      lease.on('released', (t, handedOver) => say(`released token ${t.token}${handedOver ? '' : ' (the store no longer had it; it will expire)'}`));

      let term: Term;
      try {
        term = await lease.acquire({ wait, signal: contention.signal });
      } catch (e) {
        if (e instanceof AbortedError && stopSignal !== undefined) {
          say(`${stopSignal} while waiting; not running the command`);
          return 128 + signalNumber(stopSignal);
        }
        if (e instanceof NotAcquiredError && exitCodeFor(e) === EXIT.NOT_LEADER) {
          if (!quiet) err(errorLine(e));
          return EXIT.NOT_LEADER;
        }
        throw e;
      }
      if (stopSignal !== undefined) {
        await lease.release();
        return 128 + signalNumber(stopSignal);
      }
      const supervisor = new Supervisor(name, term, timing, graceMs, say);
      onSignalWhileRunning = (sig) => supervisor.forward(sig);
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        LEASEHOLD_NAME: name,
        LEASEHOLD_TOKEN: term.token.toString(),
        LEASEHOLD_HOLDER: term.holder,
        LEASEHOLD_STORE: url,
        LEASEHOLD_IDEMPOTENCY_KEY: `leasehold:${name}:${term.token}`,
      };
      if (settings.schema !== undefined) env['LEASEHOLD_SCHEMA'] = settings.schema;
      const progress = settings.progressTimeoutMs === undefined ? undefined : watchProgressFile(lease, settings.progressTimeoutMs);
      if (progress !== undefined) env['LEASEHOLD_PROGRESS_FILE'] = progress.path;
      lease.on('renewed', supervisor.noteRenewed);
      let result: ChildResult;
      try {
        result = await supervisor.run(command, env);
      } finally {
        onSignalWhileRunning = undefined;
        lease.off('renewed', supervisor.noteRenewed);
        progress?.stop();
      }
      if (result.lost !== undefined) {
        say(`exiting ${EXIT.LOST}: the lease was lost while the command ran (${result.lost.reason})`);
        return EXIT.LOST;
      }
      // Drained: only now hand the lease over.
      await lease.release();
      return result.status;
    } finally {
      await lh.close();
    }
  } finally {
    for (const s of FORWARDED) process.off(s, onSignal);
  }
}

/**
 * The command reports progress by touching a file (`touch "$LEASEHOLD_PROGRESS_FILE"`); each
 * newer modification time counts as `lease.progress()`. Polled, because a wedged command is
 * exactly the one that stops touching it, and polling notices that without any cooperation.
 */
function watchProgressFile(lease: Lease, timeoutMs: number): { path: string; stop(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-progress-'));
  const path = join(dir, 'progress');
  writeFileSync(path, '');
  let last = statSync(path).mtimeMs;
  const timer = setInterval(() => {
    try {
      const m = statSync(path).mtimeMs;
      if (m > last) {
        last = m;
        lease.progress();
      }
    } catch {
      // Deleted by the command: no progress until it is back.
    }
  }, Math.max(50, Math.min(1000, timeoutMs / 4)));
  timer.unref();
  return {
    path,
    stop() {
      clearInterval(timer);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface ChildResult {
  /** The exit status to report: the child's code, 128 + signal number, or 127/126 if it never ran. */
  status: number;
  /** Set when the lease was lost while the child ran. */
  lost: LeaseLostError | undefined;
}

/** Runs one command for one term and kills its process group if the term ends. */
class Supervisor {
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
    private readonly say: (line: string) => void,
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
    const setpriv = findSetpriv(env);
    const [file, ...args] = setpriv === undefined ? command : [setpriv, '--pdeathsig', 'SIGKILL', '--', ...command];
    const onLost = (): void => this.onTermEnded();
    term.signal.addEventListener('abort', onLost, { once: true });
    try {
      const child = spawn(file!, args, { detached: true, stdio: 'inherit', env });
      this.child = child;
      this.pgid = child.pid;
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
        err(`leasehold: cannot run ${JSON.stringify(command[0])}: ${errorMessage(outcome.error)}; check the command and PATH`);
        status = code === 'EACCES' ? 126 : 127;
      } else if (outcome.signal !== null) {
        status = 128 + signalNumber(outcome.signal);
        this.say(`command killed by ${outcome.signal} (exit status ${status})`);
      } else {
        status = outcome.code ?? 1;
        this.say(`command exited with code ${status}`);
      }
      return { status, lost: this.lost };
    } finally {
      term.signal.removeEventListener('abort', onLost);
    }
  }

  /** SIGTERM/SIGINT/SIGHUP to the runner: pass it on; the caller waits for the child to exit. */
  forward(sig: NodeJS.Signals): void {
    if (this.exited || this.pgid === undefined) return;
    this.say(`${sig}: forwarding to process group ${this.pgid}; the lease is released once the command exits`);
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
    const noTimeLeft =
      reason.reason === 'suspended' || // this process was frozen or restored: no idea how long
      reason.reason === 'revoked' || // the store ended the term already: someone may hold it now
      reason.reason === 'superseded' || // someone does hold it now
      reason.reason === 'stalled' || // the lease was released for another replica; the command is wedged anyway
      remaining < this.graceMs + slack; // the runner was paused past its deadline
    if (noTimeLeft || this.graceMs === 0) {
      this.say(`lost the lease (${reason.reason}); killing process group ${this.pgid ?? '?'} now (SIGKILL)`);
      this.killGroup('SIGKILL');
      return;
    }
    this.say(`lost the lease (${reason.reason}); SIGTERM to process group ${this.pgid ?? '?'}, SIGKILL in ${formatMs(this.graceMs)}`);
    this.killGroup('SIGTERM');
    this.killTimer = setTimeout(() => {
      this.killTimer = undefined;
      if (this.exited) return;
      this.say(`grace of ${formatMs(this.graceMs)} is over; SIGKILL to process group ${this.pgid ?? '?'}`);
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
      if (code !== 'ESRCH' && !quietIfGone) err(`leasehold[${this.name}]: could not send ${sig} to process group ${this.pgid}: ${errorMessage(e)}`);
    }
  }
}
