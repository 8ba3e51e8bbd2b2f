#!/usr/bin/env node
// A throwaway single-member etcd for tests and local development, on loopback only.
//
//   node scripts/services/etcd.mjs start     start (installing etcd-server via apt if missing)
//   node scripts/services/etcd.mjs stop      stop the etcd this script started, remove its data
//   node scripts/services/etcd.mjs restart   kill it and start it again on the same data dir
//   node scripts/services/etcd.mjs status
//
// Or from a test runner:
//   const etcd = await ensureEtcd({ log: console.log });  // { url, started, stop, restart }
//
// The etcd runs detached, so a `start` from the command line outlives this script; its pid and
// data live under os.tmpdir()/leasehold-etcd/. `stop` only ever kills the pid recorded there,
// and only after checking that the pid is still that etcd (pids get reused).
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { commandLine, killPid, readPid } from './proc.mjs';

const HOST = '127.0.0.1';
// Other ports and another state dir only for the test of this script itself (test/bench/etcd-service).
const CLIENT_PORT = Number(process.env.LEASEHOLD_ETCD_SERVICE_PORT ?? 2379);
const PEER_PORT = CLIENT_PORT + 1;
const CLIENT_URL = `http://${HOST}:${CLIENT_PORT}`;
const PEER_URL = `http://${HOST}:${PEER_PORT}`;
const STATE_DIR = process.env.LEASEHOLD_ETCD_SERVICE_DIR ?? join(tmpdir(), 'leasehold-etcd');
const DATA_DIR = join(STATE_DIR, 'data');
const PID_FILE = join(STATE_DIR, 'etcd.pid');
// Who is using the etcd a test run started: one file per ensureEtcd() call, holding its pid. The
// last user out stops it; a run that ends while another still uses it leaves it running.
const USERS_DIR = join(STATE_DIR, 'users');
// Present while the running etcd was started by ensureEtcd() (a test run), not by `start`.
const RUN_STARTED = join(STATE_DIR, 'started-by-a-run');
// Held (created exclusively) by the one run that is starting the etcd.
const STARTING = join(STATE_DIR, 'starting');
const LOG_FILE = join(STATE_DIR, 'etcd.log');
const MEMBER = 'leasehold-test';

export const ETCD_URL = `etcd://${HOST}:${CLIENT_PORT}`;

const silent = () => {};

/** True when etcd answers /health on 127.0.0.1:2379 with a leader. */
export async function etcdHealthy(timeoutMs = 1000) {
  try {
    const res = await fetch(`${CLIENT_URL}/health`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) return false;
    const body = await res.json();
    return body.health === true || body.health === 'true';
  } catch {
    return false;
  }
}

function portOpen(port, timeoutMs = 500) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: HOST, port });
    const done = (open) => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

function etcdBinary() {
  for (const p of ['/usr/bin/etcd', '/usr/local/bin/etcd']) if (existsSync(p)) return p;
  const r = spawnSync('sh', ['-c', 'command -v etcd'], { encoding: 'utf8' });
  const found = r.stdout.trim();
  return r.status === 0 && found !== '' ? found : null;
}

function installEtcd(log) {
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const prefix = asRoot ? [] : ['sudo', '-n'];
  const run = (args) => {
    log(`[etcd] running: ${[...prefix, ...args].join(' ')}`);
    const [cmd, ...rest] = [...prefix, ...args];
    const r = spawnSync(cmd, rest, { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    if (r.status !== 0) {
      throw new Error(
        `"${args.join(' ')}" failed (exit ${r.status ?? r.signal}); install etcd yourself (Debian/Ubuntu: apt-get install etcd-server) ` +
          'or point LEASEHOLD_TEST_ETCD_URL at a running etcd',
      );
    }
  };
  log('[etcd] the etcd binary is missing; installing the Debian package etcd-server');
  run(['apt-get', 'update']);
  run(['apt-get', 'install', '-y', 'etcd-server']);
  const bin = etcdBinary();
  if (bin === null) throw new Error('etcd-server was installed but no etcd binary is on the PATH');
  return bin;
}

/** Still an etcd running on our data dir (pids are reused). */
function isOurEtcd(pid) {
  const cmdline = commandLine(pid);
  return cmdline !== null && cmdline.some((a) => a.endsWith('etcd')) && cmdline.includes(DATA_DIR);
}

function tail(file, lines = 20) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function spawnEtcd(bin, log) {
  mkdirSync(STATE_DIR, { recursive: true });
  const out = openSync(LOG_FILE, 'a');
  const args = [
    '--name', MEMBER,
    '--data-dir', DATA_DIR,
    '--listen-client-urls', CLIENT_URL,
    '--advertise-client-urls', CLIENT_URL,
    '--listen-peer-urls', PEER_URL,
    '--initial-advertise-peer-urls', PEER_URL,
    '--initial-cluster', `${MEMBER}=${PEER_URL}`,
    '--initial-cluster-state', 'new',
    '--initial-cluster-token', 'leasehold-test',
    '--logger', 'zap',
    '--log-level', 'warn',
  ];
  log(`[etcd] starting ${bin} on ${CLIENT_URL} (data ${DATA_DIR}, log ${LOG_FILE})`);
  const child = spawn(bin, args, { detached: true, stdio: ['ignore', out, out] });
  closeSync(out);
  child.unref();
  if (child.pid === undefined) throw new Error(`could not start ${bin}; see ${LOG_FILE}`);
  writeFileSync(PID_FILE, `${child.pid}\n`);
  return child;
}

async function waitHealthy(child, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let exited = null;
  child.once('exit', (code, signal) => {
    exited = code ?? signal;
  });
  while (Date.now() < deadline) {
    if (exited !== null) {
      throw new Error(`etcd exited (${exited}) before it became healthy; last log lines:\n${tail(LOG_FILE)}`);
    }
    if (await etcdHealthy(500)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`etcd did not become healthy on ${CLIENT_URL} within ${timeoutMs}ms; last log lines:\n${tail(LOG_FILE)}`);
}

async function startOwned(log, timeoutMs) {
  let bin = etcdBinary();
  if (bin === null) bin = installEtcd(log);
  if (await portOpen(CLIENT_PORT)) {
    throw new Error(`something is listening on ${HOST}:${CLIENT_PORT} but it is not a healthy etcd; stop it first`);
  }
  const child = spawnEtcd(bin, log);
  await waitHealthy(child, timeoutMs);
  log(`[etcd] healthy at ${ETCD_URL} (pid ${child.pid})`);
}

/**
 * Kills the etcd this script started and starts it again on the same data dir (revisions,
 * keys and leases survive). `downMs` keeps it down that long first.
 * @throws when the running etcd was not started by this script.
 */
export async function restartEtcd({ log = silent, downMs = 0, timeoutMs = 20_000 } = {}) {
  const pid = readPid(PID_FILE);
  if (pid === null || !isOurEtcd(pid)) {
    throw new Error('the running etcd was not started by scripts/services/etcd.mjs, so it cannot be restarted here');
  }
  log(`[etcd] restarting (pid ${pid})`);
  await killPid(pid, () => !isOurEtcd(pid));
  if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
  const bin = etcdBinary();
  if (bin === null) throw new Error('the etcd binary disappeared');
  const child = spawnEtcd(bin, log);
  await waitHealthy(child, timeoutMs);
  log(`[etcd] healthy again (pid ${child.pid})`);
}

/** True when the etcd on 127.0.0.1:2379 is one this script started (so it can be restarted). */
export function canRestartEtcd() {
  const pid = readPid(PID_FILE);
  return pid !== null && isOurEtcd(pid);
}

/** Stops the etcd this script started (whoever started it) and removes its data dir. */
export async function stopEtcd({ log = silent } = {}) {
  const pid = readPid(PID_FILE);
  if (pid !== null && isOurEtcd(pid)) {
    log(`[etcd] stopping pid ${pid}`);
    await killPid(pid, () => !isOurEtcd(pid));
  } else {
    log('[etcd] no etcd started by this script is running');
  }
  rmSync(PID_FILE, { force: true });
  rmSync(RUN_STARTED, { force: true });
  rmSync(DATA_DIR, { recursive: true, force: true });
}

/**
 * Makes sure an etcd answers on 127.0.0.1:2379, starting one if none does.
 * `stop()` stops it when a test run started it (this one, or one that has ended) and no other run
 * still uses it; `restart()` works whenever the running etcd was started by this script.
 */
export async function ensureEtcd({ log = silent, timeoutMs = 20_000, run = true } = {}) {
  let started = false;
  mkdirSync(USERS_DIR, { recursive: true });
  const me = join(USERS_DIR, `${process.pid}-${Math.random().toString(36).slice(2, 10)}`);
  if (run) writeFileSync(me, `${process.pid}\n`);
  if (await etcdHealthy()) {
    log(`[etcd] already running at ${ETCD_URL}`);
  } else {
    // Two runs that start at once both find no etcd: one starts it (holding STARTING, created
    // exclusively), the other waits for it rather than start a second etcd on the same ports,
    // data dir and pid file.
    const lock = takeStartLock(timeoutMs);
    try {
      if (lock === null) {
        if (!(await waitForOther(timeoutMs))) throw new Error(`another run has been starting etcd for ${timeoutMs}ms (${STARTING}); remove that file if no run is`);
        log(`[etcd] another run started it at ${ETCD_URL} at the same time; using that one`);
      } else if (await etcdHealthy()) {
        log(`[etcd] already running at ${ETCD_URL}`);
      } else {
        await startOwned(log, timeoutMs);
        if (run) writeFileSync(RUN_STARTED, `${process.pid}\n`);
        started = true;
      }
    } catch (err) {
      rmSync(me, { force: true });
      throw err;
    } finally {
      if (lock !== null) {
        closeSync(lock);
        rmSync(STARTING, { force: true });
      }
    }
  }
  return {
    url: ETCD_URL,
    started,
    canRestart: canRestartEtcd,
    restart: (opts = {}) => restartEtcd({ log, ...opts }),
    /**
     * Stops the etcd if a test run started it (this one or an earlier one that has ended) and no
     * other run still uses it: two runs at once (two contributors' terminals, parallel helpers)
     * no longer stop it under each other. An etcd started with `etcd.mjs start` is left alone.
     */
    stop: async () => {
      rmSync(me, { force: true });
      const others = otherUsers();
      if (others > 0) {
        if (started) log(`[etcd] left running: ${others} other test run(s) still use it`);
        return;
      }
      if (started || existsSync(RUN_STARTED)) await stopEtcd({ log });
    },
  };
}

/** The start lock's fd, or null when another run holds it (one left by a run killed while starting is taken over). */
function takeStartLock(timeoutMs) {
  for (let i = 0; i < 2; i++) {
    try {
      return openSync(STARTING, 'wx');
    } catch {
      let age = 0;
      try {
        age = Date.now() - statSync(STARTING).mtimeMs;
      } catch {
        continue; // gone meanwhile: try again
      }
      if (age < timeoutMs + 5000) return null;
      rmSync(STARTING, { force: true });
    }
  }
  return null;
}

/** True once an etcd answers within `timeoutMs` (one another run is starting). */
async function waitForOther(timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await etcdHealthy(500)) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

/** Live users of the etcd other than those removed (a file whose pid is gone is a crashed run's: removed). */
function otherUsers() {
  let n = 0;
  let entries = [];
  try {
    entries = readdirSync(USERS_DIR);
  } catch {
    return 0;
  }
  for (const f of entries) {
    const pid = readPid(join(USERS_DIR, f));
    if (pid !== null && commandLine(pid) !== null) n++;
    else rmSync(join(USERS_DIR, f), { force: true });
  }
  return n;
}

async function main(cmd) {
  const log = (m) => console.log(m);
  switch (cmd) {
    case 'start':
      // Started by hand: it outlives every test run, which then never stops it.
      await ensureEtcd({ log, run: false });
      console.log(ETCD_URL);
      return;
    case 'stop':
      await stopEtcd({ log });
      return;
    case 'restart':
      await restartEtcd({ log });
      return;
    case 'status': {
      const ok = await etcdHealthy();
      console.log(ok ? `healthy at ${ETCD_URL}${canRestartEtcd() ? ` (pid ${readPid(PID_FILE)}, ours)` : ' (not started by this script)'}` : 'not running');
      process.exitCode = ok ? 0 : 1;
      return;
    }
    default:
      console.error('usage: node scripts/services/etcd.mjs start|stop|restart|status');
      process.exitCode = 2;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2]).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
