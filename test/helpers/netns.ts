/**
 * A network namespace joined to the host by a veth pair, for partition tests: a process started
 * in it reaches the host only through the pair, and `partition()` drops every packet between the
 * two ends, both ways, with iptables inside the namespace (the host's own rules are never
 * touched). Addresses are a /30 of 10.0.0.0/8 the caller picks; they exist only on the pair.
 * Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), `ip` and `iptables`.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';

export interface Netns {
  name: string;
  /** The host's end of the pair: what a process in the namespace connects to. */
  hostAddr: string;
  nsAddr: string;
  /** Starts `cmd args` inside the namespace. */
  spawn(cmd: string, args: string[], options?: Parameters<typeof spawn>[2]): ChildProcess;
  /** Drops every packet between the namespace and the host, both ways. */
  partition(): void;
  heal(): void;
  destroy(): void;
}

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Why a namespace cannot be made here, or null. Tries one (and removes it). */
export function whyNoNetns(): string | null {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'not root: network namespaces and iptables need CAP_NET_ADMIN';
  if (!['/usr/sbin/ip', '/sbin/ip', '/usr/bin/ip'].some((p) => existsSync(p))) return 'no `ip` (iproute2)';
  if (!['/usr/sbin/iptables', '/sbin/iptables', '/usr/bin/iptables'].some((p) => existsSync(p))) return 'no iptables (apt-get install iptables)';
  const probe = `lhprobe${randomBytes(3).toString('hex')}`;
  const add = spawnSync('ip', ['netns', 'add', probe], { encoding: 'utf8' });
  if (add.status !== 0) return `ip netns add failed: ${add.stderr.trim()}`;
  const ipt = spawnSync('ip', ['netns', 'exec', probe, 'iptables', '-L', 'OUTPUT', '-n'], { encoding: 'utf8' });
  spawnSync('ip', ['netns', 'del', probe]);
  if (ipt.status !== 0) return `iptables in a namespace failed: ${ipt.stderr.trim()}`;
  return null;
}

/** A namespace `lh<tag>` with veth `lh<tag>h` (host, hostAddr/30) and `lh<tag>n` (namespace, nsAddr/30). */
export function createNetns(hostAddr: string, nsAddr: string): Netns {
  const tag = randomBytes(3).toString('hex');
  const name = `lh${tag}`;
  const [h, n] = [`lh${tag}h`, `lh${tag}n`];
  const inNs = (args: string[]): string => sh('ip', ['netns', 'exec', name, ...args]);
  const destroy = (): void => {
    spawnSync('ip', ['link', 'del', h]);
    spawnSync('ip', ['netns', 'del', name]);
  };
  try {
    sh('ip', ['netns', 'add', name]);
    sh('ip', ['link', 'add', h, 'type', 'veth', 'peer', 'name', n]);
    sh('ip', ['link', 'set', n, 'netns', name]);
    sh('ip', ['addr', 'add', `${hostAddr}/30`, 'dev', h]);
    sh('ip', ['link', 'set', h, 'up']);
    inNs(['ip', 'addr', 'add', `${nsAddr}/30`, 'dev', n]);
    inNs(['ip', 'link', 'set', n, 'up']);
    inNs(['ip', 'link', 'set', 'lo', 'up']);
  } catch (err) {
    destroy();
    throw err;
  }
  return {
    name,
    hostAddr,
    nsAddr,
    spawn: (cmd, args, options = {}) => spawn('ip', ['netns', 'exec', name, cmd, ...args], options),
    partition() {
      inNs(['iptables', '-A', 'OUTPUT', '-d', hostAddr, '-j', 'DROP']);
      inNs(['iptables', '-A', 'INPUT', '-s', hostAddr, '-j', 'DROP']);
    },
    heal() {
      inNs(['iptables', '-F']);
    },
    destroy,
  };
}
