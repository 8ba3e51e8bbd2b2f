/**
 * examples/systemd and examples/kubernetes: the `leasehold cron` line each ships, run as written
 * (two copies, as on two hosts or two pods) with only the schedule made one second, the store
 * pointed at a test store and the job at a script: every slot runs in one copy only, and a stop
 * signal drains (exit 143), as their READMEs promise.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';
import { readRuns, startReplica, until, type Replica } from './replicas.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const cli = `${root}bin/leasehold.js`;
const kind: StoreKind = selectedStores().includes('sqlite') ? 'sqlite' : 'postgres';
const dir = mkdtempSync(join(tmpdir(), 'lh-deploy-ex-'));
const stores: TestStore[] = [];
const running: Replica[] = [];
after(async () => {
  for (const r of running) r.proc.kill('SIGKILL');
  for (const s of stores) await s.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** Splits a systemd ExecStart line: words, and "double-quoted" words. */
function splitExec(line: string): string[] {
  return [...line.matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2]!);
}

/** The shipped argv with the schedule made `--every 1s` and the job replaced; everything else as written. */
function adapt(argv: string[], job: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--schedule') {
      out.push('--every', '1s');
      i++;
    } else if (a === '--tz') i++;
    else if (a === '--') {
      out.push('--', job);
      break;
    } else out.push(a);
  }
  return out;
}

async function twoCopies(argv: string[], env: NodeJS.ProcessEnv, resource: string): Promise<void> {
  const copies = [startReplica(cli, argv, undefined, env), startReplica(cli, argv, undefined, env)];
  running.push(...copies);
  await until('three slots ran', () => readRuns(resource).length >= 3, 20_000);
  for (const c of copies) c.proc.kill('SIGTERM');
  const codes = await Promise.all(copies.map((c) => c.exited));
  assert.deepEqual(codes, [143, 143], copies.map((c) => c.out).join('\n---\n'));
  const slots = readRuns(resource).map((r) => r.slot);
  assert.equal(new Set(slots).size, slots.length, `a slot ran twice: ${slots.join(' ')}`);
}

function jobScript(name: string, resource: string): string {
  const job = join(dir, `${name}.sh`);
  writeFileSync(job, `#!/bin/sh\necho "start $LEASEHOLD_SLOT $LEASEHOLD_TOKEN $$" >> ${resource}\n`);
  chmodSync(job, 0o755);
  return job;
}

void describe('examples/systemd and examples/kubernetes', { concurrency: true }, () => {
  void it('say what the default per-slot mode does: no leader runs every slot (that is --mode leader, which they do not pass)', () => {
    for (const f of ['systemd/README.md', 'systemd/nightly-report.service', 'kubernetes/README.md', 'kubernetes/deployment.yaml']) {
      const text = readFileSync(`${root}examples/${f}`, 'utf8');
      assert.doesNotMatch(text, /\bleader\b/i, `examples/${f} describes a leader that runs the slots; per-slot mode (the default) has none`);
      assert.doesNotMatch(text, /--mode/, `examples/${f} passes --mode: its README's per-slot wording would not hold`);
      if (f.endsWith('README.md')) assert.match(text, /costs no slot/, `examples/${f} does not say that a replica gone between slots costs no slot`);
    }
  });

  void it('the systemd unit\'s ExecStart, on two hosts: each slot runs on one; stop drains with 143', async () => {
    const unit = readFileSync(`${root}examples/systemd/nightly-report.service`, 'utf8');
    const exec = /^ExecStart=(.*)$/m.exec(unit)?.[1];
    assert.ok(exec !== undefined, 'no ExecStart');
    const words = splitExec(exec);
    assert.deepEqual(words.slice(0, 3), ['/usr/bin/env', 'leasehold', 'cron']);
    const ts = await makeTestStore(kind);
    stores.push(ts);
    const storeFile = join(dir, 'store.url');
    writeFileSync(storeFile, `${ts.url}\n`);
    const resource = join(dir, 'systemd.log');
    const argv = adapt(words.slice(2), jobScript('systemd-job', resource)).map((a) => (a === '/etc/leasehold/store.url' ? storeFile : a));
    assert.ok(argv.includes(storeFile), 'the unit reads its store from /etc/leasehold/store.url');
    await twoCopies(argv, {}, resource);
  });

  void it('the Deployment\'s container args, in two pods: each slot runs in one; SIGTERM drains with 143', async () => {
    const yaml = readFileSync(`${root}examples/kubernetes/deployment.yaml`, 'utf8');
    const command = JSON.parse(/^\s+command: (\[.*\])$/m.exec(yaml)![1]!) as string[];
    const args = JSON.parse(/^\s+args: (\[.*\])$/m.exec(yaml)![1]!) as string[];
    assert.deepEqual(command, ['leasehold']);
    assert.match(yaml, /name: LEASEHOLD_STORE/);
    assert.match(yaml, /replicas: 2/);
    const ts = await makeTestStore(kind);
    stores.push(ts);
    const resource = join(dir, 'k8s.log');
    await twoCopies(adapt(args, jobScript('k8s-job', resource)), { LEASEHOLD_STORE: ts.url }, resource);
  });
});
