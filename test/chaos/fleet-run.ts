/**
 * `npm run chaos:fleet -- [options]`: the fleet registry under fault injection (agents as real
 * processes, clients, a nemesis, the fleet checker). See docs/chaos.md, "Fleet".
 *
 * Exit codes: 0 proved (every invariant held; with --broken, violations were detected);
 * 1 not proved; 2 bad usage or the run could not start.
 */
import { randomInt } from 'node:crypto';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parseDuration } from '../../src/core/config.js';
import { errorMessage } from '../../src/core/errors.js';
import { runFleetChaos } from './fleet-harness.js';

const USAGE = `usage: npm run chaos:fleet -- [options]

  --store postgres|sqlite|mysql   where the registry and the agents' leases live (default postgres; the resource is PostgreSQL)
  --duration 35s            how long the nemesis runs (every fault kind is injected at least once)
  --agents 4                agent ids (each one process at a time, restarted when it dies)
  --clients 3               client loops
  --heartbeat 300ms         agent heartbeat; --stale-after 1s
  --seed N                  replay a run (default: random, printed)
  --broken lookup|cache     negative control: a lookup that filters on liveness, or a cache that keeps "dead"
  --report DIR              where the logs and the report go (default chaos-report/fleet)
  --help`;

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        store: { type: 'string', default: 'postgres' },
        duration: { type: 'string', default: '35s' },
        agents: { type: 'string', default: '4' },
        clients: { type: 'string', default: '3' },
        heartbeat: { type: 'string', default: '300ms' },
        'stale-after': { type: 'string', default: '1s' },
        seed: { type: 'string' },
        broken: { type: 'string' },
        report: { type: 'string', default: 'chaos-report/fleet' },
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
    process.stderr.write(`chaos:fleet: ${msg}\n`);
    return 2;
  };
  const store = values.store;
  if (store !== 'postgres' && store !== 'sqlite' && store !== 'mysql') return fail(`--store ${store}: the fleet chaos runs on postgres, sqlite or mysql`);
  const broken = values.broken;
  if (broken !== undefined && broken !== 'lookup' && broken !== 'cache') return fail(`--broken ${broken}: use lookup or cache`);
  let durationMs: number, heartbeatMs: number, staleAfterMs: number;
  try {
    durationMs = parseDuration(values.duration, '--duration');
    heartbeatMs = parseDuration(values.heartbeat, '--heartbeat');
    staleAfterMs = parseDuration(values['stale-after'], '--stale-after');
  } catch (err) {
    return fail(errorMessage(err));
  }
  if (staleAfterMs < 2 * heartbeatMs) return fail('--stale-after must be at least twice --heartbeat');
  const agents = Number(values.agents);
  const clients = Number(values.clients);
  if (!Number.isInteger(agents) || agents < 2 || agents > 12) return fail('--agents must be a whole number from 2 to 12');
  if (!Number.isInteger(clients) || clients < 1 || clients > 8) return fail('--clients must be a whole number from 1 to 8');
  const seed = values.seed === undefined ? randomInt(1, 2 ** 31 - 1) : Number(values.seed);
  if (!Number.isInteger(seed) || seed < 0 || seed >= 2 ** 32) return fail('--seed must be a whole number from 0 to 2^32-1');
  const abort = new AbortController();
  const onSignal = (): void => {
    if (abort.signal.aborted) process.exit(130);
    abort.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const report = await runFleetChaos(
      { store, durationMs, agents, clients, seed, heartbeatMs, staleAfterMs, reportDir: resolve(values.report), signal: abort.signal, ...(broken === undefined ? {} : { broken }) },
      (line) => process.stdout.write(`${line}\n`),
    );
    return report.exitCode;
  } catch (err) {
    process.stderr.write(`chaos:fleet: could not run: ${errorMessage(err)}\n`);
    return 2;
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`chaos:fleet: ${errorMessage(err)}\n`);
    process.exit(2);
  },
);
