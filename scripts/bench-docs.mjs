#!/usr/bin/env node
/**
 * `npm run bench:docs`: runs the full bench (`npm run bench`, about 5 minutes) and writes its
 * figures into docs/benchmarks.md between the bench-table markers, with the run's date, machine
 * and load, and its chart into docs/bench.svg. The published figures are then one run's.
 *
 *   node scripts/bench-docs.mjs [--from FILE.json] [--doc FILE.md] [-- bench args...]
 *
 * --from: write the table from a run already made (no bench); --doc: another document (tests).
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const own = dash === -1 ? argv : argv.slice(0, dash);
const benchArgs = dash === -1 ? [] : argv.slice(dash + 1);
const opt = (name) => {
  const i = own.indexOf(name);
  return i === -1 ? undefined : own[i + 1];
};
if (own.includes('--help') || own.includes('-h')) {
  process.stdout.write('npm run bench:docs [-- --from FILE.json] [--doc FILE.md] [-- bench args]\n  runs the full bench and writes its table into docs/benchmarks.md and its chart into docs/bench.svg\n');
  process.exit(0);
}
const doc = opt('--doc') ?? join(ROOT, 'docs', 'benchmarks.md');
let json = opt('--from');
const loadBefore = loadavg();
let command = 'npm run bench';
if (json === undefined) {
  json = join(ROOT, 'dist', 'bench', 'docs-run.json');
  command = ['npm run bench', ...(benchArgs.length > 0 ? ['--', ...benchArgs] : [])].join(' ');
  const r = spawnSync(process.execPath, [join(ROOT, 'scripts', 'launch.mjs'), 'bench', ...benchArgs, '--json', json], { stdio: 'inherit' });
  if (r.status !== 0) {
    process.stderr.write(`bench:docs: the bench failed (exit ${r.status}); ${doc} is left as it was\n`);
    process.exit(r.status ?? 1);
  }
  copyFileSync(json.replace(/\.json$/, '.svg'), join(dirname(doc), 'bench.svg'));
}
const { renderTable, replaceTable } = await import(pathToFileURL(join(ROOT, 'dist', 'bench', 'table.js')).href);
const run = JSON.parse(readFileSync(json, 'utf8'));
const table = renderTable(run, opt('--from') === undefined ? { loadBefore, loadAfter: loadavg(), command } : { loadBefore: [], loadAfter: [], command });
writeFileSync(doc, replaceTable(readFileSync(doc, 'utf8'), table));
process.stdout.write(`bench:docs: ${run.results.length} figures written into ${doc}\n`);
