/**
 * `npx leasehold cron ... &` then `kill $!` signals npx (npm exec), not leasehold: npm exits
 * without passing the signal on, and leasehold, reparented, went on leading for ever. So the
 * long-running commands (`run`, `cron`, `agent`) watch the npm process that launched them and,
 * when it has gone, stop exactly as on SIGTERM: the command gets SIGTERM and its grace, the
 * lease is released, an agent deregisters.
 *
 * What counts as "launched by npm": npm set `npm_command` in our environment, and our parent,
 * or the `sh -c` our parent is (npm runs a bin through a shell), is an npm process by its
 * command line. Anything else (a shell, systemd, a container runtime, a test harness that
 * inherited npm's variables) is left alone: a supervisor that wants leasehold to outlive it can
 * have that. Linux only (it reads /proc); elsewhere nothing is watched. The check is a poll,
 * once a second on an unref'd timer, of npm's /proc entry and its start time, so a reused pid
 * does not count as npm still being there.
 *
 * The launcher is looked up once, when the CLI starts (`rememberLauncher`, called by main.ts
 * before it loads a command), not when the watcher is armed: `cron` arms it only once it has
 * opened its store, and an npm killed before that has already been replaced as our parent by
 * init, so a lookup then would find no npm and watch nothing.
 */
import { readFileSync } from 'node:fs';

const POLL_MS = 1000;

/** The parent pid and start time (clock ticks since boot) of a process, or undefined if it has gone. */
function statOf(pid: number): { ppid: number; start: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields resume after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ppid = Number(fields[1]);
    const start = fields[19];
    return start === undefined || !Number.isInteger(ppid) ? undefined : { ppid, start };
  } catch {
    return undefined;
  }
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    return '';
  }
}

const isNpm = (cmd: string): boolean => /^npm(\s|$)/.test(cmd) || /\bnp[mx]-cli\.js\b/.test(cmd);
const isShell = (cmd: string): boolean => /^(\/\S*\/)?(sh|bash|dash)\s+-c\b/.test(cmd);

/** The npm process that launched this one, if it did (see the file's comment). */
export function npmLauncher(env: NodeJS.ProcessEnv = process.env, ppid = process.ppid): Launcher | undefined {
  if (env['npm_command'] === undefined || process.platform !== 'linux') return undefined;
  let pid = ppid;
  if (isShell(commandLine(pid))) {
    const up = statOf(pid);
    if (up === undefined) return undefined;
    pid = up.ppid;
  }
  if (pid <= 1 || !isNpm(commandLine(pid))) return undefined;
  const stat = statOf(pid);
  return stat === undefined ? undefined : { pid, start: stat.start };
}

type Launcher = { pid: number; start: string };
let remembered: { launcher: Launcher | undefined } | undefined;

/** Look up the npm launcher now, while it is still our parent; the watcher uses this answer. */
export function rememberLauncher(): void {
  remembered ??= { launcher: npmLauncher() };
}

/**
 * When npm launched this process (`npx leasehold ...`, an npm script), stop as on SIGTERM once
 * that npm process has gone. Call it after the command's SIGTERM handler is installed. Returns
 * a function that stops watching (the timer is unref'd, so it never keeps the process alive).
 */
export function stopWhenLauncherExits(what = 'leasehold'): () => void {
  const npm = (remembered ??= { launcher: npmLauncher() }).launcher;
  if (npm === undefined) return () => {};
  const timer = setInterval(() => {
    const now = statOf(npm.pid);
    if (now !== undefined && now.start === npm.start) return;
    clearInterval(timer);
    // Nobody may be reading stderr any more (the terminal went with npm): a failed write must
    // not become an unhandled 'error' that ends the process before the lease is released.
    process.stderr.on('error', () => {});
    if (process.listenerCount('SIGTERM') === 0) return; // the command is already on its way out
    process.stderr.write(`${what}: npm (pid ${npm.pid}), which started this process, has exited; stopping as on SIGTERM\n`);
    process.kill(process.pid, 'SIGTERM');
  }, POLL_MS);
  timer.unref();
  return () => clearInterval(timer);
}
