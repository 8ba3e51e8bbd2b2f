/**
 * `leasehold run`: contend for a lease; while leader, run a command; kill it if the lease is
 * lost. All of the runner's process and signal handling lives in this file.
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
import { accessSync, constants as fsConstants, mkdtempSync, rmSync, statSync, writeFileSync, type Stats } from 'node:fs';
import { constants as osConstants, tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_TTL_MS, resolveTiming, validateLeaseName, type Timing } from '../core/config.js';
import { AbortedError, LeaseLostError, LeaseholdError, NotAcquiredError, StoreUnavailableError, errorMessage } from '../core/errors.js';
import { realClock, sleepOn } from '../core/clock.js';
import { Leasehold } from '../core/leasehold.js';
import type { Lease, Term } from '../core/lease.js';
import type { LoggerLike } from '../core/logger.js';
import type { LeaseStore } from '../backends/store.js';
import { redactUrl } from '../backends/url.js';
import {
  CliError,
  EXIT,
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
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, optionsOf } from './flags.js';
import { escapeControls, jsonSafe } from './escape.js';

export const RUN_SPEC = defineCommand({
  name: 'run',
  summary:
    'Contend for lease NAME; while leader, run COMMAND in its own process group with LEASEHOLD_NAME, LEASEHOLD_TOKEN, LEASEHOLD_HOLDER, ' +
    'LEASEHOLD_STORE (password masked) and LEASEHOLD_IDEMPOTENCY_KEY (leasehold:NAME:TOKEN) in its environment. If the lease is lost, ' +
    'the group gets SIGTERM, then SIGKILL after --grace, so it is dead before the store hands the lease on. SIGTERM/SIGINT/SIGHUP are ' +
    'forwarded; the lease is released after COMMAND exits.',
  trailing: '-- COMMAND [ARGS...]',
  about: `Contends for lease NAME. While leader, runs COMMAND in its own process group with these in its
environment: LEASEHOLD_NAME, LEASEHOLD_TOKEN (the fencing token, decimal), LEASEHOLD_HOLDER,
LEASEHOLD_STORE (its password masked as ***) and LEASEHOLD_IDEMPOTENCY_KEY
(leasehold:NAME:TOKEN). Pass the token with every write to a fenced resource; use the
idempotency key for side effects a fence cannot cover.

COMMAND is looked up (PATH, or the path given) before contending: if it is not there, exit 127,
if it cannot be executed, exit 126, and no lease is taken.`,
  flags: {
    name: { type: 'string', value: 'NAME', env: 'LEASEHOLD_NAME', required: true, help: 'the lease that makes COMMAND a singleton' },
    ...STORE_FLAGS,
    ttl: { type: 'string', value: 'D', env: 'LEASEHOLD_TTL', default: '30s', help: 'how long each renewal is granted for, by the store\'s clock' },
    renew: { type: 'string', value: 'D', env: 'LEASEHOLD_RENEW', default: 'ttl/3', help: 'how often to renew; at most ttl/2' },
    wait: {
      type: 'string',
      value: 'D',
      env: 'LEASEHOLD_WAIT',
      or: 'no-wait',
      default: 'forever',
      help: 'give up (exit 75) if not leader within D; an unreachable store is retried meanwhile (exit 3 if it still is when D ends); the variable also takes "forever" or "no"',
    },
    'no-wait': { type: 'boolean', help: 'one attempt: exit 75 at once if another process holds the lease, 3 if the store is unreachable' },
    grace: {
      type: 'string',
      value: 'D',
      env: 'LEASEHOLD_GRACE',
      default: '5s, ttl/6 for ttls under 30s',
      help: 'after SIGTERM, how long COMMAND gets before SIGKILL when the lease is lost; must be < ttl - renew',
    },
    'busy-exit': {
      type: 'string',
      value: 'N',
      env: 'LEASEHOLD_BUSY_EXIT',
      default: '75',
      help:
        'exit N (0-255) instead of 75 when another process holds the lease (--no-wait, or a --wait that ran out), like flock -E: ' +
        'with 0, cron and systemd do not count "another replica ran it" as a failure. A store outage is still 3',
    },
    'once-per': {
      type: 'string',
      value: 'KEY',
      help:
        'run COMMAND at most once per KEY across replicas (a crontab line: --once-per "$(date -u +%Y-%m-%dT%H:%M)"): once leader, KEY is claimed ' +
        'in the slot ledger (in the lease store) before COMMAND starts; if it already succeeded, exit --busy-exit without running. ' +
        'A KEY whose run failed or was interrupted runs again. COMMAND gets LEASEHOLD_SLOT=KEY and LEASEHOLD_IDEMPOTENCY_KEY=leasehold:NAME:slot:KEY',
    },
    marker: {
      type: 'string',
      value: 'PATH',
      env: 'LEASEHOLD_MARKER',
      help:
        'a file written (name, holder, token) while leader and deleted on standing down; any marker already there is deleted, ' +
        'unread, before contending: it was inherited from a fork, a snapshot or a crash',
    },
    'progress-timeout': {
      type: 'string',
      value: 'D',
      env: 'LEASEHOLD_PROGRESS_TIMEOUT',
      help:
        'COMMAND must touch the file named in LEASEHOLD_PROGRESS_FILE at least every D; if it does not, the lease is released so ' +
        'another replica can lead, and the command is killed',
    },
    'metrics-port': {
      type: 'string',
      value: 'P',
      env: 'LEASEHOLD_METRICS_PORT',
      help: 'serve Prometheus metrics for this lease at http://HOST:P/metrics (needs prom-client installed; 0: any free port)',
    },
    'health-port': {
      type: 'string',
      value: 'P',
      env: 'LEASEHOLD_HEALTH_PORT',
      help:
        'serve /healthz (503 only when this runner believes it leads but has not renewed within a ttl: a wedged leader) and ' +
        '/readyz (200 while leading) at http://HOST:P (0: any free port)',
    },
    'http-host': {
      type: 'string',
      value: 'HOST',
      env: 'LEASEHOLD_HTTP_HOST',
      default: '127.0.0.1',
      help: 'the address --metrics-port and --health-port listen on; 0.0.0.0 for Kubernetes probes and scrapes',
    },
    quiet: { type: 'boolean', help: 'no progress lines on stderr (errors still print; "not leader" does not)' },
    json: {
      type: 'boolean',
      help:
        'every line the runner writes on stderr is one JSON object: {ts, level, event, name, token (a string), holder, ..., msg}. ' +
        'Events: store-unavailable (waitedMs; every 5s while the store cannot be reached), store-reachable, waiting, acquired, recovered (a renewal landed after a failure), lost (reason, signal, pgid), grace-over, ' +
        'signal-forwarded, serving (metrics, health URLs), command-exited (code), command-killed (signal), released (handedOver), not-acquired (exit), stopped, ' +
        'exit; library warnings are event "log", fatal errors event "error" (exit). Same as --log-format json',
    },
    ...LOG_FLAGS,
  },
  footer: `When the lease is lost (expired, revoked, superseded, this process suspended), the process
group gets SIGTERM and, after --grace, SIGKILL, so it is dead before the store-side expiry. If
less than the grace is left (the runner was paused, another holder already has the lease), it
gets SIGKILL at once. An operator's \`leasehold release --force\` gives SIGTERM and the grace:
the fence already refuses the old token. SIGTERM, SIGINT and SIGHUP to the runner are forwarded
to the group; the runner keeps the lease until COMMAND exits, then releases it. Anything
COMMAND left running in its process group is killed before the lease is released.

If the runner itself dies (SIGKILL, a crash), its reaper (a small sh, in a session of its own)
SIGKILLs COMMAND's whole process group within milliseconds; with util-linux setpriv installed,
COMMAND also gets a parent-death SIGKILL from the kernel. Not covered: processes that leave the
group (setsid, setpgid, a shell with job control, daemons), and the group if the reaper was
killed on its own before the runner; only the fence stops those.

While waiting, a store fault that clears by itself (down, restarting, a lost connection, a full
disk, a read-only file or standby) is retried, one line every few seconds, never leading
meanwhile; each attempt is bounded by what is left of --wait.

Exit: COMMAND's status (128+N if killed by signal N); 2 usage; 3 store still unreachable when
the wait ends, schema missing, or the store refused a statement; 75 (or --busy-exit) never
became leader; 76 lost the lease while COMMAND was running; 126 COMMAND not executable; 127
COMMAND not found; 128+N stopped by signal N before COMMAND started; 1 only for an error
leasehold did not anticipate (report it).`,
});

export const RUN_USAGE = helpText(RUN_SPEC);

/** Every flag `run` takes, as parseArgs options (from RUN_SPEC). */
export const RUN_OPTIONS = optionsOf(RUN_SPEC);

const FORWARDED = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

export type LogFormat = 'text' | 'json';

export interface RunSettings {
  name: string;
  command: string[];
  timing: Timing;
  graceMs: number;
  wait: boolean | number;
  quiet: boolean;
  store: string | undefined;
  storeFile: string | undefined;
  schema: string | undefined;
  marker: string | undefined;
  progressTimeoutMs: number | undefined;
  /** The exit code when another process holds the lease (or --once-per KEY already ran); undefined: 75. */
  busyExit: number | undefined;
  /** `--once-per KEY`: the slot ledger key claimed before COMMAND starts. */
  oncePer?: string | undefined;
  logFormat: LogFormat;
  metricsPort?: number | undefined;
  healthPort?: number | undefined;
  httpHost?: string;
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
    storeFile: values['store-file'],
    schema: flagOrEnv(values.schema, 'LEASEHOLD_SCHEMA', env)?.value,
    marker: flagOrEnv(values.marker, 'LEASEHOLD_MARKER', env)?.value,
    progressTimeoutMs: progressTimeout(values['progress-timeout'], env),
    busyExit: busyExit(values['busy-exit'], env),
    oncePer: oncePerKey(values['once-per']),
    logFormat: logFormat(values.json === true, values['log-format'], env),
    metricsPort: portOption(values['metrics-port'], 'metrics-port', 'LEASEHOLD_METRICS_PORT', env),
    healthPort: portOption(values['health-port'], 'health-port', 'LEASEHOLD_HEALTH_PORT', env),
    httpHost: flagOrEnv(values['http-host'], 'LEASEHOLD_HTTP_HOST', env)?.value ?? '127.0.0.1',
  };
}

function portOption(flag: string | undefined, flagName: string, envName: string, env: NodeJS.ProcessEnv): number | undefined {
  const v = flagOrEnv(flag, envName, env);
  if (v === undefined) return undefined;
  if (!/^\d{1,5}$/.test(v.value) || Number(v.value) > 65535) {
    throw usageError(`${v.from === 'flag' ? `--${flagName}` : v.from} ${JSON.stringify(v.value)} is not a port; give a whole number from 0 to 65535`);
  }
  return Number(v.value);
}

function progressTimeout(flag: string | undefined, env: NodeJS.ProcessEnv): number | undefined {
  const ms = durationOption(flag, 'progress-timeout', 'LEASEHOLD_PROGRESS_TIMEOUT', env);
  if (ms !== undefined && ms < 100) throw usageError(`--progress-timeout ${ms}ms is too short to be met; use at least 100ms`);
  return ms;
}

function busyExit(flag: string | undefined, env: NodeJS.ProcessEnv): number | undefined {
  const v = flagOrEnv(flag, 'LEASEHOLD_BUSY_EXIT', env);
  if (v === undefined) return undefined;
  const what = v.from === 'flag' ? '--busy-exit' : v.from;
  if (!/^\d{1,3}$/.test(v.value) || Number(v.value) > 255) {
    throw usageError(`${what} ${JSON.stringify(v.value)} is not an exit code; give a whole number from 0 to 255 (0: "another replica holds it" is not a failure)`);
  }
  return Number(v.value);
}

function oncePerKey(flag: string | undefined): string | undefined {
  if (flag === undefined) return undefined;
  if (flag.trim() === '' || flag.length > 512 || /[\u0000-\u001f]/.test(flag)) {
    throw usageError(`--once-per ${JSON.stringify(flag.slice(0, 40))} is not a key; give 1 to 512 printable characters, like a date: --once-per "$(date -u +%F)"`);
  }
  return flag;
}

function logFormat(json: boolean, flag: string | undefined, env: NodeJS.ProcessEnv): LogFormat {
  const v = flagOrEnv(flag, 'LEASEHOLD_LOG_FORMAT', env);
  const value = v?.value.toLowerCase();
  if (v !== undefined && value !== 'text' && value !== 'json') {
    throw usageError(`${v.from === 'flag' ? '--log-format' : v.from} ${JSON.stringify(v.value)} is not a log format; use text or json`);
  }
  if (json && v?.from === 'flag' && value === 'text') throw usageError('--json and --log-format text contradict each other; pick one');
  return json || value === 'json' ? 'json' : 'text';
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

function signalNumber(sig: NodeJS.Signals): number {
  return (osConstants.signals as Record<string, number | undefined>)[sig] ?? 0;
}

type Fields = Record<string, unknown>;

/**
 * Everything the runner says, one line each on stderr: `leasehold[NAME]: ...` as text, or one
 * JSON object per line for a log collector. JSON lines carry the current term's token (a
 * string: it overflows a JSON number after 2^53) and holder once there is a term.
 */
export class Reporter {
  private term: { token: string; holder: string } | undefined;

  constructor(
    private readonly name: string,
    readonly format: LogFormat,
    private readonly quiet: boolean,
  ) {}

  forTerm(t: Term): void {
    this.term = { token: t.token.toString(), holder: t.holder };
  }

  /** Progress; --quiet drops it. `line` replaces the usual `leasehold[NAME]: msg` text. */
  event(event: string, msg: string, fields: Fields = {}, line?: string): void {
    if (!this.quiet) this.write('info', event, msg, fields, line);
  }

  /** Something that went wrong; printed whatever --quiet says. */
  problem(event: string, msg: string, fields: Fields = {}, line?: string): void {
    this.write('error', event, msg, fields, line);
  }

  /** For the library: its warnings and errors, with their fields; dropped by --quiet like progress. */
  logger(): LoggerLike {
    const write =
      (level: 'warn' | 'error') =>
      (obj: object, msg?: string): void => {
        if (this.quiet) return;
        const fields = Object.fromEntries(Object.entries(obj as Fields).filter(([k, v]) => k !== 'lease' && v !== undefined));
        const text = (msg ?? '').replace(/^leasehold: /, '');
        const shown = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === 'string' ? v : stringify(v)}`);
        this.write(level, 'log', text, fields, `leasehold[${this.name}]: ${text}${shown.length > 0 ? ` (${shown.join(', ')})` : ''}`);
      };
    const noop = (): void => {};
    return { debug: noop, info: noop, warn: write('warn'), error: write('error') };
  }

  private write(level: string, event: string, msg: string, fields: Fields, line: string | undefined): void {
    if (this.format === 'text') err(escapeControls(line ?? `leasehold[${this.name}]: ${msg}`));
    else err(stringify({ ts: new Date().toISOString(), level, event, name: this.name, ...this.term, ...fields, msg }));
  }
}

function stringify(v: unknown): string {
  return jsonSafe(JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? x.toString() : x)) ?? String(v));
}

export async function runCommand(argv: string[]): Promise<number> {
  const settings = parseRunArgs(argv);
  if (settings === 'help') {
    out(RUN_USAGE);
    return EXIT.OK;
  }
  const report = new Reporter(settings.name, settings.logFormat, settings.quiet);
  try {
    return await lead(settings, report);
  } catch (e) {
    // Text: main() prints the one line. JSON: the same line, as JSON, so every line parses.
    if (report.format === 'text') throw e;
    const exit = exitCodeFor(e);
    report.problem('error', errorLine(e, 'run').replace(/^leasehold: /, ''), { exit, ...(e instanceof LeaseholdError ? { error: e.code } : {}) });
    return exit;
  }
}

async function lead(settings: RunSettings, report: Reporter): Promise<number> {
  const { name, command, timing, graceMs, wait } = settings;
  checkCommand(command[0]!);

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
    // A missing or stale schema is exit 3 at once: waiting will not fix it. An unreachable
    // store is waited for, within --wait, so a replica started during an outage (a pod
    // rescheduled while the database fails over, a SQLite disk that is full) does not crash-loop.
    const waitStartedMs = performance.now();
    const open = () => openStoreFromFlags({ store: settings.store, storeFile: settings.storeFile, schema: settings.schema });
    const reached = await storeOnceReachable(open, wait, contention.signal, report);
    if (reached === undefined) {
      const status = 128 + signalNumber(stopSignal ?? 'SIGTERM');
      report.event('stopped', `${stopSignal ?? 'SIGTERM'} while waiting for the store; not running the command`, { signal: stopSignal, status });
      return status;
    }
    const { store, url } = reached;
    const lh = new Leasehold({ store, closeStore: true, logger: report.logger() });
    let closeProbes: (() => Promise<void>) | undefined;
    try {
      const waitLeft = typeof wait === 'number' ? Math.max(1, Math.ceil(wait - (performance.now() - waitStartedMs))) : wait;
      const lease = lh.lease(name, {
        ttl: timing.ttlMs,
        renewInterval: timing.renewMs,
        safetyMargin: timing.marginMs,
        ...(settings.marker === undefined ? {} : { marker: settings.marker }),
        ...(settings.progressTimeoutMs === undefined ? {} : { progressTimeout: settings.progressTimeoutMs }),
      });
      const probes =
        settings.metricsPort === undefined && settings.healthPort === undefined
          ? undefined
          : await (await import('../health/serve.js')).startProbeServers({ leasehold: lh, lease, host: settings.httpHost ?? '127.0.0.1', metricsPort: settings.metricsPort, healthPort: settings.healthPort });
      if (probes !== undefined) {
        closeProbes = () => probes.close();
        if (probes.metricsUrl !== undefined) report.event('serving', `metrics at ${probes.metricsUrl}/metrics`, { metrics: `${probes.metricsUrl}/metrics` });
        if (probes.healthUrl !== undefined) report.event('serving', `health at ${probes.healthUrl}/healthz and /readyz`, { health: `${probes.healthUrl}/healthz` });
      }
      let lastBusy: string | null | undefined;
      lease.on('busy', (holder, expiresInMs) => {
        if (holder === lastBusy) return;
        lastBusy = holder;
        report.event(
          'waiting',
          `waiting: held by ${holder ?? 'another process'}${expiresInMs === null ? '' : `, expires in ${formatMs(expiresInMs)} by the store's clock`}`,
          { holder, expiresInMs },
        );
      });
      lease.on('acquired', (t) => {
        report.forTerm(t);
        report.event('acquired', `acquired token ${t.token} (holder ${t.holder})`);
      });
      lease.on('recovered', (t) => report.event('recovered', `renewal landed; out of jeopardy (token ${t.token})`));
      lease.on('released', (t, handedOver) =>
        report.event('released', `released token ${t.token}${handedOver ? '' : ' (the store no longer had it; it will expire)'}`, { handedOver }),
      );

      let term: Term;
      try {
        term = await lease.acquire({ wait: waitLeft, signal: contention.signal });
      } catch (e) {
        if (e instanceof AbortedError && stopSignal !== undefined) {
          const status = 128 + signalNumber(stopSignal);
          report.event('stopped', `${stopSignal} while waiting; not running the command`, { signal: stopSignal, status });
          return status;
        }
        if (e instanceof NotAcquiredError && exitCodeFor(e) === EXIT.NOT_LEADER) {
          const exit = settings.busyExit ?? EXIT.NOT_LEADER;
          const line = errorLine(e);
          report.event('not-acquired', line.replace(/^leasehold: /, ''), { holder: e.holder, expiresInMs: e.expiresInMs, exit }, line);
          return exit;
        }
        throw e;
      }
      if (stopSignal !== undefined) {
        await lease.release();
        return 128 + signalNumber(stopSignal);
      }
      const supervisor = new Supervisor(name, term, timing, graceMs, report);
      // With --once-per, a signal during the claim aborts it (contention) instead of going to a
      // command that has not started: the forwarding begins once the claim is in.
      if (settings.oncePer === undefined) onSignalWhileRunning = (sig) => supervisor.forward(sig);
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        LEASEHOLD_NAME: name,
        LEASEHOLD_TOKEN: term.token.toString(),
        LEASEHOLD_HOLDER: term.holder,
        LEASEHOLD_STORE: childStoreUrl(url),
        LEASEHOLD_IDEMPOTENCY_KEY: `leasehold:${name}:${term.token}`,
      };
      if (settings.schema !== undefined) env['LEASEHOLD_SCHEMA'] = settings.schema;
      const once = settings.oncePer === undefined ? undefined : await claimOncePer(store, url, term, settings.oncePer, report, contention.signal);
      if (once !== undefined && once.run === false) {
        await lease.release();
        if (stopSignal !== undefined && once.exit === undefined) {
          const status = 128 + signalNumber(stopSignal);
          report.event('stopped', `${stopSignal} while claiming --once-per ${settings.oncePer}; not running the command`, { signal: stopSignal, status });
          return status;
        }
        return once.exit ?? settings.busyExit ?? EXIT.NOT_LEADER;
      }
      if (once !== undefined) {
        Object.assign(env, once.env);
        onSignalWhileRunning = (sig) => supervisor.forward(sig);
        if (stopSignal !== undefined) {
          // The signal landed as the claim came back: the command never starts, and KEY is recorded
          // interrupted, so the next run of it runs it.
          await once.complete(128 + signalNumber(stopSignal), undefined, `${stopSignal} before the command started`);
          await lease.release();
          return 128 + signalNumber(stopSignal);
        }
      }
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
      await once?.complete(result.status, result.lost);
      if (result.lost !== undefined) {
        report.event('exit', `exiting ${EXIT.LOST}: the lease was lost while the command ran (${result.lost.reason})`, {
          status: EXIT.LOST,
          reason: result.lost.reason,
        });
        return EXIT.LOST;
      }
      // Drained: only now hand the lease over.
      await lease.release();
      return result.status;
    } finally {
      await closeProbes?.();
      await lh.close();
    }
  } finally {
    for (const s of FORWARDED) process.off(s, onSignal);
  }
}

/** While the store is unreachable at start, one line this often (not one per attempt). */
const STORE_WAIT_LINE_EVERY_MS = 5000;

/**
 * Opens the store (SQLite writes on open: a full disk refuses it) and checks its schema, retried
 * while the store is unreachable and the wait allows. Undefined: a signal stopped the wait. A
 * missing schema, and an outage that outlasts --wait, throw (exit 3). A store opened here is
 * closed here unless it is returned.
 */
async function storeOnceReachable(
  open: () => Promise<{ store: LeaseStore; url: string }>,
  wait: boolean | number,
  signal: AbortSignal,
  report: Reporter,
): Promise<{ store: LeaseStore; url: string } | undefined> {
  const startedMs = performance.now();
  const until = wait === true ? Infinity : wait === false ? 0 : startedMs + wait;
  let lastLineMs = -Infinity;
  let opened: { store: LeaseStore; url: string } | undefined;
  let ok = false;
  try {
    for (let attempt = 0; ; attempt++) {
      if (signal.aborted) return undefined;
      try {
        // Opening does not connect (network stores connect on the first call); SQLite's open is
        // synchronous. --no-wait: one attempt, bounded by the store's own timeouts only.
        opened ??= await open();
        await withinWait(requireCurrentSchema(opened.store), wait === false ? Infinity : until - performance.now(), signal);
        if (attempt > 0) report.event('store-reachable', `the store answers after ${formatMs(performance.now() - startedMs)}; contending`);
        ok = true;
        return opened;
      } catch (e) {
        if (!(e instanceof StoreUnavailableError)) throw e;
        const now = performance.now();
        if (now >= until) {
          if (attempt === 0) throw e;
          throw new StoreUnavailableError(`the store was still unreachable when the wait (${formatMs(now - startedMs)}) ran out: ${errorMessage(e)}`, { cause: e });
        }
        if (now - lastLineMs >= STORE_WAIT_LINE_EVERY_MS) {
          lastLineMs = now;
          const left = until === Infinity ? 'for ever (--wait)' : `for ${formatMs(until - now)} more`;
          report.problem('store-unavailable', `the store is unreachable (${errorMessage(e)}); retrying ${left}`, {
            waitedMs: Math.round(now - startedMs),
            error: e.code,
          });
        }
        // Quick at first (a store restarting), then every 2s: a down store is not hammered.
        await sleepOn(realClock, Math.min(until - now, Math.min(2000, 100 * 2 ** attempt) * (0.5 + Math.random() / 2)), signal);
      }
    }
  } finally {
    if (!ok) await opened?.store.close();
  }
}

/**
 * `p`, or a StoreUnavailableError once `ms` pass: one attempt (its connect included: the drivers
 * connect on the first call) never outlasts the wait, whatever the store's own timeouts are (a
 * listener that accepts and never answers holds a call for the driver's full timeout, 5s or
 * more). The abandoned call settles on its own; the store is closed after it.
 */
function withinWait<T>(p: Promise<T>, ms: number, signal: AbortSignal): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const late = new Promise<never>((_, reject) => {
    const give = (): void => reject(new StoreUnavailableError(`the store did not answer within the wait (${formatMs(Math.max(0, ms))} left)`));
    if (ms !== Infinity) timer = setTimeout(give, Math.max(0, ms));
    // A signal while a call hangs stops the wait now, not at the driver's timeout.
    onAbort = give;
    signal.addEventListener('abort', onAbort, { once: true });
  });
  // The loser of the race must not become an unhandled rejection.
  p.catch(() => {});
  return Promise.race([p, late]).finally(() => {
    clearTimeout(timer);
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  });
}

/**
 * `--once-per KEY`: claims KEY in the slot ledger with this term's token (fenced by the lease
 * row), or says it already ran. The completion is refused if a later term has re-claimed KEY.
 */
async function claimOncePer(
  store: Awaited<ReturnType<typeof openStoreFromFlags>>['store'],
  url: string,
  term: Term,
  key: string,
  report: Reporter,
  signal: AbortSignal,
): Promise<
  | { run: false; exit?: number }
  | { run: true; env: NodeJS.ProcessEnv; complete(status: number, lost: LeaseLostError | undefined, stopped?: string): Promise<void> }
> {
  const { openSlotLedger } = await import('../backends/index.js');
  const { slotIdempotencyKey } = await import('../scheduler/ledger.js');
  const ledger = await openSlotLedger(store, url);
  const who = { name: term.name, holder: term.holder, token: term.token };
  let claim;
  try {
    // A signal cancels a claim stuck behind a lock or a slow store (rolled back: KEY is not claimed).
    claim = await ledger.claim({ ...who, key, slotAtMs: null, onInterrupted: 'rerun', rerunFailed: true, signal });
  } catch (e) {
    await ledger.close();
    // Aborted (or failed as the signal came): stop. A claim that landed anyway was made by a
    // term about to end, and the next run of KEY reruns it.
    if (signal.aborted) return { run: false };
    throw e;
  }
  if (claim.outcome !== 'claimed') {
    await ledger.close();
    if (claim.outcome === 'fenced') {
      report.event('exit', `exiting ${EXIT.LOST}: the lease was lost before --once-per ${key} could be claimed`, { status: EXIT.LOST });
      return { run: false, exit: EXIT.LOST };
    }
    const r = claim.outcome === 'done' ? claim.record : undefined;
    report.event('once-per-done', `--once-per ${key} already ${r?.status ?? 'handled'} (token ${r?.token ?? '?'}); not running the command`, { key, status: r?.status });
    return { run: false };
  }
  if (claim.rerunOf !== null) report.event('once-per-rerun', `--once-per ${key}: running again (term ${claim.rerunOf} failed or was interrupted)`, { key });
  return {
    run: true,
    env: { LEASEHOLD_SLOT: key, LEASEHOLD_IDEMPOTENCY_KEY: slotIdempotencyKey(term.name, key) },
    async complete(status, lost, stopped) {
      try {
        const done = await ledger.complete({
          ...who,
          key,
          status: lost !== undefined || stopped !== undefined ? 'interrupted' : status === 0 ? 'succeeded' : 'failed',
          exitCode: stopped === undefined ? status : null,
          reason: lost !== undefined ? `lease lost (${lost.reason})` : (stopped ?? null),
        });
        if (!done.completed) report.problem('once-per-refused', `--once-per ${key}: completion refused: a later term has claimed it`, { key });
      } catch (e) {
        // Left 'claimed': the next run of KEY sees an ended term's claim and runs it again.
        report.problem('once-per-unrecorded', `--once-per ${key}: could not record the outcome (${errorMessage(e)}); the next run of ${key} will run it again`, { key });
      } finally {
        await ledger.close();
      }
    },
  };
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
