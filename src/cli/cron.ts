/**
 * `leasehold cron`: a scheduled singleton. Every replica runs the same line; each slot is run by
 * the replica that wins a term of lease NAME for it (--mode leader: by the leader), claimed in the
 * slot ledger with that term's fencing token before COMMAND starts (see src/scheduler/cron.ts for the rules). COMMAND runs under the same
 * supervision as `leasehold run` (own process group, reaper, SIGTERM then SIGKILL on lease loss).
 * `leasehold cron history NAME` and `leasehold cron ls` read the ledger (cron-admin.ts).
 *
 * What a replica says on stderr besides its slots, one line each, so that a log shows who runs
 * the schedule without a line per slot from every replica:
 *  - following: the first time it finds another replica holding the lease (per-slot: that
 *    replica won a slot this one tried; leader: it leads). Per-slot, once per other replica for
 *    the life of the process (replicas race for every slot, and who wins changes all the time);
 *    leader, once per change of leader.
 *  - taking over: the first term it wins after a "following" line (leader: it now leads).
 *  - stopping: on SIGTERM/SIGINT/SIGHUP (or npx's exit), what it waits for before exiting.
 */
import { DEFAULT_TTL_MS, parseDuration, resolveTiming, validateLeaseName } from '../core/config.js';
import { LeaseholdError, errorMessage } from '../core/errors.js';
import { Leasehold } from '../core/leasehold.js';
import { openSlotLedger } from '../backends/index.js';
import { startCron, type CatchUp, type CronMode, type SlotEvent } from '../scheduler/cron.js';
import { cronSchedule, everySchedule, type Schedule } from '../scheduler/schedule.js';
import type { SlotLedgerPort } from '../scheduler/ledger.js';
import {
  EXIT,
  durationOption,
  errorLine,
  exitCodeFor,
  flagOrEnv,
  portOption,
  formatMs,
  logFormatOption,
  openStoreFromFlags,
  out,
  requireCurrentSchema,
  setLogContext,
  usageError,
} from './common.js';
import { HTTP_HOST_FLAG, LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';
import { cronHistory, cronList } from './cron-admin.js';
import { Reporter } from './reporter.js';
import { RUN_SPEC, livenessOption } from './run-args.js';
import { Supervisor, checkCommand, childStoreUrl } from './supervisor.js';
import { StopSignals } from './stop-signals.js';
import { RoleLines } from './role-lines.js';

export const CRON_SPEC = defineCommand({
  name: 'cron',
  operands: '[history [NAME] | ls]',
  summary:
    'Run COMMAND once per slot of a schedule across every replica running the same line: any live replica may claim a due slot under ' +
    'its own term of lease NAME (--mode leader: only the leader fires), in the slot ledger with that fencing token first. ' +
    '`cron history NAME` lists the slots; `cron ls` lists the schedules.',
  trailing: '-- COMMAND [ARGS...]',
  about: `Every replica runs the same \`leasehold cron\` line. When a slot comes due, each tries lease
NAME once; the winner holds it for that slot alone (a new term, a new fencing token), claims the
slot in the slot ledger (kept in the lease store itself: PostgreSQL, SQLite, Redis, etcd or MySQL)
with that token, runs COMMAND as \`leasehold run\` would, records the outcome and releases. With
--mode leader, one elected replica holds NAME between slots and fires them all.
COMMAND gets LEASEHOLD_SLOT (the slot's time, ISO 8601 UTC), LEASEHOLD_TOKEN, LEASEHOLD_NAME,
LEASEHOLD_HOLDER, LEASEHOLD_STORE and LEASEHOLD_IDEMPOTENCY_KEY (leasehold:NAME:slot:SLOT, the
same for a rerun of the slot). A slot is due by the store's clock (on etcd, which has none, by
the leader's). A slot that comes due while COMMAND still runs is
recorded skipped (overlap). A new leader marks slots an ended term left running as interrupted
and reruns them (--on-interrupted), and handles slots missed within --catch-up-window per
--catch-up. A replica says once when it follows another and when it takes over.
\`leasehold cron history NAME\` (or \`--name NAME\`) lists the ledger of NAME. \`leasehold cron ls\`
lists every schedule in the store with its last slot, its last success and its lease (the next
due slot is not in the store: the expression is in the replicas' command lines).`,
  flags: {
    name: { type: 'string', value: 'NAME', env: 'LEASEHOLD_NAME', required: true, help: 'the lease (and ledger name) that makes the schedule a singleton' },
    schedule: { type: 'string', value: 'EXPR', or: 'every', help: 'a cron expression: 5 fields, or 6 with seconds first ("30 2 * * *")' },
    every: { type: 'string', value: 'D', help: 'a fixed period instead of --schedule, aligned to the Unix epoch (--every 5m fires at :00, :05, ...)' },
    tz: { type: 'string', value: 'ZONE', help: 'the IANA time zone of --schedule', default: 'UTC' },
    'catch-up': {
      type: 'string',
      value: 'latest|all|none',
      help: 'slots missed while no replica led, within the window: run the newest once (others recorded skipped), run all in order, or skip all',
      default: 'latest',
    },
    'catch-up-window': { type: 'string', value: 'D', help: 'how far back a new leader looks for missed and interrupted slots', default: '1h' },
    mode: {
      type: 'string',
      value: 'per-slot|leader',
      help:
        'per-slot: any live replica claims a due slot, holding the lease only while its job runs (a replica that dies between slots costs no slot); ' +
        'leader: one replica holds the lease between slots and fires them all (fewer store requests per slot, but a leader\'s death costs the slots until its TTL runs out)',
      default: 'per-slot',
    },
    'on-interrupted': {
      type: 'string',
      value: 'rerun|skip',
      help: 'a slot whose leader lost its lease mid-run: run it again (at-least-once: fence the job\'s writes) or record it skipped',
      default: 'rerun',
    },
    'metrics-port': {
      type: 'string',
      value: 'P',
      env: 'LEASEHOLD_METRICS_PORT',
      help:
        'serve Prometheus metrics at http://HOST:P/metrics: the schedule (leasehold_cron_slots_total{outcome}, missed slots, start lateness, ' +
        'the last success read from the ledger) and its lease; needs prom-client; 0: any free port',
    },
    'health-port': {
      type: 'string',
      value: 'P',
      env: 'LEASEHOLD_HEALTH_PORT',
      help: 'serve /healthz (503 only when a slot\'s term is believed held but has not renewed within a TTL: a wedged replica) and /readyz (200 while this replica holds the lease) at http://HOST:P (0: any free port)',
    },
    ...HTTP_HOST_FLAG,
    ...STORE_FLAGS,
    ttl: RUN_SPEC.flags.ttl,
    renew: RUN_SPEC.flags.renew,
    grace: RUN_SPEC.flags.grace,
    liveness: RUN_SPEC.flags.liveness,
    limit: { type: 'string', value: 'N', help: 'cron history: the most recent N slots, 1 to 100000', default: '50' },
    quiet: { type: 'boolean', help: 'no progress lines on stderr (errors still print)' },
    json: {
      type: 'boolean',
      help:
        'cron: every stderr line is a JSON object (events slot-started with delayMs, slot-succeeded, slot-failed, slot-interrupted, slot-skipped, ...); ' +
        'cron history: an array of { name, slot, slotAt, status, token, holder, startedAt, endedAt, exitCode, reason } on stdout; ' +
        'cron ls: an array of { name, lease: { state, holder, token, expiresInMs }, last (a history row), lastSuccess: { slot, endedAt, holder } | null, recent: { succeeded: N, ... }, storeNow, schedule: { description, expression, timeZone, everyMs, mode, catchUp, catchUpWindowMs, catchingUp, writtenBy } | null, nextDue }',
    },
    ...LOG_FLAGS,
  },
  footer: `Exit (cron): runs until SIGTERM/SIGINT/SIGHUP (a running COMMAND gets the signal and is waited
for), then 128+N; 2 usage (bad expression, unknown zone, conflicting flags); 3 store unreachable or
schema missing.
Exit (cron history, cron ls): 0 with the slots or schedules (none is 0 too); 2 usage; 3 store
unreachable or schema missing.`,
});

interface CronSettings {
  name: string;
  command: string[];
  schedule: Schedule;
  catchUp: CatchUp;
  catchUpWindowMs: number;
  onInterrupted: 'rerun' | 'skip';
  mode: CronMode;
  values: CronValues;
}

type CronValues = ReturnType<typeof parseCommand<typeof CRON_SPEC.flags>>['values'];

function parseCronArgs(argv: string[], env: NodeJS.ProcessEnv): CronSettings | 'help' | { history: string; values: CronValues } | { ls: true; values: CronValues } {
  const sep = argv.indexOf('--');
  const { values, positionals } = parseCommand(CRON_SPEC, sep === -1 ? argv : argv.slice(0, sep));
  if (values.help === true) return 'help';
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals[0] === 'history') {
    // The usage line reads `cron [history [NAME] | ls] --name NAME`: either spelling names it.
    const named = flagOrEnv(values.name, 'LEASEHOLD_NAME', env);
    if (positionals.length > 2) throw usageError(`cron history takes one lease name, not ${positionals.length - 1}: leasehold cron history NAME [--json]`);
    const operand = positionals[1];
    if (operand !== undefined && values.name !== undefined && operand !== values.name) {
      throw usageError(`cron history ${JSON.stringify(operand)} and --name ${JSON.stringify(values.name)} name two schedules; give one`);
    }
    const name = operand ?? named?.value;
    if (name === undefined) throw usageError('cron history needs a schedule: leasehold cron history NAME, or --name NAME (or LEASEHOLD_NAME)');
    return { history: validateLeaseName(name), values };
  }
  if (positionals[0] === 'ls') {
    if (positionals.length > 1) throw usageError(`cron ls takes no operand (got ${JSON.stringify(positionals[1])}); for one schedule, add --name NAME`);
    if (values.name !== undefined) validateLeaseName(values.name);
    return { ls: true, values };
  }
  if (positionals.length > 0) {
    throw usageError(`unexpected argument ${JSON.stringify(positionals[0])} before \`--\`; options go before \`--\`, the command after it (the subcommands are history and ls)`);
  }
  const command = sep === -1 ? [] : argv.slice(sep + 1);
  if (command.length === 0 || command[0] === '') throw usageError('cron needs a command after `--`; write leasehold cron --name NAME --schedule EXPR -- COMMAND [ARGS...]');
  const nameOpt = flagOrEnv(values.name, 'LEASEHOLD_NAME', env);
  if (nameOpt === undefined) throw usageError('cron needs --name NAME (or LEASEHOLD_NAME): the lease that makes the schedule a singleton');
  const name = validateLeaseName(nameOpt.value);
  if (values.schedule !== undefined && values.every !== undefined) throw usageError('--schedule and --every contradict each other; pick one');
  if (values.schedule === undefined && values.every === undefined) throw usageError('cron needs --schedule EXPR or --every D');
  if (values.tz !== undefined && values.every !== undefined) throw usageError('--tz applies to --schedule, not --every (a period has no time zone); drop --tz');
  let schedule: Schedule;
  try {
    schedule = values.every !== undefined ? everySchedule(parseDuration(values.every, '--every')) : cronSchedule(values.schedule!, values.tz ?? 'UTC');
  } catch (e) {
    throw usageError(errorMessage(e));
  }
  const catchUp = values['catch-up'] ?? 'latest';
  if (catchUp !== 'latest' && catchUp !== 'all' && catchUp !== 'none') throw usageError(`--catch-up ${JSON.stringify(catchUp)} is not latest, all or none`);
  const onInterrupted = values['on-interrupted'] ?? 'rerun';
  if (onInterrupted !== 'rerun' && onInterrupted !== 'skip') throw usageError(`--on-interrupted ${JSON.stringify(onInterrupted)} is not rerun or skip`);
  const mode = values.mode ?? 'per-slot';
  if (mode !== 'per-slot' && mode !== 'leader') throw usageError(`--mode ${JSON.stringify(mode)} is not per-slot or leader`);
  const catchUpWindowMs = durationOption(values['catch-up-window'], 'catch-up-window', 'LEASEHOLD_CATCH_UP_WINDOW', {}) ?? 3_600_000;
  return { name, command, schedule, catchUp, catchUpWindowMs, onInterrupted, mode, values };
}

export async function cronCommand(argv: string[]): Promise<number> {
  const env = process.env;
  const parsed = parseCronArgs(argv, env);
  if (parsed === 'help') {
    out(helpText(CRON_SPEC));
    return EXIT.OK;
  }
  if ('history' in parsed) return cronHistory(parsed.history, parsed.values);
  if ('ls' in parsed) return cronList(parsed.values);
  const { name, command, values } = parsed;
  const ttlMs = durationOption(values.ttl, 'ttl', 'LEASEHOLD_TTL', env) ?? DEFAULT_TTL_MS;
  const renewMs = durationOption(values.renew, 'renew', 'LEASEHOLD_RENEW', env);
  const base = resolveTiming({ ttl: ttlMs, ...(renewMs === undefined ? {} : { renewInterval: renewMs }) });
  const graceMs = durationOption(values.grace, 'grace', 'LEASEHOLD_GRACE', env) ?? Math.min(5000, Math.floor(base.ttlMs / 6));
  if (graceMs >= base.ttlMs - base.renewMs) throw usageError(`--grace ${graceMs}ms must be shorter than ttl - renew (${base.ttlMs - base.renewMs}ms); lower --grace or raise --ttl`);
  const timing = resolveTiming({ ttl: base.ttlMs, renewInterval: base.renewMs, safetyMargin: base.marginMs + graceMs });
  const liveness = livenessOption(values.liveness, env);
  const json = values.json === true || flagOrEnv(values['log-format'], 'LEASEHOLD_LOG_FORMAT', env)?.value.toLowerCase() === 'json';
  const report = new Reporter(name, json ? 'json' : 'text', values.quiet === true);
  checkCommand(command[0]!);
  const metricsPort = portOption(values['metrics-port'], 'metrics-port', 'LEASEHOLD_METRICS_PORT', env);
  const healthPort = portOption(values['health-port'], 'health-port', 'LEASEHOLD_HEALTH_PORT', env);
  const httpHost = flagOrEnv(values['http-host'], 'LEASEHOLD_HTTP_HOST', env)?.value ?? '127.0.0.1';

  const { store, url } = await openStoreFromFlags(values);
  let probes: { metricsUrl?: string; healthUrl?: string; close(): Promise<void> } | undefined;
  let ledger: SlotLedgerPort | undefined;
  let onExit = (): void => {};
  const lh = new Leasehold({ store, closeStore: true, logger: report.logger() });
  try {
    await requireCurrentSchema(store);
    ledger = await openSlotLedger(store, url);
    let supervisor: Supervisor | undefined;
    // Armed before the schedule starts: a signal before the handler below is installed (the probes
    // start in between) drains the replica like any other instead of killing it silently.
    const signals = new StopSignals().arm();
    onExit = () => signals.disarm();
    // The probes need the cron's lease, so they start after it; until they serve, no job starts.
    // A port that cannot be bound stops the replica (exit 2) before any slot's command runs: a
    // slot claimed meanwhile is recorded 'interrupted', and another replica reruns it.
    let probesServing: (ok: boolean) => void = () => {};
    const probesUp = metricsPort === undefined && healthPort === undefined ? Promise.resolve(true) : new Promise<boolean>((r) => (probesServing = r));
    const cron = startCron(
      lh,
      ledger,
      name,
      {
        schedule: parsed.schedule,
        catchUp: parsed.catchUp,
        catchUpWindow: parsed.catchUpWindowMs,
        onInterrupted: parsed.onInterrupted,
        mode: parsed.mode,
        ttl: timing.ttlMs,
        renewInterval: timing.renewMs,
        safetyMargin: timing.marginMs,
        ...(liveness === 'session' ? { liveness } : {}),
      },
      async ({ term, lease, slot, idempotencyKey }) => {
        // A stop signal drains the cron (no job starts after it; see onSignal), so this only
        // guards a signal that landed in the same turn: the throw is recorded 'interrupted'.
        if (signals.received !== undefined) throw new Error(`not started: ${signals.received} arrived`);
        if (!(await probesUp)) throw new Error('not started: the metrics or health port could not be served');
        // And again: a signal can arrive while the probes come up.
        if (signals.received !== undefined) throw new Error(`not started: ${signals.received} arrived`);
        const sup = new Supervisor(name, term, timing, graceMs, report);
        supervisor = sup;
        lease.on('renewed', sup.noteRenewed);
        try {
          const r = await sup.run(command, {
            ...process.env,
            LEASEHOLD_NAME: name,
            LEASEHOLD_TOKEN: term.token.toString(),
            LEASEHOLD_HOLDER: term.holder,
            LEASEHOLD_STORE: childStoreUrl(url),
            LEASEHOLD_SLOT: slot,
            LEASEHOLD_IDEMPOTENCY_KEY: idempotencyKey,
            ...(values.schema === undefined ? {} : { LEASEHOLD_SCHEMA: values.schema }),
          });
          return { exitCode: r.status };
        } finally {
          lease.off('renewed', sup.noteRenewed);
          supervisor = undefined;
        }
      },
    );
    const roles = new RoleLines(report, parsed.mode, parsed.schedule.description, () => lh.holder);
    cron.lease.on('busy', (holder, expiresInMs) => roles.busy(holder, expiresInMs));
    /** A slot event in the current term: a per-slot term that had none (a startup's check) says nothing on release. */
    let slotInTerm = false;
    cron.lease.on('acquired', (t) => {
      report.forTerm(t);
      slotInTerm = false;
      roles.acquired(t);
    });
    if (parsed.mode === 'leader') cron.lease.on('lost', () => roles.lost());
    // Per-slot: the moment this replica stops blocking others; a kill after it costs no slot.
    if (parsed.mode === 'per-slot') {
      cron.lease.on('released', (t) => {
        if (slotInTerm) report.event('released', `slot term ${t.token} released`);
      });
    }
    /** The slot whose job runs now, for the stopping line. */
    let running: string | undefined;
    cron.on('slot', (e) => {
      slotInTerm = true;
      if (e.event === 'started') running = e.slot;
      else if (e.slot === running) running = undefined;
      reportSlot(report, e);
    });
    // Otherwise a replica between slots is silent: a newcomer sees that it is scheduled, and when.
    const first = parsed.schedule.next(Date.now());
    report.event(
      'scheduled',
      `scheduled: ${parsed.schedule.description}, --mode ${parsed.mode}; next slot ${first === null ? 'none' : new Date(first).toISOString()} (by this host's clock; the store's decides)`,
      { schedule: parsed.schedule.description, mode: parsed.mode, ...(first === null ? {} : { nextSlot: new Date(first).toISOString() }) },
    );
    if (metricsPort !== undefined || healthPort !== undefined) {
      try {
        probes = await (await import('../health/serve.js')).startProbeServers({
          leasehold: lh,
          lease: cron.lease,
          host: httpHost,
          metricsPort,
          healthPort,
          registerMore: async (registry) => void (await import('../metrics/cron.js')).registerCronMetrics(cron, { registry }),
        });
      } catch (err) {
        // A port that cannot be bound stops the replica (exit 2) like a bad flag.
        probesServing(false);
        await cron.stop();
        throw err;
      }
      probesServing(true);
      for (const [what, at, path] of [['metrics', probes.metricsUrl, '/metrics'], ['health', probes.healthUrl, '/healthz and /readyz']] as const) {
        if (at !== undefined) report.event('serving', `${what} at ${at}${path}`, { [what]: `${at}${path.split(' ')[0]}` });
      }
    }
    return await new Promise<number>((resolve) => {
      let stopping = false;
      const finish = (code: number): void => {
        signals.disarm();
        void cron.stop().then(() => resolve(code));
      };
      function onSignal(sig: NodeJS.Signals): void {
        // From here no slot starts; one claimed but not started, or a job the signal makes fail,
        // is recorded 'interrupted' so that the next leader reruns it.
        cron.drain(sig);
        const code = 128 + (sig === 'SIGINT' ? 2 : sig === 'SIGHUP' ? 1 : 15);
        if (stopping) return;
        stopping = true;
        const job = supervisor;
        report.event(
          'stopping',
          job === undefined
            ? `stopping on ${sig}: no job running; ${cron.lease.currentTerm === undefined ? 'this replica holds no term' : 'releasing the lease'}, and no slot starts after this`
            : `stopping on ${sig}: the job of slot ${running ?? '?'} gets the signal and is waited for; no slot starts after it`,
          { signal: sig, ...(running === undefined ? {} : { slot: running }) },
        );
        if (job === undefined) return finish(code);
        // A running COMMAND gets the signal and is waited for before the lease is released.
        job.forward(sig);
        const wait = (): void => (supervisor === undefined ? finish(code) : void setTimeout(wait, 50));
        wait();
      }
      signals.handle(onSignal);
      void import('./parent-watch.js').then((m) => m.stopWhenLauncherExits()); // npx's exit stops this as SIGTERM would
      cron.on('error', (e) => {
        report.problem('error', errorLine(e, 'cron').replace(/^leasehold: /, ''), { exit: exitCodeFor(e), ...(e instanceof LeaseholdError ? { error: e.code } : {}) });
        finish(exitCodeFor(e));
      });
    });
  } finally {
    onExit();
    await probes?.close();
    await ledger?.close();
    await lh.close();
  }
}

function reportSlot(report: Reporter, e: SlotEvent): void {
  const fields = { slot: e.slot, slotToken: e.token.toString(), ...(e.delayMs === undefined ? {} : { delayMs: e.delayMs }), ...(e.reason === undefined ? {} : { reason: e.reason }), ...(e.exitCode === undefined ? {} : { exitCode: e.exitCode }) };
  const what: Record<SlotEvent['event'], string> = {
    started: `slot ${e.slot}: started (${formatMs(e.delayMs ?? 0)} after its time)${e.reason === undefined ? '' : `; ${e.reason}`}`,
    succeeded: `slot ${e.slot}: succeeded`,
    failed: `slot ${e.slot}: failed (exit ${e.exitCode ?? '?'})${e.reason === undefined ? '' : `: ${e.reason}`}`,
    interrupted: `slot ${e.slot}: interrupted: ${e.reason ?? ''}`,
    skipped: `slot ${e.slot}: skipped: ${e.reason ?? ''}`,
    'done-already': `slot ${e.slot}: already handled (${e.reason ?? ''})`,
    'completion-refused': `slot ${e.slot}: completion refused: a later term has claimed it`,
  };
  if (e.event === 'failed' || e.event === 'completion-refused') report.problem(`slot-${e.event}`, what[e.event], fields);
  else report.event(`slot-${e.event}`, what[e.event], fields);
}
