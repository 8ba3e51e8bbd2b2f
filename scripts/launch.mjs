#!/usr/bin/env node
/**
 * `npm run bench` / `npm run chaos`: answers --help at once (the usage is kept here too, checked
 * against the compiled program's by test/bench/launcher.test.ts), otherwise compiles src + test +
 * bench (about 30 s) and runs the program with the same arguments and exit code.
 *
 *   node scripts/launch.mjs bench|chaos [args...]
 */
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

export const PROGRAMS = {
  bench: { entry: 'dist/bench/run.js', usage: "npm run bench [-- --quick | --smoke] [--only renewal,handover,failover,followers,fence,startup,cron-failover,pg-server,fleet] [--stores postgres,sqlite,redis,etcd,mysql] [--json FILE] [--svg FILE]\n  --quick about 2-2.5 minutes, --smoke seconds (proves the suite runs; its numbers mean nothing)\n  --soak 10m: instead of the figures, N leases (--soak-leases, default 10000) held on one store (--stores, default postgres) for that long;\n    RSS, heap, client and store CPU each minute, and their slopes per minute\n  stores from LEASEHOLD_TEST_PG_URL, LEASEHOLD_TEST_REDIS_URL, LEASEHOLD_TEST_ETCD_URL, LEASEHOLD_TEST_MYSQL_URL (as the tests);\n  each is checked before the first figure, and etcd is started when none is running (as npm test does)\n" },
  chaos: { entry: 'dist/test/chaos/run.js', usage: "usage: npm run chaos -- [options]\n\n  --store postgres|sqlite|redis|etcd|mysql   where the leases live (default postgres; the resource is always PostgreSQL)\n  --profile short|long                       short: 40s, 4 workers, brief holds (what npm test runs); long: 10m, 5 workers\n  --duration 60s                       how long the nemesis runs (default 60s, or the profile's); every kind is injected\n                                       at least once, even if that takes longer\n  --workers 5                          worker processes\n  --seed N                             replay a run: the same faults with the same parameters (default: random, printed)\n  --ttl 1s                             lease TTL (renew interval TTL/3)\n  --faults pause,kill,...              only these kinds (pause, kill, term, snapshot, fork, clock-jump, clock-past, proxy-delay, proxy-blackhole, proxy-reset, restart, session-end)\n  --liveness ttl|session               the workers' lease liveness (default ttl). session: no proxy (the mode refuses one), and the\n                                       nemesis also ends the leader's session on the server (session-end); docs/liveness.md\n  --unfenced                           negative control: workers write without the fence; the run must report violations\n  --report DIR                         where the report goes (default chaos-report/)\n  --keep                               keep the resource schema and lease namespace afterwards\n  --help\n\nEnvironment: LEASEHOLD_TEST_PG_URL (resource, and the postgres store), LEASEHOLD_TEST_REDIS_URL, LEASEHOLD_TEST_ETCD_URL, LEASEHOLD_TEST_MYSQL_URL.\nExit: 0 proved (fenced: all invariants held; --unfenced: violations detected), 1 not proved, 2 could not run.\n" },
};

const [name, ...args] = process.argv.slice(2);
const program = PROGRAMS[name ?? ''];
if (program === undefined) {
  process.stderr.write(`launch: name a program: ${Object.keys(PROGRAMS).join(' or ')}\n`);
  process.exit(2);
}
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(program.usage);
  process.exit(0);
}
// LEASEHOLD_LAUNCH_NO_BUILD: run what dist/ holds (the launcher's own test, or a build just made).
if (process.env.LEASEHOLD_LAUNCH_NO_BUILD !== '1') {
  const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'tsconfig.json')], { stdio: 'inherit' });
  if (tsc.status !== 0) {
    process.stderr.write(`${name}: the build (tsc -p tsconfig.json) failed; fix the errors above\n`);
    process.exit(tsc.status ?? 1);
  }
}
const run = spawnSync(process.execPath, [join(ROOT, program.entry), ...args], { stdio: 'inherit' });
if (run.error !== undefined) {
  process.stderr.write(`${name}: cannot run ${program.entry}: ${run.error.message}\n`);
  process.exit(2);
}
process.exit(run.status ?? (run.signal !== null ? 128 : 1));
