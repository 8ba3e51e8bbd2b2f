#!/usr/bin/env node
// The `leasehold` executable: a thin shim over the compiled CLI (npm run build first).
// It sets process.exitCode instead of calling process.exit(), so stdout/stderr are flushed and
// the runner's cleanup (releasing the lease, closing the store) finishes before the exit.
import { main } from '../dist/src/cli/main.js';

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    // main() never rejects by design; this is the last line of defence, still one line.
    process.stderr.write(`leasehold: unexpected error: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
