/**
 * Store restarts while leases are held: PostgreSQL restarted, Redis restarted EMPTY (no
 * persistence, the common default), etcd restarted, MariaDB shut down cleanly and started again. No token may ever go backwards, and a
 * leader must be back without anyone touching anything.
 *
 * This file restarts shared servers, so the test runner runs it in the last phase, alone.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { Leasehold } from '../../src/core/leasehold.js';
import type { Term } from '../../src/core/lease.js';
import { makeTestStore, selectedStores, type StoreKind } from '../helpers/stores.js';
import { ensureMariadbUp, restartMariadb, whyNotRestartMariadb } from '../helpers/mariadb.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const isRoot = process.getuid?.() === 0;

function restartPostgres(): void {
  const version = readdirSync('/etc/postgresql')[0]!;
  execFileSync('pg_ctlcluster', ['--skip-systemctl-redirect', version, 'main', 'restart'], { stdio: 'ignore' });
}

async function restartRedisEmpty(): Promise<void> {
  spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', '6379', 'shutdown', 'nosave'], { stdio: 'ignore' });
  await sleep(300);
  // The same command this machine starts Redis with: nothing is kept on disk.
  execFileSync(
    'redis-server',
    ['--daemonize', 'yes', '--bind', '127.0.0.1', '-::1', '--port', '6379', '--save', '', '--appendonly', 'no', '--dir', '/var/lib/redis', '--logfile', '/var/log/redis/ci.log'],
    { stdio: 'ignore' },
  );
  for (let i = 0; i < 50; i++) {
    if (spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', '6379', 'ping']).stdout?.toString().includes('PONG')) return;
    await sleep(100);
  }
  throw new Error('Redis did not come back after the restart');
}

async function restartEtcd(): Promise<void> {
  const mod = (await import(new URL('../../../scripts/services/etcd.mjs', import.meta.url).href)) as {
    restartEtcd(o?: object): Promise<unknown>;
    canRestartEtcd(): boolean;
  };
  await mod.restartEtcd({ downMs: 500 });
}

function canRestart(kind: StoreKind): string | undefined {
  if (kind === 'sqlite') return 'SQLite is a file: there is no server to restart';
  if (!isRoot) return 'restarting a shared server needs root';
  if (kind === 'postgres' && process.env['LEASEHOLD_TEST_PG_URL'] !== undefined) return 'LEASEHOLD_TEST_PG_URL points at a server this test does not manage';
  if (kind === 'redis' && process.env['LEASEHOLD_TEST_REDIS_URL'] !== undefined) return 'LEASEHOLD_TEST_REDIS_URL points at a server this test does not manage';
  if (kind === 'etcd' && process.env['LEASEHOLD_TEST_ETCD_URL'] !== undefined) return 'LEASEHOLD_TEST_ETCD_URL points at a server this test does not manage';
  if (kind === 'mysql') return whyNotRestartMariadb();
  return undefined;
}

const restarters: Record<Exclude<StoreKind, 'sqlite'>, () => Promise<void> | void> = {
  postgres: restartPostgres,
  redis: restartRedisEmpty,
  etcd: restartEtcd,
  mysql: () => restartMariadb({ downMs: 500 }),
};

void describe('store restarts while a lease is held', () => {
  for (const kind of selectedStores()) {
    const skip = canRestart(kind);
    void it(`${kind}: tokens never go backwards and a leader is back on its own`, skip === undefined ? {} : { skip }, async () => {
      const t = await makeTestStore(kind);
      const ttl = kind === 'etcd' ? 2000 : 1000;
      const name = `restart-${randomBytes(4).toString('hex')}`;
      const clients = [new Leasehold({ store: t.store }), new Leasehold({ store: await t.open() })];
      const terms: { token: bigint; by: number; at: number }[] = [];
      const electors = clients.map((c, i) =>
        c.elect(name, { onElected: (term: Term) => void terms.push({ token: term.token, by: i, at: performance.now() }) }, { ttl }),
      );
      try {
        while (terms.length === 0) await sleep(20);
        await sleep(ttl); // a few renewals under the first term
        const before = terms.length;
        const restartedAt = performance.now();
        await restarters[kind as Exclude<StoreKind, 'sqlite'>]();
        // Redis was restarted empty: the store's data (and its notion of the term) is gone.
        const deadline = performance.now() + 60_000;
        while (performance.now() < deadline && !electors.some((e) => e.isLeader && terms.length > 0)) await sleep(50);
        // Wait for the dust to settle: a leader holds, and has renewed at least once.
        await sleep(ttl * 2);
        const leaders = electors.filter((e) => e.isLeader).length;
        assert.equal(leaders, 1, `exactly one leader after the restart (have ${leaders})`);
        for (let i = 1; i < terms.length; i++) {
          assert.ok(terms[i]!.token > terms[i - 1]!.token, `term tokens strictly increase across the restart: ${terms.map((x) => x.token).join(' < ')}`);
        }
        const backAfter = (terms.length > before ? terms[terms.length - 1]!.at : performance.now()) - restartedAt;
        process.stdout.write(
          `# ${kind}: terms ${terms.map((x) => x.token).join(', ')}; leader back ${backAfter.toFixed(0)}ms after the restart began\n`,
        );
      } finally {
        await Promise.all(electors.map((e) => e.stop()));
        await Promise.all(clients.map((c) => c.close()));
        await t.cleanup().catch(() => {});
      }
    });
  }
  after(async () => {
    // Leave the shared servers up for whatever runs next, whatever happened above.
    if (selectedStores().includes('mysql')) await ensureMariadbUp();
    if (isRoot && spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', '6379', 'ping']).status !== 0) {
      spawnSync('redis-server', ['--daemonize', 'yes', '--bind', '127.0.0.1', '-::1', '--port', '6379', '--save', '', '--appendonly', 'no', '--dir', '/var/lib/redis', '--logfile', '/var/log/redis/ci.log']);
    }
  });
});
