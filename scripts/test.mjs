#!/usr/bin/env node
// The test command behind `npm test` (after build, typecheck and lint): starts the services the
// selected stores need, runs every compiled test file with node's test runner, stops what it
// started. PostgreSQL and Redis are expected at their standard local ports; point elsewhere with
// LEASEHOLD_TEST_PG_URL / LEASEHOLD_TEST_REDIS_URL / LEASEHOLD_TEST_ETCD_URL, and narrow the
// stores with LEASEHOLD_TEST_STORES=postgres,sqlite. LEASEHOLD_TEST_NODE=/path/to/node runs the tests
// (and every process they start) with another Node binary: scripts/node-versions.mjs does, for 22 and 24.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(`usage: node scripts/test.mjs [--phase parallel|serial] [--beside COMMAND]... [compiled test files...]

Runs the compiled tests (dist/test/**/*.test.js, or the files named) with node's test runner:
five at a time, then the files that restart a shared server (the shared etcd's restart test) or
bound a failover tightly (PostgreSQL multi-host) last, one at a time; --phase runs one of the two
phases only.
npm test builds first, then runs this. Starts etcd when it is selected and not running (and
the machine's MariaDB, installing mariadb-server when it is missing), and
installs Debian's faketime, etcd-client (etcdctl, for the etcd restore tests), chromium (for the
dashboard browser test), pgbouncer and iptables (the pooler and partition tests) with apt-get when
missing, which needs root. Prints each phase's slowest
files at the end. --beside runs a shell command (npm test: the typed lint) while the first phase
runs, prints its output when it ends, and fails the run when it fails.

environment:
  LEASEHOLD_TEST_STORES=postgres,sqlite,redis,etcd,mysql   the stores to cover (default: all five);
                                 a file named after a store left out (stores/etcd-*, topologies/pg-*) is left out too
  LEASEHOLD_TEST_PG_URL, LEASEHOLD_TEST_REDIS_URL, LEASEHOLD_TEST_ETCD_URL, LEASEHOLD_TEST_MYSQL_URL   where the stores are
  LEASEHOLD_TEST_CONCURRENCY=5   files at once in the parallel phase (3 when the PostgreSQL in use
                                 allows fewer than 250 connections: it says so)
  LEASEHOLD_TEST_STORES_AT_ONCE=1   per-store suites at once inside the files that loop over stores
                                 (for a machine with cores to spare; 1 on a 2-core one)
  LEASEHOLD_TEST_NODE=/path/to/node   run the tests with another Node binary
  LEASEHOLD_TEST_TIMES=path   where the per-file wall-time table goes (default: os.tmpdir())
  LEASEHOLD_TEST_FILE_TIMEOUT_MS=720000   a file still running after this fails (a hang, not load)
  LEASEHOLD_TEST_RESTART_SHARED=1   set by the serial phase: lets stores/etcd.test.js restart the shared
                                 etcd (run by hand without it, that suite skips and says why)
`);
  process.exit(0);
}
const stores = (process.env.LEASEHOLD_TEST_STORES ?? 'postgres,sqlite,redis,etcd,mysql').split(',').map((s) => s.trim());
const log = (m) => process.stdout.write(`[test] ${m}\n`);
const node = process.env.LEASEHOLD_TEST_NODE || process.execPath;

function find(dir) {
  const out = [];
  for (const entry of readdirSync(dir)) {
    const p = join(dir, entry);
    if (statSync(p).isDirectory()) out.push(...find(p));
    else if (p.endsWith('.test.js')) out.push(p);
  }
  return out.sort();
}
// --phase parallel|serial runs one phase only (the stressed runs of docs/testing.md run the
// parallel phase with the machine loaded by stress-ng).
const phaseAt = process.argv.indexOf('--phase');
const onlyPhase = phaseAt === -1 ? undefined : process.argv[phaseAt + 1];
if (onlyPhase !== undefined && onlyPhase !== 'parallel' && onlyPhase !== 'serial') {
  process.stderr.write(`--phase ${onlyPhase ?? ''}: use parallel or serial\n`);
  process.exit(2);
}
// --beside COMMAND (repeatable): npm test's typed lint, about 50 s of one core, used to run before
// the first test file started; the parallel phase spends most of its time waiting on timers and
// stores (its files' CPU is about a third of their wall time), so the lint runs in that slack.
const beside = process.argv.flatMap((a, i, all) => (all[i - 1] === '--beside' ? [a] : []));
const fileArgs = process.argv.slice(2).filter((a, i, all) => !['--phase', '--beside'].includes(a) && !['--phase', '--beside'].includes(all[i - 1]));
const named = fileArgs.length > 0 ? fileArgs : find(join(root, 'dist', 'test'));
// A file about one store is named after it (stores/etcd-sessions, topologies/pg-ssl,
// serial/mysql-failover): with that store left out of LEASEHOLD_TEST_STORES it is left out too,
// and said so, rather than failing to connect to a server nobody started.
const storeOfFile = (f) => {
  const m = /^(postgres|pg|sqlite|redis|etcd|mysql)(?=[-.])/.exec(f.split(/[/\\]/).pop());
  return m === null ? null : m[1] === 'pg' ? 'postgres' : m[1];
};
const all = named.filter((f) => {
  const s = storeOfFile(f);
  return s === null || stores.includes(s);
});
if (all.length < named.length) {
  const left = named.filter((f) => !all.includes(f)).map((f) => relative(root, f));
  log(`leaving out ${left.length} file(s) about stores not in LEASEHOLD_TEST_STORES (${stores.join(',')}): ${left.join(', ')}`);
}
// Debian's Chromium for the dashboard's browser test (never a browser download); the test skips,
// saying why, when it cannot be installed.
if (all.some((f) => /dashboard-(browser|views)/.test(f))) {
  const { ensureChromium } = await import('./services/chromium.mjs');
  const c = ensureChromium({ log });
  if (c.path === null) log(`no Chromium: ${c.reason}; the dashboard browser test will skip`);
}

// The unit layer (dist/test/unit: fake clock, in-memory store) needs no service at all.
const needsServices = all.some((f) => !/[/\\]unit[/\\]/.test(f));

// Debian packages some tests need, installed when missing (needs root; without one, its tests
// skip and say why). Each is installed only when a file that needs it is in the run.
const sh = (cmd) => spawnSync('sh', ['-c', cmd]).status === 0;
const ranFile = (re) => all.some((f) => re.test(f));
const debianFor = [
  // libfaketime makes a real process's wall clock lie (suspension and clock tests).
  { pkg: 'faketime', what: 'the tests that need libfaketime', wanted: needsServices, present: () => sh('ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1') },
  // etcdctl takes and restores the snapshots of the etcd restore tests.
  { pkg: 'etcd-client', what: 'the etcd restore tests', wanted: stores.includes('etcd') && ranFile(/restore-tokens/), present: () => sh('command -v etcdctl >/dev/null') },
  // Without these two the pooler and partition tests skipped on every run, and so never ran in npm test.
  { pkg: 'pgbouncer', what: 'the PgBouncer test', wanted: stores.includes('postgres') && ranFile(/topologies[/\\]pgbouncer/), present: () => ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].some((b) => existsSync(b)) },
  // The partition test's namespaces drop packets with iptables.
  { pkg: 'iptables', what: 'the partition test', wanted: stores.includes('postgres') && ranFile(/topologies[/\\]pg-partition/), present: () => ['/usr/sbin/iptables', '/sbin/iptables', '/usr/bin/iptables'].some((b) => existsSync(b)) },
];
for (const d of debianFor) {
  if (!d.wanted || d.present()) continue;
  log(`${d.pkg} is missing: installing the Debian package ${d.pkg}`);
  const apt = spawnSync('sh', ['-c', `(apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${d.pkg}`], { stdio: 'inherit' });
  if (apt.status !== 0) log(`could not install ${d.pkg}; ${d.what} will say so and skip`);
}

if (needsServices && stores.includes('mysql') && process.env.LEASEHOLD_TEST_MYSQL_URL === undefined) {
  const { ensureMariadb } = await import('./services/mariadb.mjs');
  const m = await ensureMariadb({ log });
  if (!m.ok) log(`MariaDB: ${m.reason}; the MySQL tests will fail to connect`);
  else if (m.started) log('MariaDB at 127.0.0.1:3306 (started for this run; left running)');
}

let etcd;
if (needsServices && stores.includes('etcd') && process.env.LEASEHOLD_TEST_ETCD_URL === undefined) {
  const { ensureEtcd } = await import('./services/etcd.mjs');
  etcd = await ensureEtcd({ log });
  log(`etcd at ${etcd.url}${etcd.started ? ' (started for this run)' : ' (already running)'}`);
}

// Files that restart or stop a shared server on a standard port (stores/etcd.test.js restarts
// the shared etcd) run last, one at a time: nothing else may be talking to a server they restart.
// Everything else runs in the parallel phase: the topologies (which start servers of their own on
// other ports), lease chaos (chaos-private on PostgreSQL, Redis and etcd, chaos.test on MySQL:
// servers of their own, which their nemesis restarts), serial/store-restart (a server of its own
// per store, restarted under a held lease), serial/mysql-failover (a private MariaDB pair), fleet
// chaos (which faults only its own agent processes) and the packed package (package/tarball: npm
// installs and TypeScript builds, most of one core for two minutes, less than the stressed run's
// two hogs) included.
//
// topologies/pg-multi-host stays here too, though its servers are its own: its follower must hear
// a release within TTL/3 of a promotion, through a LISTEN connection that reconnects with backoff
// while the standby is promoted, and a promotion slowed by two other files' load pushed that
// reconnect past the bound (CI at concurrency 3: 6 s).
const isSerial = (f) => /[/\\]topologies[/\\]pg-multi-host\.test\.js$/.test(f) || /[/\\]stores[/\\]etcd\.test\.js$/.test(f);
// The parallel phase starts its longest files first, so that its end is not one long file running
// alone on a machine with a core to spare (files run in the order given as slots free up). The
// order comes from the last run's table when there is one (LEASEHOLD_TEST_TIMES), else from
// the folders that hold the long files.
// package/ holds the packed-tarball test (two minutes); left to the end it would run alone.
const SLOW_FIRST = ['chaos', 'topologies', 'serial', 'package', 'scheduler', 'fleet', 'engine', 'observe', 'bench', 'conformance'];
function longestFirst(files) {
  const previous = new Map();
  try {
    for (const line of readFileSync(process.env.LEASEHOLD_TEST_TIMES || join(tmpdir(), 'leasehold-test-times.txt'), 'utf8').split('\n')) {
      const m = /^\s*([\d.]+) s\s+\S+\s+\S+\s+(.+)$/.exec(line);
      if (m !== null) previous.set(m[2], Number(m[1]));
    }
  } catch {
    // no earlier table: order by folder
  }
  const folder = (f) => {
    const i = SLOW_FIRST.indexOf(relative(join(root, 'dist', 'test'), f).split(/[/\\]/)[0]);
    return i === -1 ? SLOW_FIRST.length : i;
  };
  // A file the table does not know (new, or no table) is placed by its folder, as if it took
  // 5 s for each place its folder is from the end of SLOW_FIRST.
  const key = (f) => previous.get(relative(root, f)) ?? (SLOW_FIRST.length - folder(f)) * 5;
  return [...files].sort((a, b) => key(b) - key(a) || a.localeCompare(b));
}
// Five files at once, where the PostgreSQL they share takes the connections they open: each file
// starts replicas, agents and workers, each with a pool and a LISTEN connection of its own, and
// five at once went past the 100 that PostgreSQL allows by default (.ci/run of 2026-12-07: "sorry,
// too many clients already" in two files). Below FIVE_AT_ONCE_CONNECTIONS the runner says so and
// runs three at once, as it did before (slower, never failing for it); .ci/run raises the limit.
const FIVE_AT_ONCE_CONNECTIONS = 250;
async function defaultConcurrency() {
  if (!needsServices || !stores.includes('postgres')) return '5';
  let max;
  try {
    const { default: pg } = await import('pg');
    const c = new pg.Client({ connectionString: process.env.LEASEHOLD_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test', connectionTimeoutMillis: 5000 });
    await c.connect();
    try {
      max = Number((await c.query('SHOW max_connections')).rows[0]?.max_connections);
    } finally {
      await c.end();
    }
  } catch {
    return '5'; // unreachable: the PostgreSQL tests say so themselves
  }
  if (max >= FIVE_AT_ONCE_CONNECTIONS) return '5';
  log(`PostgreSQL allows ${max} connections and five files at once need more (about ${FIVE_AT_ONCE_CONNECTIONS}): running three at once. For five: ALTER SYSTEM SET max_connections = 300, restart PostgreSQL (as .ci/run does), or set LEASEHOLD_TEST_CONCURRENCY`);
  return '3';
}
const phases = [
  { name: 'parallel', files: longestFirst(all.filter((f) => !isSerial(f))), concurrency: process.env.LEASEHOLD_TEST_CONCURRENCY ?? (await defaultConcurrency()) },
  { name: 'serial', files: all.filter(isSerial), concurrency: '1' },
].filter((p) => p.files.length > 0 && (onlyPhase === undefined || p.name === onlyPhase));

// Each file's wall time, written by scripts/file-times.mjs as the file ends; the slowest are printed
// after the last phase and the whole table is kept (LEASEHOLD_TEST_TIMES names where).
// The slowest file takes about 3 minutes on a 2-core machine (fleet chaos), twice that with the
// machine loaded by another process; 12 minutes is beyond any file that is making progress.
const FILE_TIMEOUT_MS = Number(process.env.LEASEHOLD_TEST_FILE_TIMEOUT_MS ?? 12 * 60_000);
const timesDir = mkdtempSync(join(tmpdir(), 'leasehold-test-times-'));
const timesFile = (i) => join(timesDir, `phase-${i}.tsv`);

/**
 * `env` adds to the files' environment: the serial phase sets LEASEHOLD_TEST_RESTART_SHARED, the
 * opt-in a file needs to restart a shared server (stores/etcd.test.js), so that files run by hand
 * beside other work never restart one by accident.
 */
function run(files, concurrency, phase, env = {}) {
  const on = node === process.execPath ? '' : `, with ${node}`;
  log(`running ${files.length} test files against: ${stores.join(', ')} (concurrency ${concurrency}${on})`);
  const reporters = ['--test-reporter=spec', '--test-reporter-destination=stdout'];
  reporters.push(`--test-reporter=${join(root, 'scripts', 'file-times.mjs')}`, `--test-reporter-destination=${timesFile(phase)}`);
  return new Promise((resolve) => {
    // A file that runs past FILE_TIMEOUT_MS fails (node's --test-timeout bounds each file's
    // process under --test): a test waiting for an event that never comes fails the run instead of
    // holding it until CI's own limit (CI1 of 2026-12-06: two files waited for ever on a host at load 20).
    const child = spawn(node, ['--test', `--test-concurrency=${concurrency}`, `--test-timeout=${FILE_TIMEOUT_MS}`, ...reporters, ...files], {
      stdio: 'inherit',
      env: { ...process.env, ...env, LEASEHOLD_TEST_STORES: stores.join(',') },
    });
    const forward = (sig) => child.kill(sig);
    process.on('SIGINT', forward).on('SIGTERM', forward);
    child.on('exit', (c, sig) => {
      process.off('SIGINT', forward).off('SIGTERM', forward);
      resolve(c ?? (sig ? 1 : 0));
    });
  });
}

/** A --beside command: its output is printed whole when it ends, so it never splits a test's lines. */
function besideRun(command) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn(command, { shell: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('close', (c, sig) => {
      const ok = c === 0;
      process.stdout.write(`${out}${out.endsWith('\n') || out === '' ? '' : '\n'}`);
      log(`beside the tests: ${command}: ${ok ? 'ok' : `FAILED (${sig ?? `exit ${c}`})`} after ${((Date.now() - t0) / 1000).toFixed(0)} s`);
      resolve({ command, ok });
    });
  });
}

let code = 0;
const started = Date.now();
const besides = Promise.all(beside.map(besideRun));
for (const [i, phase] of phases.entries()) {
  // The serial phase's files load the machine on purpose or restart servers: nothing else runs
  // beside them, so a --beside command still running is waited for before that phase starts.
  if (phase.name === 'serial') await besides;
  const c = await run(phase.files, phase.concurrency, i, phase.name === 'serial' ? { LEASEHOLD_TEST_RESTART_SHARED: '1' } : {});
  if (c !== 0) code = c;
}
const besideFailed = (await besides).filter((b) => !b.ok).map((b) => b.command);
if (besideFailed.length > 0) code = code || 1;
printTimes((Date.now() - started) / 1000);
// Said last, where a contributor looks first, since a lint failure's output is far up the log.
for (const command of besideFailed) log(`FAILED beside the tests: ${command} (its output is above, where it ended)`);

function printTimes(wallSeconds) {
  const rows = [];
  for (const [i, phase] of phases.entries()) {
    let text = '';
    try {
      text = readFileSync(timesFile(i), 'utf8');
    } catch {
      continue; // the phase was interrupted before its reporter wrote anything
    }
    for (const line of text.split('\n').filter(Boolean)) {
      const [ms, passed, file] = line.split('\t');
      rows.push({ ms: Number(ms), passed, file: relative(root, file), phase: phase.name });
    }
  }
  rows.sort((a, b) => b.ms - a.ms);
  const row = (r) => `${(r.ms / 1000).toFixed(1).padStart(7)} s  ${r.phase.padEnd(8)}  ${r.passed}  ${r.file}`;
  const table = rows.map(row);
  const keep = process.env.LEASEHOLD_TEST_TIMES || join(tmpdir(), 'leasehold-test-times.txt');
  // This run's rows replace the same files' rows of the kept table, and the rest stay: a run of a
  // few files (the Node-version legs in .ci/run, a contributor's one file) would otherwise leave
  // a table of those few, and the next whole run would order its files by folder.
  const ran = new Set(rows.map((r) => r.file));
  const kept = [];
  try {
    for (const line of readFileSync(keep, 'utf8').split('\n')) {
      const m = /^\s*([\d.]+) s\s+(\S+)\s+(\S+)\s+(.+)$/.exec(line);
      if (m !== null && !ran.has(m[4]) && existsSync(join(root, m[4]))) kept.push({ ms: Number(m[1]) * 1000, phase: m[2], passed: m[3], file: m[4] });
    }
  } catch {
    // no earlier table
  }
  const whole = [...rows, ...kept].sort((a, b) => b.ms - a.ms);
  writeFileSync(keep, `${whole.map(row).join('\n')}\n`);
  rmSync(timesDir, { recursive: true, force: true });
  log(`wall time ${wallSeconds.toFixed(0)} s; the slowest files (all ${rows.length} of this run in ${keep}${kept.length > 0 ? `, beside ${kept.length} kept from earlier runs` : ''}):`);
  for (const line of table.slice(0, 15)) log(line);
}

// Stops it only when a test run started it and no other run still uses it (etcd.mjs keeps count).
if (etcd !== undefined) await etcd.stop();
process.exitCode = code;
