#!/usr/bin/env node
// Debian's Chromium for the dashboard's browser test, installed the way etcd is: by apt, once.
// Never a browser download of its own (playwright-core drives this binary by executablePath).
//
//   node scripts/services/chromium.mjs install   install the Debian package chromium if missing
//   node scripts/services/chromium.mjs path      print the binary's path (exit 1 when missing)
//
// Or from a test runner:
//   const r = ensureChromium({ log: console.log });  // { path } or { path: null, reason }
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];
const silent = () => {};

/** The path of an installed Chromium, or null. */
export function chromiumPath() {
  const fromEnv = process.env.LEASEHOLD_TEST_CHROMIUM;
  if (fromEnv !== undefined && fromEnv !== '' && existsSync(fromEnv)) return fromEnv;
  for (const p of CANDIDATES) if (existsSync(p)) return p;
  return null;
}

/**
 * Installs Debian's chromium when missing. Returns `{ path }`, or `{ path: null, reason }` when it
 * cannot (not root, no apt, no network): the browser test then skips with that reason.
 */
export function ensureChromium({ log = silent } = {}) {
  const found = chromiumPath();
  if (found !== null) return { path: found };
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const prefix = asRoot ? [] : ['sudo', '-n'];
  // Another apt run (faketime, etcd) may hold the dpkg lock: wait for it instead of failing.
  const lock = ['-o', 'DPkg::Lock::Timeout=600'];
  const steps = [
    ['apt-get', ...lock, 'update', '-qq'],
    ['apt-get', ...lock, 'install', '-y', '-qq', '--no-install-recommends', 'chromium'],
  ];
  log('[chromium] missing: installing the Debian package chromium (once; this can take a few minutes)');
  for (const args of steps) {
    const [cmd, ...rest] = [...prefix, ...args];
    log(`[chromium] running: ${[cmd, ...rest].join(' ')}`);
    const r = spawnSync(cmd, rest, { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    // A failed update still leaves an older package list that may hold chromium: go on.
    if (r.status !== 0 && args.includes('install')) {
      return { path: null, reason: `"${args.join(' ')}" failed (exit ${r.status ?? r.signal}); install it yourself: apt-get install chromium` };
    }
  }
  const path = chromiumPath();
  return path === null ? { path: null, reason: 'chromium was installed but no binary is at /usr/bin/chromium' } : { path };
}

function main(cmd) {
  const log = (m) => console.log(m);
  if (cmd === 'install') {
    const r = ensureChromium({ log });
    if (r.path === null) {
      console.error(r.reason);
      process.exitCode = 1;
    } else console.log(r.path);
  } else if (cmd === 'path') {
    const p = chromiumPath();
    if (p === null) process.exitCode = 1;
    else console.log(p);
  } else {
    console.error('usage: node scripts/services/chromium.mjs install|path');
    process.exitCode = 2;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) main(process.argv[2]);
