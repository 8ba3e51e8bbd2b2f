#!/usr/bin/env node
// A throwaway Redis Sentinel set-up on loopback: a primary, one replica and three Sentinels
// (quorum 2), for test/topologies/redis-sentinel.test.ts and for trying leasehold by hand.
//
//   node scripts/services/redis-sentinel.mjs start [basePort]   default 26400 (env LEASEHOLD_TEST_REDIS_SENTINEL_PORT):
//                                                              primary +0, replica +1, Sentinels +10, +11, +12
//   node scripts/services/redis-sentinel.mjs stop [basePort]    stop them all, remove their files
//   node scripts/services/redis-sentinel.mjs status [basePort]  the primary the Sentinels name, each server's role
//   node scripts/services/redis-sentinel.mjs failover [basePort]  SENTINEL FAILOVER mymaster
//
// Or from a test:
//   const s = await startRedisSentinel({ basePort: 26400, log });
//   s.url                          redis+sentinel://127.0.0.1:26410,127.0.0.1:26411,127.0.0.1:26412/mymaster
//   await s.primary()              the server the Sentinels name as primary now ({ name, port, url, ... })
//   s.servers[i].signal('SIGSTOP') freeze one (SIGCONT thaws it), or SIGKILL it; await s.servers[i].restart()
//   await s.failover()             SENTINEL FAILOVER mymaster: a clean, Sentinel-driven switch
//   await s.waitForPrimary({ not: port })   until the Sentinels name another server, and it says it is primary
//   await s.stop()
//   startRedisSentinel({ basePort, tls: certs })  the same over TLS only (certs from tls.mjs makeCerts;
//                                  s.url is then rediss+sentinel://, without the ?cacert=&cert=&key= to add)
//   startRedisSentinel({ basePort, minReplicasMaxLag: 1 })  servers with min-replicas-to-write 1 (lag 1s)
//
// Sentinel timeouts are short (down after 1s, failover timeout 3s) so a failover takes seconds.
// State (configs, pids, logs) lives under os.tmpdir()/leasehold-redis-sentinel-<basePort>/. Stop
// only ever kills pids recorded there that are still a redis-server on that port (pids get reused).
import { execFile, spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { commandLine, killPid, readPid } from './proc.mjs';

const HOST = '127.0.0.1';
const MASTER = 'mymaster';
const DEFAULT_BASE = Number(process.env.LEASEHOLD_TEST_REDIS_SENTINEL_PORT ?? 26400);
const silent = () => {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function redisBinaries() {
  const server = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => existsSync(p));
  const cli = ['/usr/bin/redis-cli', '/usr/local/bin/redis-cli'].find((p) => existsSync(p));
  return server === undefined || cli === undefined ? null : { server, cli };
}

function layout(basePort) {
  const dir = join(tmpdir(), `leasehold-redis-sentinel-${basePort}`);
  const node = (name, port, kind) => ({
    name,
    port,
    kind,
    conf: join(dir, `${name}.conf`),
    pidFile: join(dir, `${name}.pid`),
    logFile: join(dir, `${name}.log`),
  });
  return {
    dir,
    servers: [node('r0', basePort, 'server'), node('r1', basePort + 1, 'server')],
    sentinels: [0, 1, 2].map((i) => node(`s${i}`, basePort + 10 + i, 'sentinel')),
  };
}

/** Still a redis-server on this port (it rewrites its title to "redis-server 127.0.0.1:<port>"). */
function isOurs(pid, port) {
  const cmd = commandLine(pid);
  return cmd !== null && cmd.join(' ').includes('redis-server') && cmd.join(' ').includes(`:${port}`);
}

function tail(file, lines = 10) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** redis-cli's TLS flags for `certs` (from tls.mjs makeCerts), or none. */
function tlsFlags(certs) {
  return certs === undefined ? [] : ['--tls', '--cacert', certs.ca, '--cert', certs.clientCert, '--key', certs.clientKey];
}

/** One redis-cli command; its trimmed output, or null when the server does not answer in time. */
export function cliCommand(port, args, timeoutMs = 1000, certs = undefined) {
  const bin = redisBinaries()?.cli ?? 'redis-cli';
  return new Promise((resolve) => {
    execFile(bin, ['-h', HOST, '-p', String(port), ...tlsFlags(certs), '--raw', ...args], { timeout: timeoutMs }, (err, stdout) => {
      resolve(err ? null : stdout.trim());
    });
  });
}

/** `SENTINEL master` and INFO both answer as key/value lines. */
function fields(text, sep) {
  const out = {};
  if (text === null) return out;
  const lines = text.split(/\r?\n/);
  if (sep === 'pairs') for (let i = 0; i + 1 < lines.length; i += 2) out[lines[i]] = lines[i + 1];
  else for (const l of lines) if (l.includes(':')) out[l.slice(0, l.indexOf(':'))] = l.slice(l.indexOf(':') + 1);
  return out;
}

function spawnNode(bin, n, log) {
  const out = openSync(n.logFile, 'a');
  const args = n.kind === 'sentinel' ? [n.conf, '--sentinel'] : [n.conf];
  const child = spawn(bin, args, { detached: true, stdio: ['ignore', out, out] });
  closeSync(out);
  child.unref();
  if (child.pid === undefined) throw new Error(`could not start ${n.name}; see ${n.logFile}`);
  writeFileSync(n.pidFile, `${child.pid}\n`);
  log(`[redis-sentinel] ${n.name} pid ${child.pid} on ${HOST}:${n.port}`);
  return child.pid;
}

/** With certs: only a TLS port, TLS to replicate and to talk to the servers (Sentinels), client certificates optional. */
function tlsConf(n, certs) {
  if (certs === undefined) return [`port ${n.port}`];
  return [
    'port 0',
    `tls-port ${n.port}`,
    `tls-cert-file ${certs.serverCert}`,
    `tls-key-file ${certs.serverKey}`,
    `tls-ca-cert-file ${certs.ca}`,
    'tls-auth-clients optional',
    'tls-replication yes',
  ];
}

function serverConf(n, dir, replicaOf, certs, minReplicasMaxLag) {
  return [
    ...tlsConf(n, certs),
    // Redis' own guard against a primary cut off from its replicas: refuse writes (NOREPLICAS)
    // unless a replica acknowledged within the lag. Off unless asked for.
    ...(minReplicasMaxLag === undefined ? [] : ['min-replicas-to-write 1', `min-replicas-max-lag ${minReplicasMaxLag}`]),
    `bind ${HOST}`,
    'protected-mode no',
    'daemonize no',
    `dir ${dir}`,
    `dbfilename ${n.name}.rdb`,
    'save ""',
    'appendonly no',
    'repl-diskless-sync yes',
    'repl-diskless-sync-delay 0',
    ...(replicaOf === undefined ? [] : [`replicaof ${HOST} ${replicaOf}`]),
    '',
  ].join('\n');
}

function sentinelConf(n, dir, primaryPort, certs) {
  return [
    ...tlsConf(n, certs),
    `bind ${HOST}`,
    'protected-mode no',
    'daemonize no',
    `dir ${dir}`,
    `sentinel monitor ${MASTER} ${HOST} ${primaryPort} 2`,
    `sentinel down-after-milliseconds ${MASTER} 1000`,
    `sentinel failover-timeout ${MASTER} 3000`,
    `sentinel parallel-syncs ${MASTER} 1`,
    '',
  ].join('\n');
}

/** Stops every process recorded under basePort's state dir and removes the files. Idempotent. */
export async function stopRedisSentinel({ basePort = DEFAULT_BASE, log = silent } = {}) {
  const { dir, servers, sentinels } = layout(basePort);
  for (const n of [...sentinels, ...servers]) {
    const pid = readPid(n.pidFile);
    if (pid !== null && isOurs(pid, n.port)) {
      log(`[redis-sentinel] stopping ${n.name} (pid ${pid})`);
      await killPid(pid, () => !isOurs(pid, n.port), { cont: true, timeoutMs: 2000 });
    }
  }
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Starts a fresh primary, replica and three Sentinels (stopping a previous set on the same ports
 * first) and waits until the replica is in sync and every Sentinel knows the replica and the two
 * other Sentinels (before that, a failover cannot be agreed).
 */
export async function startRedisSentinel({ basePort = DEFAULT_BASE, log = silent, timeoutMs = 30_000, tls = undefined, minReplicasMaxLag = undefined } = {}) {
  const cli = (port, args, ms) => cliCommand(port, args, ms, tls);
  const bins = redisBinaries();
  if (bins === null) throw new Error('no redis-server / redis-cli: apt-get install redis-server');
  await stopRedisSentinel({ basePort, log });
  const { dir, servers: specs, sentinels: sentinelSpecs } = layout(basePort);
  mkdirSync(dir, { recursive: true });
  writeFileSync(specs[0].conf, serverConf(specs[0], dir, undefined, tls, minReplicasMaxLag));
  writeFileSync(specs[1].conf, serverConf(specs[1], dir, specs[0].port, tls, minReplicasMaxLag));
  for (const s of sentinelSpecs) writeFileSync(s.conf, sentinelConf(s, dir, specs[0].port, tls));

  const handle = (n) => {
    const h = {
      name: n.name,
      port: n.port,
      url: `${tls === undefined ? 'redis' : 'rediss'}://${HOST}:${n.port}`,
      pid: spawnNode(bins.server, n, log),
      /** SIGKILL, SIGSTOP, SIGCONT, SIGTERM: to this process only. */
      signal(sig) {
        process.kill(h.pid, sig);
      },
      /** Starts a killed server again on its (rewritten) config; it rejoins as Sentinel says. */
      async restart() {
        if (isOurs(h.pid, n.port)) await killPid(h.pid, () => !isOurs(h.pid, n.port), { cont: true, timeoutMs: 2000 });
        h.pid = spawnNode(bins.server, n, log);
      },
      alive: () => isOurs(h.pid, n.port),
      /** `master` or `slave` as the server itself says, or null when it does not answer. */
      async role() {
        const info = fields(await cli(n.port, ['INFO', 'replication']));
        return info.role ?? null;
      },
      cli: (args, ms) => cli(n.port, args, ms),
    };
    return h;
  };
  const servers = specs.map(handle);
  // The replica in sync before the Sentinels start: a Sentinel learns of replicas from the
  // primary's INFO, which it reads every 10s once the first reading is done.
  const syncEnd = Date.now() + timeoutMs;
  while (fields(await cli(servers[1].port, ['INFO', 'replication'])).master_link_status !== 'up') {
    if (Date.now() > syncEnd) {
      await stopRedisSentinel({ basePort, log });
      throw new Error(`the replica on ${servers[1].port} did not sync; logs:\n${specs.map((s) => `${s.name}: ${tail(s.logFile, 5)}`).join('\n')}`);
    }
    await sleep(50);
  }
  const sentinels = sentinelSpecs.map(handle);

  /** The port every answering Sentinel names as primary, or null while they disagree. */
  async function namedPrimaryPort() {
    const answers = await Promise.all(sentinels.map((s) => cli(s.port, ['SENTINEL', 'get-master-addr-by-name', MASTER])));
    const ports = new Set(answers.filter((a) => a !== null && a !== '').map((a) => Number(a.split(/\r?\n/)[1])));
    return ports.size === 1 ? [...ports][0] : null;
  }

  const set = {
    url: `${tls === undefined ? 'redis' : 'rediss'}+sentinel://${sentinels.map((s) => `${HOST}:${s.port}`).join(',')}/${MASTER}`,
    master: MASTER,
    servers,
    sentinels,
    dir,
    namedPrimaryPort,
    /** The server the Sentinels name as primary, or null while they disagree. */
    async primary() {
      const port = await namedPrimaryPort();
      return servers.find((s) => s.port === port) ?? null;
    },
    /** Until the Sentinels agree on a primary (other than `not`) that says it is one. */
    async waitForPrimary({ not, ms = timeoutMs } = {}) {
      const end = Date.now() + ms;
      while (Date.now() < end) {
        const p = await set.primary();
        if (p !== null && p.port !== not && (await p.role()) === 'master') return p;
        await sleep(50);
      }
      throw new Error(`the Sentinels on ${basePort} named no primary${not === undefined ? '' : ` other than ${not}`} within ${ms}ms; logs:\n${sentinelSpecs.map((s) => `${s.name}: ${tail(s.logFile, 5)}`).join('\n')}`);
    },
    /** Until every Sentinel sees the primary, the replica (in sync) and the two other Sentinels. */
    async waitForSettled(ms = timeoutMs) {
      const end = Date.now() + ms;
      while (Date.now() < end) {
        const views = await Promise.all(sentinels.map(async (s) => fields(await cli(s.port, ['SENTINEL', 'master', MASTER]), 'pairs')));
        const settled = views.every((v) => v['num-other-sentinels'] === '2' && v['num-slaves'] === '1' && v.flags === 'master');
        const p = await set.primary();
        const replica = servers.find((s) => s !== p);
        const link = replica === undefined ? {} : fields(await cli(replica.port, ['INFO', 'replication']));
        if (settled && p !== null && link.master_link_status === 'up') return p;
        await sleep(100);
      }
      throw new Error(`the Sentinel set-up on ${basePort} did not settle within ${ms}ms; logs:\n${[...specs, ...sentinelSpecs].map((s) => `${s.name}: ${tail(s.logFile, 5)}`).join('\n')}`);
    },
    /** SENTINEL FAILOVER: the Sentinels promote the replica without waiting for the primary to fail. */
    async failover() {
      const answer = await cli(sentinels[0].port, ['SENTINEL', 'FAILOVER', MASTER], 2000);
      if (answer !== 'OK') throw new Error(`SENTINEL FAILOVER ${MASTER} answered ${JSON.stringify(answer)}`);
    },
    stop: () => stopRedisSentinel({ basePort, log }),
  };
  try {
    await set.waitForSettled();
  } catch (err) {
    await set.stop();
    throw err;
  }
  log(`[redis-sentinel] ready: ${set.url}`);
  return set;
}

async function main(cmd, port) {
  const basePort = port === undefined ? DEFAULT_BASE : Number(port);
  const log = (m) => console.log(m);
  const { servers, sentinels } = layout(basePort);
  switch (cmd) {
    case 'start': {
      const s = await startRedisSentinel({ basePort, log });
      console.log(s.url);
      return;
    }
    case 'stop':
      await stopRedisSentinel({ basePort, log });
      return;
    case 'status': {
      const named = await cliCommand(sentinels[0].port, ['SENTINEL', 'get-master-addr-by-name', MASTER]);
      console.log(`Sentinel ${sentinels[0].name} names as primary: ${named === null ? 'no answer' : named.replace(/\r?\n/, ':')}`);
      for (const n of servers) console.log(`${n.name} ${HOST}:${n.port}: ${fields(await cliCommand(n.port, ['INFO', 'replication'])).role ?? 'not answering'}`);
      return;
    }
    case 'failover': {
      const answer = await cliCommand(sentinels[0].port, ['SENTINEL', 'FAILOVER', MASTER], 2000);
      console.log(answer ?? 'no answer');
      process.exitCode = answer === 'OK' ? 0 : 1;
      return;
    }
    default:
      console.error('usage: node scripts/services/redis-sentinel.mjs start|stop|status|failover [basePort]');
      process.exitCode = 2;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2], process.argv[3]).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
