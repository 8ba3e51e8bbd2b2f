/**
 * A throwaway MariaDB of a test's own on a loopback port, for server settings a test must not
 * change on the machine's shared server (3306): its own data dir under the temp dir, started
 * with `--no-defaults` plus the test's options, killed and removed by `stop()` (or at exit).
 * Its directory is named after its port, so that another process can restart it by the port.
 * Needs Debian's mariadb-server binaries, as scripts/services/mariadb-pair.mjs does.
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const HOST = '127.0.0.1';

interface Binaries {
  server: string;
  install: string;
  client: string;
}

async function binaries(): Promise<Binaries | null> {
  const pair = (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'mariadb-pair.mjs')).href)) as { mariadbBinaries(): Binaries | null };
  return pair.mariadbBinaries();
}

/** Why a private MariaDB cannot be started here, or undefined when it can. */
export async function whyNoPrivateMariadb(): Promise<string | undefined> {
  return (await binaries()) === null ? 'needs mariadbd, mariadb-install-db and the mariadb client (apt-get install mariadb-server)' : undefined;
}

export interface PrivateMariadb {
  /** `mysql://root@127.0.0.1:<port>/test` */
  url: string;
  /** One statement as root over the server's socket. */
  sql(statement: string): string;
  /** A clean shutdown, `downMs` down, and a start on the same data (restartPrivateMariadb). */
  restart(downMs?: number): Promise<void>;
  stop(): void;
}

/** Where the server on `port` keeps everything: one directory per port, so that another process can restart it. */
function layout(port: number): { dir: string; data: string; socket: string; log: string; pid: string; launch: string } {
  const dir = join(tmpdir(), `lh-mariadb-${port}`);
  return { dir, data: join(dir, 'data'), socket: join(dir, 'mysqld.sock'), log: join(dir, 'error.log'), pid: join(dir, 'server.pid'), launch: join(dir, 'launch.json') };
}

/** One statement as root over the socket of the server on `port`. */
function sqlOn(client: string, port: number, statement: string): string {
  const r = spawnSync(client, ['--no-defaults', '-uroot', `--socket=${layout(port).socket}`, '-N', '-B', '-e', statement], { encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`${HOST}:${port}: ${statement}: ${(r.stderr || r.error?.message || '').trim()}`);
  return r.stdout.trim();
}

/** The server's pid from its pid file, or null when it has none (stopped, or never started). */
function serverPid(port: number): number | null {
  try {
    const pid = Number(readFileSync(layout(port).pid, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Starts the server on `port` as launch.json says (a fresh start or a restart) and waits until it answers. */
async function launch(port: number): Promise<void> {
  const l = layout(port);
  const { server, client, args } = JSON.parse(readFileSync(l.launch, 'utf8')) as { server: string; client: string; args: string[] };
  const out = openSync(join(l.dir, 'server.out'), 'a');
  const child = spawn(server, args, { detached: true, stdio: ['ignore', out, out] });
  closeSync(out);
  child.unref();
  const deadline = performance.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the private MariaDB on ${port} exited before it answered:\n${tail(l.log)}`);
    try {
      sqlOn(client, port, 'SELECT 1');
      return;
    } catch (err) {
      if (performance.now() > deadline) throw new Error(`the private MariaDB on ${port} did not answer within 30s:\n${tail(l.log)}`, { cause: err });
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Whether startPrivateMariadb started a server on `port` that is still set up there. */
export function isPrivateMariadb(port: number): boolean {
  return existsSync(layout(port).launch);
}

/**
 * Shuts the server on `port` down cleanly (SIGTERM, as start-stop-daemon --stop does), keeps it
 * down for `downMs`, and starts it again on the same data: from any process, found by its port
 * (the chaos harness's nemesis restarts a run's own server this way).
 */
export async function restartPrivateMariadb(port: number, downMs = 0, timeoutMs = 60_000): Promise<void> {
  if (!isPrivateMariadb(port)) throw new Error(`no private MariaDB on ${port} (${layout(port).dir})`);
  const pid = serverPid(port);
  if (pid !== null && alive(pid)) {
    process.kill(pid, 'SIGTERM');
    const deadline = performance.now() + timeoutMs;
    // Down when its pid file is gone (a clean shutdown removes it) or the process is.
    while (serverPid(port) !== null && alive(pid)) {
      if (performance.now() > deadline) throw new Error(`the private MariaDB on ${port} did not shut down within ${timeoutMs}ms:\n${tail(layout(port).log)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  await new Promise((r) => setTimeout(r, downMs));
  await launch(port);
}

function stopOn(port: number): void {
  const pid = serverPid(port);
  if (pid !== null && alive(pid)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  rmSync(layout(port).dir, { recursive: true, force: true });
}

/** Installs and starts one server on `port` with `options` (e.g. `--max-allowed-packet=4M`); a database `test` in it. */
export async function startPrivateMariadb(port: number, options: string[]): Promise<PrivateMariadb> {
  const bins = await binaries();
  if (bins === null) throw new Error((await whyNoPrivateMariadb())!);
  // Whatever an earlier run left on this port (killed before its stop) goes first.
  stopOn(port);
  const l = layout(port);
  mkdirSync(l.dir, { recursive: true });
  // As root, the server runs as mysql (a server run as root needs --user=root), owning its files.
  const asRoot = process.getuid?.() === 0;
  const userArgs = asRoot ? ['--user=mysql'] : [];
  if (asRoot) spawnSync('chown', ['mysql', l.dir]);
  const stop = (): void => stopOn(port);
  process.once('exit', stop);
  const sql = (statement: string): string => sqlOn(bins.client, port, statement);
  try {
    const inst = spawnSync(
      bins.install,
      // --tmpdir here too: mariadb-install-db's bootstrap server clears its tmpdir's #sql* files as well.
      ['--no-defaults', `--datadir=${l.data}`, `--tmpdir=${l.dir}`, ...userArgs, '--auth-root-authentication-method=normal', '--skip-test-db', '--skip-name-resolve', '--innodb-log-file-size=16M'],
      { encoding: 'utf8' },
    );
    if (inst.status !== 0) throw new Error(`${bins.install} failed: ${(inst.stderr || inst.stdout).trim().split('\n').slice(-5).join('\n')}`);
    const args = [
      '--no-defaults',
      `--datadir=${l.data}`,
      ...userArgs,
      `--port=${port}`,
      `--bind-address=${HOST}`,
      `--socket=${l.socket}`,
      `--pid-file=${l.pid}`,
      `--log-error=${l.log}`,
      // Its own temporary directory: a server starting removes every #sql* file in its tmpdir,
      // and the machine's MariaDB keeps its internal temporary tables in /tmp (CI: the shared
      // server's releaseMany failed "Error on delete of '/tmp/#sql-temptable-...MAI'" just after
      // this private server started beside it).
      `--tmpdir=${l.dir}`,
      '--skip-name-resolve',
      '--innodb-buffer-pool-size=32M',
      '--innodb-log-file-size=16M',
      '--performance-schema=OFF',
      ...options,
    ];
    writeFileSync(l.launch, JSON.stringify({ server: bins.server, client: bins.client, args }));
    await launch(port);
    sql('CREATE DATABASE test');
  } catch (err) {
    stop();
    process.off('exit', stop);
    throw err;
  }
  return {
    url: `mysql://root@${HOST}:${port}/test`,
    sql,
    restart: (downMs = 0) => restartPrivateMariadb(port, downMs),
    stop: () => {
      stop();
      process.off('exit', stop);
    },
  };
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-10).join('\n');
  } catch {
    return '(no log)';
  }
}
