/** `leasehold run`'s flags: the spec (help, the docs/cli.md table, JSON schema) and the parse into settings. */
import { parseArgs } from 'node:util';
import { DEFAULT_TTL_MS, resolveTiming, validateLeaseName, type Timing } from '../core/config.js';
import { durationOption, flagOrEnv, portOption, usageError } from './common.js';
import { HTTP_HOST_FLAG, LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, optionsOf } from './flags.js';

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
    liveness: {
      type: 'string',
      value: 'MODE',
      env: 'LEASEHOLD_LIVENESS',
      default: 'ttl',
      help:
        'ttl: a dead runner\'s term ends at its expiry. session (PostgreSQL, MySQL/MariaDB, SQLite): the term is also tied to a connection of the runner\'s own ' +
        '(on SQLite, to its process), so a waiting runner takes over within milliseconds when this one dies (SIGKILL, OOM kill, crash), while --ttl can stay long; ' +
        'refused (exit 2) on Redis and etcd, through a pooler or proxy, when the server could end a live runner\'s session within the ttl, and for SQLite without /proc or on a network filesystem. See docs/liveness.md',
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
    ...HTTP_HOST_FLAG,
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
  /** `--liveness`: how the holder is judged alive (LeaseOptions.liveness). */
  liveness: 'ttl' | 'session';
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
    liveness: livenessOption(values.liveness, env),
    busyExit: busyExit(values['busy-exit'], env),
    oncePer: oncePerKey(values['once-per']),
    logFormat: logFormat(values.json === true, values['log-format'], env),
    metricsPort: portOption(values['metrics-port'], 'metrics-port', 'LEASEHOLD_METRICS_PORT', env),
    healthPort: portOption(values['health-port'], 'health-port', 'LEASEHOLD_HEALTH_PORT', env),
    httpHost: flagOrEnv(values['http-host'], 'LEASEHOLD_HTTP_HOST', env)?.value ?? '127.0.0.1',
  };
}

/** `--liveness` / LEASEHOLD_LIVENESS, for run and cron. */
export function livenessOption(flag: string | undefined, env: NodeJS.ProcessEnv): 'ttl' | 'session' {
  const v = flagOrEnv(flag, 'LEASEHOLD_LIVENESS', env);
  if (v === undefined) return 'ttl';
  if (v.value === 'ttl' || v.value === 'session') return v.value;
  throw usageError(`${v.from === 'flag' ? '--liveness' : v.from} ${JSON.stringify(v.value)} is not a liveness mode; use ttl (the default) or session`);
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
