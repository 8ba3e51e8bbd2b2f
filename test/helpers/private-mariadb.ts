/**
 * A throwaway MariaDB of a test's own on a loopback port, for server settings a test must not
 * change on the machine's shared server (3306): its own data dir under the temp dir, started
 * with `--no-defaults` plus the test's options, killed and removed by `stop()` (or at exit).
 * Needs Debian's mariadb-server binaries, as scripts/services/mariadb-pair.mjs does.
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
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
  stop(): void;
}

/** Installs and starts one server on `port` with `options` (e.g. `--max-allowed-packet=4M`); a database `test` in it. */
export async function startPrivateMariadb(port: number, options: string[]): Promise<PrivateMariadb> {
  const bins = await binaries();
  if (bins === null) throw new Error((await whyNoPrivateMariadb())!);
  const dir = mkdtempSync(join(tmpdir(), `lh-mariadb-${port}-`));
  const data = join(dir, 'data');
  const socket = join(dir, 'mysqld.sock');
  const log = join(dir, 'error.log');
  // As root, the server runs as mysql (a server run as root needs --user=root), owning its files.
  const asRoot = process.getuid?.() === 0;
  const userArgs = asRoot ? ['--user=mysql'] : [];
  if (asRoot) spawnSync('chown', ['mysql', dir]);
  let child: ReturnType<typeof spawn> | undefined;
  const stop = (): void => {
    if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', stop);
  const sql = (statement: string): string => {
    const r = spawnSync(bins.client, ['--no-defaults', '-uroot', `--socket=${socket}`, '-N', '-B', '-e', statement], { encoding: 'utf8', timeout: 30_000 });
    if (r.status !== 0) throw new Error(`${HOST}:${port}: ${statement}: ${(r.stderr || r.error?.message || '').trim()}`);
    return r.stdout.trim();
  };
  try {
    const inst = spawnSync(
      bins.install,
      // --tmpdir here too: mariadb-install-db's bootstrap server clears its tmpdir's #sql* files as well.
      ['--no-defaults', `--datadir=${data}`, `--tmpdir=${dir}`, ...userArgs, '--auth-root-authentication-method=normal', '--skip-test-db', '--skip-name-resolve', '--innodb-log-file-size=16M'],
      { encoding: 'utf8' },
    );
    if (inst.status !== 0) throw new Error(`${bins.install} failed: ${(inst.stderr || inst.stdout).trim().split('\n').slice(-5).join('\n')}`);
    const out = openSync(join(dir, 'server.out'), 'a');
    child = spawn(
      bins.server,
      [
        '--no-defaults',
        `--datadir=${data}`,
        ...userArgs,
        `--port=${port}`,
        `--bind-address=${HOST}`,
        `--socket=${socket}`,
        `--pid-file=${join(dir, 'server.pid')}`,
        `--log-error=${log}`,
        // Its own temporary directory: a server starting removes every #sql* file in its tmpdir,
        // and the machine's MariaDB keeps its internal temporary tables in /tmp (CI: the shared
        // server's releaseMany failed "Error on delete of '/tmp/#sql-temptable-...MAI'" just after
        // this private server started beside it).
        `--tmpdir=${dir}`,
        '--skip-name-resolve',
        '--innodb-buffer-pool-size=32M',
        '--innodb-log-file-size=16M',
        '--performance-schema=OFF',
        ...options,
      ],
      { detached: true, stdio: ['ignore', out, out] },
    );
    closeSync(out);
    child.unref();
    const deadline = performance.now() + 30_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the private MariaDB on ${port} exited before it answered:\n${tail(log)}`);
      try {
        sql('SELECT 1');
        break;
      } catch (err) {
        if (performance.now() > deadline) throw new Error(`the private MariaDB on ${port} did not answer within 30s:\n${tail(log)}`, { cause: err });
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    sql('CREATE DATABASE test');
  } catch (err) {
    stop();
    process.off('exit', stop);
    throw err;
  }
  return {
    url: `mysql://root@${HOST}:${port}/test`,
    sql,
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
