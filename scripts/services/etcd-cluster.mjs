#!/usr/bin/env node
// A throwaway three-member etcd cluster on loopback, for topology tests (one member killed,
// frozen or restarted while a lease is held) and for trying leasehold against a real cluster.
//
//   node scripts/services/etcd-cluster.mjs start [basePort]   three members (default base 24379:
//                                                             clients 24379, 24479, 24579; peers +1)
//   node scripts/services/etcd-cluster.mjs stop [basePort]    stop them, remove their data
//   node scripts/services/etcd-cluster.mjs status [basePort]  each member's health and the leader
//
// Or from a test:
//   const c = await startEtcdCluster({ basePort: 24379, log });
//   c.url                              etcd://127.0.0.1:24379,127.0.0.1:24479,127.0.0.1:24579
//   await c.leader()                   the member that leads now
//   c.members[i].signal('SIGSTOP')     freeze one (SIGCONT thaws it), or SIGKILL it
//   await c.members[i].restart()       start a killed member again on its data dir
//   await c.stop()
//
// State (pids, data dirs, logs) lives under os.tmpdir()/leasehold-etcd-cluster-<basePort>/. Stop
// only ever kills pids recorded there that are still an etcd on that data dir (pids get reused).
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { commandLine, killPid, readPid } from './proc.mjs';

const HOST = '127.0.0.1';
const SIZE = 3;
const silent = () => {};

function etcdBinary() {
  for (const p of ['/usr/bin/etcd', '/usr/local/bin/etcd']) if (existsSync(p)) return p;
  const r = spawnSync('sh', ['-c', 'command -v etcd'], { encoding: 'utf8' });
  const found = r.stdout.trim();
  if (r.status === 0 && found !== '') return found;
  throw new Error('no etcd binary: install etcd-server (apt-get install etcd-server), or run scripts/services/etcd.mjs start once, which does');
}

function layout(basePort) {
  const dir = join(tmpdir(), `leasehold-etcd-cluster-${basePort}`);
  const members = Array.from({ length: SIZE }, (_, i) => {
    const name = `m${i}`;
    const clientPort = basePort + 100 * i;
    return {
      name,
      clientPort,
      clientUrl: `http://${HOST}:${clientPort}`,
      peerUrl: `http://${HOST}:${clientPort + 1}`,
      dataDir: join(dir, `${name}.data`),
      pidFile: join(dir, `${name}.pid`),
      logFile: join(dir, `${name}.log`),
    };
  });
  return { dir, members, initialCluster: members.map((m) => `${m.name}=${m.peerUrl}`).join(',') };
}

/** Still an etcd on this member's data dir (pids are reused). */
function isOurs(pid, dataDir) {
  const cmdline = commandLine(pid);
  return cmdline !== null && cmdline.some((a) => a.endsWith('etcd')) && cmdline.includes(dataDir);
}

function tail(file, lines = 15) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** etcd's own view: { id, leader } (member ids as decimal strings), or null if it does not answer. */
async function memberStatus(m, timeoutMs = 500) {
  try {
    const res = await fetch(`${m.clientUrl}/v3/maintenance/status`, { method: 'POST', body: '{}', signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) return null;
    const body = await res.json();
    return { id: String(body.header?.member_id ?? ''), leader: String(body.leader ?? '') };
  } catch {
    return null;
  }
}

function spawnMember(bin, m, initialCluster, token, log) {
  mkdirSync(join(m.dataDir, '..'), { recursive: true });
  const out = openSync(m.logFile, 'a');
  // Heartbeat and election timeout stay at etcd's defaults (100ms, 1s): the failover times
  // measured against this cluster are the ones a default production cluster has.
  const args = [
    '--name', m.name,
    '--data-dir', m.dataDir,
    '--listen-client-urls', m.clientUrl,
    '--advertise-client-urls', m.clientUrl,
    '--listen-peer-urls', m.peerUrl,
    '--initial-advertise-peer-urls', m.peerUrl,
    '--initial-cluster', initialCluster,
    '--initial-cluster-state', 'new',
    '--initial-cluster-token', token,
    '--logger', 'zap',
    '--log-level', 'warn',
  ];
  const child = spawn(bin, args, { detached: true, stdio: ['ignore', out, out] });
  closeSync(out);
  child.unref();
  if (child.pid === undefined) throw new Error(`could not start etcd member ${m.name}; see ${m.logFile}`);
  writeFileSync(m.pidFile, `${child.pid}\n`);
  log(`[etcd-cluster] ${m.name} pid ${child.pid} on ${m.clientUrl}`);
  return child.pid;
}


/** Stops every member recorded under basePort's state dir and removes the data. */
export async function stopEtcdCluster({ basePort = 24379, log = silent } = {}) {
  const { dir, members } = layout(basePort);
  for (const m of members) {
    const pid = readPid(m.pidFile);
    if (pid !== null && isOurs(pid, m.dataDir)) {
      log(`[etcd-cluster] stopping ${m.name} (pid ${pid})`);
      await killPid(pid, () => !isOurs(pid, m.dataDir), { cont: true });
    }
  }
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Starts a fresh three-member cluster (stopping a previous one on the same ports first) and
 * waits until every member answers and they agree on a leader.
 */
export async function startEtcdCluster({ basePort = 24379, log = silent, timeoutMs = 30_000 } = {}) {
  const bin = etcdBinary();
  await stopEtcdCluster({ basePort, log });
  const { members: specs, initialCluster } = layout(basePort);
  const token = `leasehold-cluster-${basePort}-${Date.now()}`;
  const members = specs.map((m) => {
    const member = {
      name: m.name,
      clientUrl: m.clientUrl,
      endpoint: `${HOST}:${m.clientPort}`,
      pid: spawnMember(bin, m, initialCluster, token, log),
      /** SIGKILL, SIGSTOP, SIGCONT, SIGTERM: to this member only. */
      signal(sig) {
        process.kill(member.pid, sig);
      },
      /** Starts a killed member again on its data dir: it rejoins with what it had. */
      async restart() {
        if (isOurs(member.pid, m.dataDir)) await killPid(member.pid, () => !isOurs(member.pid, m.dataDir), { cont: true });
        member.pid = spawnMember(bin, m, initialCluster, token, log);
      },
      alive: () => isOurs(member.pid, m.dataDir),
      status: () => memberStatus(m),
    };
    return member;
  });
  const cluster = {
    url: `etcd://${members.map((m) => m.endpoint).join(',')}`,
    members,
    /** The member every answering member names as leader, or null while there is none. */
    async leader() {
      const seen = (await Promise.all(members.map((m) => m.status()))).filter((s) => s !== null);
      const ids = new Set(seen.map((s) => s.leader).filter((l) => l !== '0' && l !== ''));
      if (ids.size !== 1) return null;
      const [id] = ids;
      const i = (await Promise.all(members.map((m) => m.status()))).findIndex((s) => s?.id === id);
      return i < 0 ? null : members[i];
    },
    /** Waits until the members that are up agree on a leader (and it answers). */
    async waitForLeader(ms = timeoutMs) {
      const end = Date.now() + ms;
      while (Date.now() < end) {
        const l = await cluster.leader();
        if (l !== null) return l;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`the etcd cluster on ${basePort} has no leader after ${ms}ms; logs:\n${specs.map((m) => `${m.name}: ${tail(m.logFile, 5)}`).join('\n')}`);
    },
    stop: () => stopEtcdCluster({ basePort, log }),
  };
  await cluster.waitForLeader();
  log(`[etcd-cluster] ready: ${cluster.url}`);
  return cluster;
}

async function main(cmd, port) {
  const basePort = port === undefined ? 24379 : Number(port);
  const log = (m) => console.log(m);
  switch (cmd) {
    case 'start': {
      const c = await startEtcdCluster({ basePort, log });
      console.log(c.url);
      return;
    }
    case 'stop':
      await stopEtcdCluster({ basePort, log });
      return;
    case 'status': {
      const { members } = layout(basePort);
      let ok = 0;
      for (const m of members) {
        const s = await memberStatus(m);
        if (s !== null) ok++;
        console.log(`${m.name} ${m.clientUrl}: ${s === null ? 'not answering' : s.id === s.leader ? 'leader' : 'follower'}`);
      }
      process.exitCode = ok === members.length ? 0 : 1;
      return;
    }
    default:
      console.error('usage: node scripts/services/etcd-cluster.mjs start|stop|status [basePort]');
      process.exitCode = 2;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2], process.argv[3]).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
