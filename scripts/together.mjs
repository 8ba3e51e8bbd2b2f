#!/usr/bin/env node
// `node scripts/together.mjs "npm run build" "npm run lint" ...`: runs the npm scripts named at
// the same time and fails when any fails. npm test's steps after the test build are independent
// (the shipped build writes dist/src, lint and the layering check read the sources only), and each
// is one process on one core: on a 2-core machine, two at once take the time of the longest.
// Each command's output is printed whole when it ends, so two logs never interleave.
import { spawn } from 'node:child_process';

const commands = process.argv.slice(2);
if (commands.length === 0 || commands.includes('--help')) {
  process.stdout.write('usage: node scripts/together.mjs "npm run build" "npm run lint" ...\n');
  process.exit(commands.length === 0 ? 2 : 0);
}

const started = Date.now();
const results = await Promise.all(
  commands.map(
    (command) =>
      new Promise((resolve) => {
        const child = spawn(command, { shell: true, stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        child.stdout.on('data', (d) => (out += d));
        child.stderr.on('data', (d) => (out += d));
        child.on('close', (code, signal) => {
          const seconds = ((Date.now() - started) / 1000).toFixed(0);
          process.stdout.write(`${out}${out.endsWith('\n') || out === '' ? '' : '\n'}[together] ${command}: ${code === 0 ? 'ok' : `FAILED (${signal ?? `exit ${code}`})`} after ${seconds} s\n`);
          resolve(code === 0);
        });
      }),
  ),
);
process.exitCode = results.every(Boolean) ? 0 : 1;
