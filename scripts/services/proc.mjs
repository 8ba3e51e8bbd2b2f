// Process helpers shared by the scripts that start servers for the tests (etcd, an etcd cluster,
// PgBouncer, TLS servers): a pid file, "is this pid still the process we started", and stopping it.
import { readFileSync } from 'node:fs';

/** The pid recorded in `file`, or null. */
export function readPid(file) {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

/**
 * The command line of `pid` when it is alive (a stopped process counts) and not a zombie; null
 * otherwise. Pids are reused: callers check that it still names what they started.
 */
export function commandLine(pid) {
  try {
    if (/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))) return null;
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return null;
  }
}

/**
 * SIGTERM, then SIGKILL after `timeoutMs`, and waits until `gone()` (the pid no longer being the
 * process we started). `cont`: SIGCONT first, since a frozen process cannot act on SIGTERM.
 */
export async function killPid(pid, gone, { timeoutMs = 5000, cont = false } = {}) {
  try {
    if (cont) process.kill(pid, 'SIGCONT');
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (gone()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  while (!gone()) await new Promise((r) => setTimeout(r, 50));
}
