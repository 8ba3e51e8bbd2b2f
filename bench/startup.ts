/**
 * CLI start-up: `leasehold run --store URL --name N -- true` (start, take the lease, run the
 * command, release, exit) against `node -e 0`, the least any Node CLI costs, interleaved; and
 * against the store's driver floor (./driver-floor.ts: load the driver, connect, one read,
 * close), the least any CLI on that store costs, so that the driver's own start-up and
 * leasehold's are told apart.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { makeTestStore, type StoreKind } from '../test/helpers/stores.js';
import { interleave, stat, uniq, type Recorder } from './lib.js';

const bin = fileURLToPath(new URL('../../bin/leasehold.js', import.meta.url));
const floor = fileURLToPath(new URL('./driver-floor.js', import.meta.url));

function timeProcess(args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    child.once('exit', (code) => (code === 0 ? resolve(performance.now() - t0) : reject(new Error(`${args.join(' ')} exited ${code}: ${err}`))));
  });
}

export async function startup(rec: Recorder, kind: StoreKind, samples: number): Promise<void> {
  const t = await makeTestStore(kind);
  try {
    const name = uniq('startup');
    const run = (): Promise<number> => timeProcess([bin, 'run', '--store', t.url, '--name', name, '--quiet', '--', 'true']);
    const [a, b] = await interleave(samples, run, () => timeProcess(['-e', '0']));
    rec.add({ figure: 'startup', store: kind, label: 'leasehold run -- true', unit: 'ms', leasehold: stat(a), baselineName: 'node -e 0', baseline: stat(b) });
    const [c, d] = await interleave(samples, run, () => timeProcess([floor, kind, t.url]));
    rec.add({ figure: 'startup', store: kind, label: 'run -- true vs driver', unit: 'ms', leasehold: stat(c), baselineName: 'driver floor', baseline: stat(d) });
  } finally {
    await t.cleanup();
  }
}
