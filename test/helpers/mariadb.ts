/**
 * Restarting the machine's MariaDB (127.0.0.1:3306), for the chaos nemesis and the store-restart
 * test. It is the server every other MySQL test uses, so a restart must always end with it
 * answering again, started exactly as the machine starts it (scripts/services/mariadb.mjs).
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';
import { TEST_MYSQL_URL } from './stores.js';

const DAEMON = '/usr/sbin/mariadbd';
const PID_FILE = '/run/mysqld/mysqld.pid';
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

function run(cmd: string, args: string[], timeoutMs: number): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1;
      resolve({ code, out: `${stdout}${stderr}`.trim() });
    });
  });
}

/**
 * The pids of the machine's own server: /usr/sbin/mariadbd on its default configuration. A
 * mariadbd started with --datadir or --defaults-file is someone else's (a replica a test set up),
 * and a restart must never touch it.
 */
function machineServerPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readlinkSync(`/proc/${entry}/exe`) !== DAEMON) continue;
      const args = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').slice(1);
      if (args.some((a) => /^--(datadir|defaults-file|defaults-extra-file|port|socket)\b/.test(a))) continue;
      pids.push(Number(entry));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}

/** True when the server takes a connection and runs a statement. */
export async function mariadbAnswers(timeoutMs = 1000): Promise<boolean> {
  const mysql = createRequire(import.meta.url)('mysql2') as {
    createConnection(o: { uri: string; connectTimeout: number }): {
      on(ev: 'error', f: () => void): void;
      query(sql: string, cb: (err: Error | null) => void): void;
      destroy(): void;
    };
  };
  const c = mysql.createConnection({ uri: TEST_MYSQL_URL.replace(/^mariadb:/, 'mysql:'), connectTimeout: timeoutMs });
  c.on('error', () => {});
  try {
    return await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs + 500);
      c.query('DO 1', (err) => {
        clearTimeout(timer);
        resolve(err === null);
      });
    });
  } finally {
    c.destroy();
  }
}

/** Why the machine's MariaDB cannot be restarted from here, or undefined when it can. */
export function whyNotRestartMariadb(): string | undefined {
  if (process.getuid?.() !== 0) return 'restarting the machine MariaDB needs root (start-stop-daemon)';
  const u = new URL(TEST_MYSQL_URL);
  if (!LOOPBACK.has(u.hostname) || (u.port !== '' && u.port !== '3306')) {
    return `LEASEHOLD_TEST_MYSQL_URL points at ${u.host}, not the machine MariaDB on 127.0.0.1:3306 this can restart`;
  }
  if (!existsSync(DAEMON)) return `${DAEMON} is not installed`;
  if (!existsSync('/sbin/start-stop-daemon') && !existsSync('/usr/sbin/start-stop-daemon')) return 'start-stop-daemon is not available';
  if (machineServerPids().length === 0) return `the server on 3306 is not ${DAEMON} on its default configuration, so it was not started the way this restarts it`;
  return undefined;
}

async function startAndWait(deadline: number): Promise<void> {
  // The machine's command, plus --pidfile: without it start-stop-daemon takes ANY running
  // mariadbd (a test's replica) as "already running" and starts nothing.
  const start = (): Promise<{ code: number; out: string }> =>
    run('start-stop-daemon', ['--start', '--oknodo', '--background', '--pidfile', PID_FILE, '--exec', DAEMON], 10_000);
  const r = await start();
  if (r.code !== 0) throw new Error(`start-stop-daemon --start ${DAEMON} failed (exit ${r.code}): ${r.out}`);
  let restarts = 0;
  let goneSince: number | null = null;
  while (performance.now() < deadline) {
    if (await mariadbAnswers()) return;
    // Died on the way up (e.g. the old one's InnoDB lock lingered): start it again, a few times.
    if (machineServerPids().length === 0) {
      goneSince ??= performance.now();
      if (performance.now() - goneSince > 1000 && restarts < 3) {
        restarts++;
        goneSince = null;
        await start();
      }
    } else {
      goneSince = null;
    }
    await sleep(200);
  }
  throw new Error(`MariaDB did not answer on ${new URL(TEST_MYSQL_URL).host} within the restart's time (see /var/log/mysql/error.log)`);
}

/**
 * Stops the machine's MariaDB cleanly (SIGTERM, waiting for the process to exit so its InnoDB
 * files are free), stays down `downMs`, starts it again and waits until it answers.
 */
export async function restartMariadb(o: { downMs?: number; timeoutMs?: number } = {}): Promise<void> {
  const why = whyNotRestartMariadb();
  if (why !== undefined) throw new Error(why);
  const deadline = performance.now() + (o.timeoutMs ?? 90_000);
  // --pidfile as well as --exec: only the machine's server, never a replica of the same binary.
  const stop = await run('start-stop-daemon', ['--stop', '--oknodo', '--pidfile', PID_FILE, '--exec', DAEMON, '--retry', 'TERM/60/KILL/5'], 70_000);
  if (stop.code !== 0) {
    // Whatever went wrong, leave it running for everyone else.
    await startAndWait(deadline).catch(() => {});
    throw new Error(`start-stop-daemon --stop ${DAEMON} failed (exit ${stop.code}): ${stop.out}`);
  }
  // The pid file named another process, or the stop did not take: do not call that a restart.
  for (let i = 0; i < 50 && machineServerPids().length > 0; i++) await sleep(100);
  if (machineServerPids().length > 0) {
    throw new Error(`${DAEMON} (pid ${machineServerPids().join(', ')}) is still running after start-stop-daemon --stop; ${PID_FILE} may name another process`);
  }
  if ((o.downMs ?? 0) > 0) await sleep(o.downMs ?? 0);
  await startAndWait(deadline);
}

/** Starts the machine's MariaDB if it does not answer (an after() hook's safety net). */
export async function ensureMariadbUp(timeoutMs = 60_000): Promise<void> {
  if (process.getuid?.() !== 0 || (await mariadbAnswers()) || machineServerPids().length > 0) return;
  await startAndWait(performance.now() + timeoutMs);
}
