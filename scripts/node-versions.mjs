#!/usr/bin/env node
// The Node version matrix: runs a large subset of the tests on other Node versions, with Node
// binaries installed from the npm registry (the node-<platform>-<arch> package carries the
// binary) into .cache/node/<version>/, which is git-ignored and reused by the next run.
//
//   node scripts/node-versions.mjs                 Node 22 and 24, the subset below
//   node scripts/node-versions.mjs 24              one version (a major, or an exact 24.22.3)
//   node scripts/node-versions.mjs 24 -- dist/test/cli/run.test.js   chosen test files
//   LEASEHOLD_NODE_VERSIONS=22,24                  the same as arguments
//
// Build first with the machine's Node (npm test does, or `npx tsc -p tsconfig.json`): dist/ is
// plain ESM that every version runs. node_modules is shared, and its better-sqlite3 is built for
// the installing Node's ABI, so on 22 and 24 the SQLite store runs on node:sqlite (the default
// there); forcing better-sqlite3 on them is the one-line error that test/stores/sqlite-driver
// checks. The subset, per version, is what can differ by Node version (everything else is
// the same JavaScript on the same stores, and runs once, on the machine's Node, in npm test):
//   1. the SQLite driver: on 22 and 24 the store, the conformance, the clone fences, the fleet
//      and the slot ledger run on node:sqlite, not better-sqlite3;
//   2. process handling: the runner's supervisor, signals, markers and the progress watchdog,
//      a frozen or forked process, the CLI's startup (on SQLite, a store in the same process tree);
//   3. the chaos short profile on SQLite, with its negative control (real processes, SIGSTOP,
//      libfaketime, on node:sqlite).
// Left to the machine's Node: the other stores' drivers (pg, redis, mysql2, etcd3 are
// JavaScript, not Node's own), test/serial (an npm install that builds better-sqlite3, and
// server restarts) and the topologies.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const log = (m) => process.stdout.write(`[node-versions] ${m}\n`);

const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const versionArgs = dash === -1 ? argv : argv.slice(0, dash);
const fileArgs = dash === -1 ? [] : argv.slice(dash + 1);
const versions = (versionArgs.length > 0 ? versionArgs : (process.env.LEASEHOLD_NODE_VERSIONS ?? '22,24').split(','))
  .map((v) => v.trim().replace(/^v/, ''))
  .filter((v) => v !== '');
for (const v of versions) {
  if (!/^\d+(\.\d+\.\d+)?$/.test(v)) {
    process.stderr.write(`node-versions: "${v}" is not a Node version; give a major (24) or an exact version (24.22.3)\n`);
    process.exit(2);
  }
}

const pkgName = `node-${process.platform}-${process.arch}`;

/** The cached binary for `version`, installing it from the registry if it is missing or not that version. */
function ensureNode(version) {
  const prefix = join(root, '.cache', 'node', version);
  const bin = join(prefix, 'node_modules', pkgName, 'bin', 'node');
  const wanted = (v) => (version.includes('.') ? v === `v${version}` : v.startsWith(`v${version}.`));
  if (existsSync(bin)) {
    const v = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim();
    if (wanted(v)) return { bin, version: v, installMs: 0 };
  }
  mkdirSync(prefix, { recursive: true });
  log(`installing ${pkgName}@${version} from the npm registry into ${prefix}`);
  const t0 = performance.now();
  const r = spawnSync('npm', ['install', '--prefix', prefix, '--no-save', '--no-package-lock', '--no-audit', '--no-fund', `${pkgName}@${version}`], {
    stdio: 'inherit',
  });
  if (r.status !== 0 || !existsSync(bin)) throw new Error(`npm install ${pkgName}@${version} failed (exit ${r.status})`);
  const v = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim();
  if (!wanted(v)) throw new Error(`${pkgName}@${version} installed ${v}`);
  return { bin, version: v, installMs: performance.now() - t0 };
}

function find(dir) {
  const out = [];
  for (const entry of readdirSync(dir)) {
    const p = join(dir, entry);
    if (statSync(p).isDirectory()) out.push(...find(p));
    else if (p.endsWith('.test.js')) out.push(p);
  }
  return out.sort();
}

const distTest = join(root, 'dist', 'test');
if (!existsSync(distTest)) {
  process.stderr.write('node-versions: dist/test is missing; build first (npx tsc -p tsconfig.json, or npm test)\n');
  process.exit(2);
}
const under = (...dirs) => dirs.flatMap((d) => (existsSync(join(distTest, d)) ? find(join(distTest, d)) : []));
// The three groups below run as one set of files per version (SQLite throughout), so the runner
// keeps its three slots busy across them instead of idling at the tail of each group (as three
// runs, one after another: 67 + 44 + 139 s on Node 22 at 4238fef).
const groups = [
  {
    what: 'SQLite on node:sqlite: store, conformance, clone fences, fleet, slot ledger',
    files: [
      ...under('stores').filter((f) => /[/\\]sqlite-[^/\\]+\.test\.js$/.test(f)),
      ...under('conformance', 'fleet', 'scheduler'),
      ...under('engine').filter((f) => /clone-fence-/.test(f)),
    ],
  },
  {
    what: 'process handling: runner, supervisor, signals, markers, pause and fork',
    files: [
      ...under('cli').filter((f) => /[/\\](run[^/\\]*|signals|marker-progress|input-marker|startup-modules)\.test\.js$/.test(f)),
      ...under('engine').filter((f) => /[/\\](clone-fork-pause|freeze-signal|pause-and-failure)\.test\.js$/.test(f)),
    ],
  },
  { what: 'chaos short profile', files: under('chaos') },
];
const runs =
  fileArgs.length > 0
    ? [{ what: 'chosen files', files: fileArgs, stores: process.env.LEASEHOLD_TEST_STORES }]
    : [{ what: groups.map((g) => g.what).join('; '), files: [...new Set(groups.flatMap((g) => g.files))], stores: 'sqlite' }];

function test(bin, files, stores) {
  const env = { ...process.env, LEASEHOLD_TEST_NODE: bin };
  if (stores !== undefined) env.LEASEHOLD_TEST_STORES = stores;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(root, 'scripts', 'test.mjs'), ...files], { stdio: 'inherit', env });
    const forward = (sig) => child.kill(sig);
    process.on('SIGINT', forward).on('SIGTERM', forward);
    child.on('exit', (c, sig) => {
      process.off('SIGINT', forward).off('SIGTERM', forward);
      resolve(c ?? (sig ? 1 : 0));
    });
  });
}

const summary = [];
let code = 0;
for (const version of versions) {
  let node;
  try {
    node = ensureNode(version);
  } catch (err) {
    log(`Node ${version}: ${err.message}`);
    summary.push(`Node ${version}: not installed (${err.message})`);
    code = 1;
    continue;
  }
  log(`Node ${node.version} at ${node.bin}${node.installMs > 0 ? ` (installed in ${(node.installMs / 1000).toFixed(1)}s)` : ' (cached)'}`);
  for (const run of runs) {
    const t0 = performance.now();
    log(`Node ${node.version}: ${run.what} (${run.files.length} files${run.stores === undefined ? '' : `, stores ${run.stores}`})`);
    const c = await test(node.bin, run.files, run.stores);
    const line = `Node ${node.version}: ${run.what}: ${c === 0 ? 'passed' : `FAILED (exit ${c})`} in ${((performance.now() - t0) / 1000).toFixed(0)}s`;
    log(line);
    summary.push(line);
    if (c !== 0) code = c;
  }
}
log('summary:');
for (const s of summary) log(`  ${s}`);
process.exitCode = code;
