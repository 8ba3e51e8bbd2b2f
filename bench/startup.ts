/**
 * CLI start-up: `leasehold run --store URL --name N -- true` (start, take the lease, run the
 * command, release, exit) against `node -e 0`, the least any Node CLI costs, interleaved.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { makeTestStore, type StoreKind } from '../test/helpers/stores.js';
import { interleave, stat, uniq, type Recorder } from './lib.js';

const bin = fileURLToPath(new URL('../../bin/leasehold.js', import.meta.url));

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
    const [a, b] = await interleave(
      samples,
      () => timeProcess([bin, 'run', '--store', t.url, '--name', name, '--quiet', '--', 'true']),
      () => timeProcess(['-e', '0']),
    );
    rec.add({ figure: 'startup', store: kind, label: 'leasehold run -- true', unit: 'ms', leasehold: stat(a), baselineName: 'node -e 0', baseline: stat(b) });
  } finally {
    await t.cleanup();
  }
}
