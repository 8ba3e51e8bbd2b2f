/**
 * scripts/services/etcd.mjs when two test runs use one etcd (two terminals, or engineers running
 * single files side by side): the first run to end must not stop the etcd under the other; the
 * last one out stops it; a crashed run's registration does not keep it alive. On a port and state
 * dir of its own (LEASEHOLD_ETCD_SERVICE_PORT / _DIR), so the shared etcd on 2379 is untouched.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const dir = mkdtempSync(join(tmpdir(), 'lh-etcd-service-'));
process.env['LEASEHOLD_ETCD_SERVICE_PORT'] = '27990';
process.env['LEASEHOLD_ETCD_SERVICE_DIR'] = dir;
const mjs = fileURLToPath(new URL('../../../scripts/services/etcd.mjs', import.meta.url));

interface Handle {
  started: boolean;
  stop(): Promise<void>;
}
interface EtcdService {
  ensureEtcd(o?: { timeoutMs?: number }): Promise<Handle>;
  etcdHealthy(timeoutMs?: number): Promise<boolean>;
  stopEtcd(): Promise<void>;
}
const svc = (await import(pathToFileURL(mjs).href)) as EtcdService;
after(async () => {
  await svc.stopEtcd();
  rmSync(dir, { recursive: true, force: true });
});

void test('two runs on one etcd: the first to end leaves it running for the other; the last one out stops it', async () => {
  const first = await svc.ensureEtcd({ timeoutMs: 30_000 });
  assert.equal(first.started, true, 'the first run starts the etcd');
  const second = await svc.ensureEtcd();
  assert.equal(second.started, false, 'the second run finds it running');
  await first.stop();
  assert.equal(await svc.etcdHealthy(2000), true, 'the run that started it ended first and stopped it under the other run');
  await second.stop();
  assert.equal(await svc.etcdHealthy(500), false, 'the last run out left the etcd a run had started running');
});

void test("a crashed run's registration (its pid is gone) does not keep the etcd alive", async () => {
  const run = await svc.ensureEtcd({ timeoutMs: 30_000 });
  assert.equal(run.started, true);
  const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
  mkdirSync(join(dir, 'users'), { recursive: true });
  writeFileSync(join(dir, 'users', `${gone}-crashed`), `${gone}\n`);
  await run.stop();
  assert.equal(await svc.etcdHealthy(500), false, 'a registration whose process is gone kept the etcd running');
});

void test('two runs starting at once: one starts the etcd, the other waits for it and uses it', async () => {
  const [a, b] = await Promise.all([svc.ensureEtcd({ timeoutMs: 30_000 }), svc.ensureEtcd({ timeoutMs: 30_000 })]);
  assert.deepEqual([a.started, b.started].sort(), [false, true], 'exactly one of the two runs started it');
  assert.equal(await svc.etcdHealthy(2000), true);
  await a.stop();
  assert.equal(await svc.etcdHealthy(2000), true, 'stopped under the other run');
  await b.stop();
  assert.equal(await svc.etcdHealthy(500), false);
});
