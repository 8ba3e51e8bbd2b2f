import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A single-member etcd of a test's own, on free loopback ports and a temp dir, that the test may
 * stop, snapshot and restore (never the shared one on 2379). `etcdctl` does the snapshot
 * save/restore, as an operator would (etcd 3.4 has no etcdutl).
 */
export interface ThrowawayEtcd {
  url: string;
  dir: string;
  /** Starts etcd on `dataDir` (default: the current one). */
  start(dataDir?: string): Promise<void>;
  stop(): Promise<void>;
  /** `etcdctl snapshot save` to a file in the temp dir; returns its path. */
  snapshot(name: string): string;
  /** `etcdctl snapshot restore` into a new data dir (same member, same cluster token); returns it. */
  restore(snapshot: string, name: string): string;
  /** A copy of the data dir as it is now (etcd stopped): a file-level backup. */
  copyData(name: string): string;
  dataDir: string;
  /** Stops etcd and removes the temp dir. */
  [Symbol.asyncDispose](): Promise<void>;
}

export const ETCD_BIN = ['/usr/bin/etcd', '/usr/local/bin/etcd'].find((p) => existsSync(p));
export const ETCDCTL_BIN = ['/usr/bin/etcdctl', '/usr/local/bin/etcdctl'].find((p) => existsSync(p));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

export async function throwawayEtcd(): Promise<ThrowawayEtcd> {
  if (ETCD_BIN === undefined || ETCDCTL_BIN === undefined) throw new Error('etcd and etcdctl are needed (Debian: apt-get install etcd-server etcd-client)');
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-restore-'));
  const [client, peer] = [await freePort(), await freePort()];
  const clientUrl = `http://127.0.0.1:${client}`;
  const peerUrl = `http://127.0.0.1:${peer}`;
  const member = ['--name', 'r1', '--initial-cluster', `r1=${peerUrl}`, '--initial-advertise-peer-urls', peerUrl];
  let child: ChildProcess | undefined;
  const ctl = (args: string[]): void => {
    const r = spawnSync(ETCDCTL_BIN, args, { env: { ...process.env, ETCDCTL_API: '3' }, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`etcdctl ${args.join(' ')} failed: ${r.stderr}`);
  };
  const e: ThrowawayEtcd = {
    url: `etcd://127.0.0.1:${client}`,
    dir,
    dataDir: join(dir, 'data'),
    async start(dataDir = e.dataDir) {
      e.dataDir = dataDir;
      child = spawn(ETCD_BIN, [...member, '--data-dir', dataDir, '--listen-client-urls', clientUrl, '--advertise-client-urls', clientUrl, '--listen-peer-urls', peerUrl], {
        stdio: 'ignore',
      });
      const deadline = Date.now() + 15_000;
      for (;;) {
        try {
          const res = await fetch(`${clientUrl}/health`, { signal: AbortSignal.timeout(500) });
          const body = (await res.json()) as { health?: unknown };
          if (body.health === true || body.health === 'true') return;
        } catch {
          // not up yet
        }
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`etcd on ${clientUrl} did not become healthy`);
        await sleep(100);
      }
    },
    async stop() {
      const c = child;
      child = undefined;
      if (c === undefined || c.exitCode !== null) return;
      const exited = new Promise((resolve) => c.once('exit', resolve));
      c.kill('SIGTERM');
      await exited;
    },
    snapshot(name) {
      const path = join(dir, name);
      ctl(['--endpoints', clientUrl, 'snapshot', 'save', path]);
      return path;
    },
    restore(snapshot, name) {
      const out = join(dir, name);
      ctl(['snapshot', 'restore', snapshot, '--data-dir', out, ...member]);
      return out;
    },
    copyData(name) {
      const out = join(dir, name);
      cpSync(e.dataDir, out, { recursive: true });
      return out;
    },
    async [Symbol.asyncDispose]() {
      await e.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await e.start();
  return e;
}
