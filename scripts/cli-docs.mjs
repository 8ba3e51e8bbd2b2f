#!/usr/bin/env node
/**
 * `npm run docs:cli`: rewrites the generated parts of docs/cli.md (the usage lines, the list of
 * variables, every command's flags) from the command specs, as compiled in dist/ (`npm run
 * docs:cli` builds first). The prose between the parts is left as it is.
 *
 *   node scripts/cli-docs.mjs [--check]    --check: write nothing; exit 1 if the file is out of date
 */
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const DOC = join(ROOT, 'docs', 'cli.md');
const MODULE = join(ROOT, 'dist', 'src', 'cli', 'reference.js');

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write('usage: npm run docs:cli [-- --check]\n  rewrites the generated parts of docs/cli.md from the command specs (src/cli/*.ts);\n  --check writes nothing and exits 1 when the file is out of date\n');
  process.exit(0);
}
if (!existsSync(MODULE)) {
  process.stderr.write(`docs:cli: ${MODULE} is missing; build first (npm run build), or use npm run docs:cli, which does\n`);
  process.exit(2);
}
const { renderCliReference } = await import(pathToFileURL(MODULE).href);
const before = readFileSync(DOC, 'utf8');
let after;
try {
  after = await renderCliReference(before);
} catch (e) {
  process.stderr.write(`docs:cli: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(2);
}
if (process.argv.includes('--check')) {
  if (after !== before) {
    process.stderr.write('docs:cli: docs/cli.md is not what the command specs generate; run `npm run docs:cli` and commit it\n');
    process.exit(1);
  }
  process.stdout.write('docs/cli.md is up to date\n');
} else if (after === before) {
  process.stdout.write('docs/cli.md is up to date\n');
} else {
  writeFileSync(DOC, after);
  process.stdout.write('docs/cli.md: rewrote its generated parts from the command specs\n');
}
