/**
 * `npm run chaos -- [options]`: real worker processes, a real store, a nemesis, an invariant
 * checker and a report. See docs/chaos.md.
 *
 * Exit codes: 0 the run proved what it set out to prove (fenced: every invariant held;
 * --unfenced: violations were detected, as the negative control must); 1 it did not;
 * 2 bad usage or the run could not start (store or PostgreSQL unreachable).
 */
import { randomInt } from 'node:crypto';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parseDuration } from '../../src/core/config.js';
import { errorMessage } from '../../src/core/errors.js';
import { runChaos } from './harness.js';
import { FAULT_KINDS, type FaultKind, type StoreKind } from './types.js';

const USAGE = `usage: npm run chaos -- [options]

  --store postgres|sqlite|redis|etcd|mysql   where the leases live (default postgres; the resource is always PostgreSQL)
  --profile short|long                       short: 40s, 4 workers, brief holds (what npm test runs); long: 10m, 5 workers
  --duration 60s                       how long the nemesis runs (default 60s, or the profile's); every kind is injected
                                       at least once, even if that takes longer
  --workers 5                          worker processes
  --seed N                             replay a run: the same faults with the same parameters (default: random, printed)
  --ttl 1s                             lease TTL (renew interval TTL/3)
  --faults pause,kill,...              only these kinds (${FAULT_KINDS.join(', ')})
  --liveness ttl|session               the workers' lease liveness (default ttl). session: no proxy (the mode refuses one), and the
                                       nemesis also ends the leader's session on the server (session-end); docs/liveness.md
  --unfenced                           negative control: workers write without the fence; the run must report violations
  --report DIR                         where the report goes (default chaos-report/)
  --keep                               keep the resource schema and lease namespace afterwards
  --help

Environment: LEASEHOLD_TEST_PG_URL (resource, and the postgres store), LEASEHOLD_TEST_REDIS_URL, LEASEHOLD_TEST_ETCD_URL, LEASEHOLD_TEST_MYSQL_URL.
Exit: 0 proved (fenced: all invariants held; --unfenced: violations detected), 1 not proved, 2 could not run.`;

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        store: { type: 'string', default: 'postgres' },
        profile: { type: 'string' },
        duration: { type: 'string' },
        workers: { type: 'string' },
        seed: { type: 'string' },
        ttl: { type: 'string', default: '1s' },
        faults: { type: 'string' },
        unfenced: { type: 'boolean', default: false },
        liveness: { type: 'string', default: 'ttl' },
        report: { type: 'string', default: 'chaos-report' },
        keep: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
      strict: true,
    }));
  } catch (err) {
    process.stderr.write(`${errorMessage(err)}\n\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const fail = (msg: string): number => {
    process.stderr.write(`chaos: ${msg}\n`);
    return 2;
  };
  const store = values.store as StoreKind;
  if (!['postgres', 'sqlite', 'redis', 'etcd', 'mysql'].includes(store)) return fail(`--store ${values.store}: use postgres, sqlite, redis, etcd or mysql`);
  const profile = (values.profile ?? 'long') as 'short' | 'long';
  if (profile !== 'short' && profile !== 'long') return fail(`--profile ${values.profile}: use short or long`);
  const defaultDuration = values.profile === undefined ? '60s' : profile === 'short' ? '40s' : '10m';
  let durationMs: number;
  let ttlMs: number;
  try {
    durationMs = parseDuration(values.duration ?? defaultDuration, '--duration');
    ttlMs = parseDuration(values.ttl, '--ttl');
  } catch (err) {
    return fail(errorMessage(err));
  }
  if (ttlMs < 300 || ttlMs > 60_000) return fail('--ttl must be between 300ms and 60s');
  const workers = Number(values.workers ?? (profile === 'short' ? 4 : 5));
  if (!Number.isInteger(workers) || workers < 2 || workers > 20) return fail('--workers must be a whole number from 2 to 20');
  const seed = values.seed === undefined ? randomInt(1, 2 ** 31 - 1) : Number(values.seed);
  if (!Number.isInteger(seed) || seed < 0 || seed >= 2 ** 32) return fail('--seed must be a whole number from 0 to 2^32-1');
  const liveness = values.liveness;
  if (liveness !== 'ttl' && liveness !== 'session') return fail(`--liveness ${liveness}: use ttl or session`);
  let faults: FaultKind[] | undefined;
  if (values.faults !== undefined) {
    faults = values.faults.split(',').map((f) => f.trim()) as FaultKind[];
    const bad = faults.filter((f) => !FAULT_KINDS.includes(f));
    if (bad.length > 0) return fail(`--faults: unknown ${bad.join(', ')}; kinds are ${FAULT_KINDS.join(', ')}`);
  }
  const command =
    `npm run chaos -- --store ${store} --profile ${profile} --duration ${Math.round(durationMs / 1000)}s --workers ${workers} --seed ${seed} --ttl ${ttlMs}ms` +
    `${faults === undefined ? '' : ` --faults ${faults.join(',')}`}${values.unfenced ? ' --unfenced' : ''}${liveness === 'ttl' ? '' : ' --liveness session'}`;

  const abort = new AbortController();
  const onSignal = (): void => {
    if (abort.signal.aborted) process.exit(130);
    process.stdout.write('\n[chaos] interrupted: stopping the workers and writing the report (Ctrl-C again to quit now)\n');
    abort.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const reportDir = resolve(values.report);
    const report = await runChaos(
      { store, durationMs, workers, seed, reportDir, unfenced: values.unfenced, profile, ttlMs, liveness, keep: values.keep, command, signal: abort.signal, ...(faults === undefined ? {} : { faults }) },
      (line) => process.stdout.write(`${line}\n`),
    );
    process.stdout.write(`report: ${reportDir}/report.html (also report.json, timeline.svg, workers/*.jsonl)\n`);
    return report.exitCode;
  } catch (err) {
    process.stderr.write(`chaos: could not run: ${errorMessage(err)}\n`);
    return 2;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`chaos: ${errorMessage(err)}\n`);
    process.exit(2);
  },
);
