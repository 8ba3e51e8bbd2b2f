#!/usr/bin/env node
// The `leasehold` executable: a thin shim over the compiled CLI (npm run build first).
// main() resolves only when the command is done and has cleaned up (the lease released, the
// store closed). A driver may still hold a timer after its client is closed (etcd3 schedules a
// watch-stream reconnect, some 100-300 ms): once stdout and stderr have flushed, exit with the
// code rather than wait that out.
import { main } from '../dist/src/cli/main.js';

const exitWhenFlushed = (code) => {
  process.exitCode = code;
  let pending = 2;
  const done = () => {
    if (--pending === 0) process.exit(code);
  };
  process.stdout.write('', done);
  process.stderr.write('', done);
};

main(process.argv.slice(2)).then(exitWhenFlushed, (err) => {
  // main() never rejects by design; this is the last line of defence, still one line.
  process.stderr.write(`leasehold: unexpected error: ${err instanceof Error ? err.message : String(err)}\n`);
  exitWhenFlushed(1);
});
