/**
 * `leasehold run`: contend for a lease; while leader, run a command (./supervisor.ts, which says
 * what it guards against); kill it if the lease is lost. Flags: ./run-args.ts.
 */
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AbortedError, LeaseLostError, LeaseholdError, NotAcquiredError, errorMessage } from '../core/errors.js';
import { Leasehold } from '../core/leasehold.js';
import type { Lease, Term } from '../core/lease.js';
import { EXIT, errorLine, exitCodeFor, formatMs, openStoreFromFlags, out } from './common.js';
import { RUN_USAGE, parseRunArgs, type RunSettings } from './run-args.js';
import { Reporter } from './reporter.js';
import { storeOnceReachable } from './store-wait.js';
import { FORWARDED, Supervisor, checkCommand, childStoreUrl, signalNumber, type ChildResult } from './supervisor.js';

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
  void import('./parent-watch.js').then((m) => m.stopWhenLauncherExits()); // npx's exit stops this as SIGTERM would
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
        ...(settings.liveness === 'session' ? { liveness: 'session' as const } : {}),
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
