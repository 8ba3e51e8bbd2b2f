#!/usr/bin/env node
// The layering check of src/ (issue 24), run by `npm test` before the tests: the import rules in
// .dependency-cruiser.cjs (no cycle, core imports only core, a backend's files are reached only
// through the registry or a package entry, one backend never imports another), checked with
// dependency-cruiser, a length limit on source files, and no direct read of the process clock in
// the etcd backend outside its clock adapter. Exit 0 when all hold, 1 when not.
//
//   node scripts/layering.mjs [--root DIR]   (DIR: a tree with src/, package.json, tsconfig.json
//                                             and .dependency-cruiser.cjs; default the repository)
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

const repo = new URL('..', import.meta.url).pathname;
const at = process.argv.indexOf('--root');
const root = at === -1 ? repo : resolve(process.argv[at + 1] ?? '.');

/** A source file longer than this is two files. */
const MAX_LINES = 600;

/**
 * Files allowed over the limit for now, each with the length it may not grow past: a ratchet
 * that only shrinks (empty since issue 24 split the last of them). A file that drops under the
 * limit is taken off (the check says so).
 */
const CEILINGS = new Map([]);

/**
 * The etcd backend reads time only through the injected clock (src/backends/etcd/time.ts says
 * how, and is the one file that may read the process's clock: gRPC deadlines are process wall
 * time). Files not yet routed through it, each with the count of direct reads it may not grow
 * past: a ratchet like CEILINGS (fleet.ts and slots.ts were being changed by another branch when
 * the rest of the folder was routed, issue 24 item 5).
 */
const CLOCK_ADAPTER = 'src/backends/etcd/time.ts';
const CLOCK_CEILINGS = new Map([
  ['src/backends/etcd/fleet.ts', 11],
  ['src/backends/etcd/slots.ts', 2],
]);
/** A direct read of the process's clock: Date.now(), performance.now(), new Date() without an argument. */
const CLOCK_READ = /\bDate\.now\s*\(|\bperformance\.now\s*\(|\bnew Date\s*\(\s*\)/g;

const problems = [];
const notes = [];

// 1. Imports: dependency-cruiser, the repository's own copy, on the tree at `root`.
const cruiser = join(repo, 'node_modules', 'dependency-cruiser', 'bin', 'dependency-cruise.mjs');
const dc = spawnSync(process.execPath, [cruiser, 'src', '--config', '.dependency-cruiser.cjs', '--output-type', 'err'], {
  cwd: root,
  encoding: 'utf8',
});
if (dc.error !== undefined || dc.status === null || (dc.status !== 0 && !/error /.test(dc.stdout))) {
  process.stderr.write(`layering: dependency-cruiser did not run (${dc.error?.message ?? `exit ${dc.status ?? dc.signal}`}); run npm ci\n${dc.stderr}`);
  process.exit(1);
}
for (const line of dc.stdout.split('\n')) {
  const m = /^\s*error (\S+): (.*)$/.exec(line);
  if (m !== null) problems.push(`${m[1]}: ${m[2]}`);
}

// 2. Lengths.
function* sources(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* sources(p);
    else if (e.name.endsWith('.ts')) yield p;
  }
}
for (const file of sources(join(root, 'src'))) {
  const rel = relative(root, file).split('\\').join('/');
  const text = readFileSync(file, 'utf8');
  const lines = text.length === 0 ? 0 : text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  const ceiling = CEILINGS.get(rel);
  if (ceiling === undefined && lines > MAX_LINES) problems.push(`too-long: ${rel} has ${lines} lines, over ${MAX_LINES}: split it by role`);
  else if (ceiling !== undefined && lines > ceiling) problems.push(`too-long: ${rel} has ${lines} lines; it may only shrink (was ${ceiling}, the limit is ${MAX_LINES})`);
  else if (ceiling !== undefined && lines <= MAX_LINES) notes.push(`${rel} is ${lines} lines now: take it off CEILINGS in scripts/layering.mjs`);
}
// 3. Clock reads in the etcd backend (comments do not count: they may name what they avoid).
const etcdDir = join(root, 'src', 'backends', 'etcd');
let etcdFiles = [];
try {
  etcdFiles = [...sources(etcdDir)];
} catch {
  // a tree without the etcd backend (the layering test's fixtures)
}
for (const file of etcdFiles) {
  const rel = relative(root, file).split('\\').join('/');
  if (rel === CLOCK_ADAPTER) continue;
  const code = readFileSync(file, 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/(^|\s)\/\/.*$/gm, '$1');
  const reads = code.match(CLOCK_READ)?.length ?? 0;
  const ceiling = CLOCK_CEILINGS.get(rel) ?? 0;
  if (reads > ceiling) {
    problems.push(
      `clock-read: ${rel} reads the process clock directly ${reads} time(s)${ceiling > 0 ? `, over its ceiling of ${ceiling}` : ''}: ` +
        `read the store's clock (the member pool's \`clock\`) instead; ${CLOCK_ADAPTER} says which reading and why`,
    );
  } else if (reads < ceiling) notes.push(`${rel} reads the process clock ${reads} time(s) now: lower its CLOCK_CEILINGS entry in scripts/layering.mjs`);
}

for (const rel of CEILINGS.keys()) {
  try {
    statSync(join(root, rel));
  } catch {
    notes.push(`${rel} is gone: take it off CEILINGS in scripts/layering.mjs`);
  }
}

for (const n of notes) process.stdout.write(`layering: note: ${n}\n`);
if (problems.length > 0) {
  process.stderr.write(`layering: ${problems.length} violation(s) in src/:\n${problems.map((p) => `  ${p}`).join('\n')}\n`);
  process.stderr.write('layering: the rules and why: .dependency-cruiser.cjs and docs/architecture.md\n');
  process.exit(1);
}
const modules = /(\d+) modules/.exec(dc.stdout)?.[1] ?? '?';
process.stdout.write(`layering: ok (${modules} modules: no cycle, core stays core, backends behind the registry; files within ${MAX_LINES} lines, ${CEILINGS.size} on a shrinking ceiling; the etcd backend reads time through its clock, ${CLOCK_CEILINGS.size} file(s) on a ceiling)\n`);
