/**
 * Liveness 'session' on SQLite (issue 32; docs/liveness.md has the safety argument). SQLite has
 * no connections a server could see end, but every process that opens the file is on one host,
 * so the holder's *process* is the session: the claim records it with the term (pid, its start
 * time from /proc/<pid>/stat, so that a reused pid is not taken for the holder, the boot id and
 * the pid namespace, so that a process of another boot, container or host is never judged by a
 * pid table that is not its own), and a contender's claim ends a live term whose recorded
 * process is gone (or a zombie) as a revocation ends one. Followers look at the holder's
 * /proc entry every POLL_MS, a stat of a procfs file (no database read), and claim once it is gone.
 *
 * Refused where the process table cannot be read (/proc missing: not Linux, or hidden), and when
 * the database file is on a network filesystem: there two hosts may share the file, and the pid
 * namespace and boot id tell them apart only if every host has its own boot id, which a
 * network filesystem makes no promise of either way; SQLite's locking is not safe there anyway.
 */
import { readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { dirname } from 'node:path';
import { LivenessError } from '../../core/errors.js';
import type { CallOptions, LeaseSession, ReleaseRequest } from '../../core/port.js';

export const SESSION_ENDED_DETAIL = "the holder's process ended (liveness: session): it is no longer running on this host";

/** How often a follower looks at the holder's /proc entry. */
const POLL_MS = 20;

/** Filesystems whose files other hosts can open. */
const NETWORK_FS = /^(nfs4?|cifs|smb3?|smbfs|9p|ceph|glusterfs|lustre|afs|ncpfs|fuse\.sshfs|fuse\.s3fs|fuse\.glusterfs|fuse\.ceph|gpfs|beegfs|virtiofs)$/;

/** One process, as the claim records it. */
interface ProcessIdentity {
  pid: number;
  /** Field 22 of /proc/<pid>/stat: clock ticks after boot at which the process started. */
  start: string;
  boot: string;
  pidns: string;
}

/**
 * A process's start time, or undefined when it is not running: no /proc entry, or a zombie
 * (killed, not yet reaped by its parent: its /proc entry stays, and it holds nothing).
 */
export function processStart(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces or ')': fields after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const state = rest[0];
  if (state === 'Z' || state === 'X' || state === 'x') return undefined;
  return rest[19];
}

let self: ProcessIdentity | undefined;

/**
 * This process, for the claim to record.
 * @throws {LivenessError} (`unsupported`) /proc cannot be read
 */
export function thisProcess(): ProcessIdentity {
  if (self !== undefined && self.pid === process.pid) return self;
  try {
    const start = processStart(process.pid);
    if (start === undefined) throw new Error(`/proc/${process.pid}/stat has no start time`);
    self = {
      pid: process.pid,
      start,
      boot: readFileSync('/proc/sys/kernel/random/boot_id', 'latin1').trim(),
      pidns: readlinkSync('/proc/self/ns/pid'),
    };
    return self;
  } catch (err) {
    throw new LivenessError(
      'unsupported',
      "liveness 'session' on SQLite needs /proc (Linux): the claim records the holder's pid and its start time, and a contender checks that process; " +
        `this process cannot read them (${(err as Error).message}). Use liveness 'ttl' (the default) here`,
      { cause: err },
    );
  }
}

/** The filesystem type of the mount a path is on (/proc/self/mountinfo), or undefined. */
export function filesystemOf(path: string): string | undefined {
  let real: string;
  try {
    real = realpathSync(path);
  } catch {
    try {
      real = realpathSync(dirname(path));
    } catch {
      return undefined;
    }
  }
  let best: { at: string; type: string } | undefined;
  try {
    for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
      const [left, right] = line.split(' - ');
      if (left === undefined || right === undefined) continue;
      const at = (left.split(' ')[4] ?? '').replace(/\\040/g, ' ');
      if (!(real === at || real.startsWith(at.endsWith('/') ? at : `${at}/`))) continue;
      // Later lines mount over earlier ones at the same point.
      if (best === undefined || at.length >= best.at.length) best = { at, type: right.split(' ')[0] ?? '' };
    }
  } catch {
    return undefined;
  }
  return best?.type;
}

export function encodeSession(p: ProcessIdentity): string {
  return `${p.pid}:${p.start}:${p.boot}:${p.pidns}`;
}

export function decodeSession(s: string): ProcessIdentity | undefined {
  const m = /^(\d+):(\d+):([^:]+):(.+)$/.exec(s);
  return m === null ? undefined : { pid: Number(m[1]), start: m[2]!, boot: m[3]!, pidns: m[4]! };
}

/**
 * Whether a recorded holder is known to be gone: on this boot and in this pid namespace (else
 * nothing is known, and the term runs to its expiry), and no process of that pid with that start time.
 */
export function holderGone(recorded: ProcessIdentity): boolean {
  const me = thisProcess();
  if (recorded.boot !== me.boot || recorded.pidns !== me.pidns) return false;
  return processStart(recorded.pid) !== recorded.start;
}

interface SessionEnv {
  /** The process recorded with the lease's current live term, if any. */
  holderOf(name: string): ProcessIdentity | undefined;
  release(req: ReleaseRequest, options?: CallOptions): Promise<boolean>;
}

export class SqliteLeaseSession implements LeaseSession {
  readonly id: string;
  private _ended = false;
  /** The latest wait: an earlier one stops looking. */
  private gen = 0;
  /** A wait saw the recorded holder's process gone. */
  private granted = false;

  private constructor(
    private readonly env: SessionEnv,
    private readonly name: string,
  ) {
    this.id = encodeSession(thisProcess());
  }

  /** @throws {LivenessError} (`unsupported`) no /proc, or the file is on a network filesystem */
  static open(env: SessionEnv, path: string, name: string): SqliteLeaseSession {
    thisProcess();
    const fs = path === ':memory:' || path === '' ? undefined : filesystemOf(path);
    if (fs !== undefined && NETWORK_FS.test(fs)) {
      throw new LivenessError(
        'unsupported',
        `liveness 'session' refused for lease "${name}": the SQLite file ${path} is on a network filesystem (${fs}), which processes on other hosts can open, ` +
          "and a pid names a process on one host only. Use liveness 'ttl' (the default), or a server store (PostgreSQL, MySQL)",
      );
    }
    return new SqliteLeaseSession(env, name);
  }

  get ended(): boolean {
    return this._ended;
  }

  get holdsLock(): boolean {
    return this.granted && !this._ended;
  }

  /** A process cannot outlive itself: the session ends only when closed. */
  onEnd(): void {}

  waitForLock(ms: number): Promise<void> {
    if (this._ended) return new Promise<void>(() => {});
    const gen = ++this.gen;
    return new Promise<void>((resolve) => {
      const until = performance.now() + ms;
      let holder: ProcessIdentity | undefined;
      const look = (): void => {
        if (this._ended || gen !== this.gen || performance.now() >= until) return; // never resolves: the other wake-ups decide
        try {
          holder ??= this.env.holderOf(this.name);
          if (holder !== undefined && holderGone(holder)) {
            this.granted = true;
            resolve();
            return;
          }
        } catch {
          // The store is busy or closed: looked at again below, or the wait ends.
        }
        // A term tied to no process (liveness 'ttl', or none): read the row again now and then.
        setTimeout(look, holder === undefined ? 1000 : POLL_MS).unref();
      };
      look();
    });
  }

  async release(req: ReleaseRequest, options?: CallOptions): Promise<boolean> {
    this._ended = true;
    return this.env.release(req, options);
  }

  close(): Promise<void> {
    this._ended = true;
    return Promise.resolve();
  }
}
