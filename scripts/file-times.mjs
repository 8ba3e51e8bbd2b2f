// A node:test reporter that writes one line per test file, "<wall ms>\t<passed>\t<file>", as each
// file ends. scripts/test.mjs runs it beside the spec reporter and prints the slowest files at
// the end, so a contributor sees where the suite's time goes without timing it by hand.
//
// It also watches for a file that has gone quiet: a file that reported nothing for QUIET_MS is
// named on stderr with the last test it started, once per QUIET_MS. A hung file otherwise shows
// only as a CI run that never ends, with no clue which of a hundred files it was.
const QUIET_MS = Number(process.env.LEASEHOLD_TEST_QUIET_MS ?? 180_000);
const isTestFile = (f) => /\.test\.[cm]?js$/.test(f);

export default async function* fileTimes(source) {
  const seen = new Map(); // file -> { at, last }
  const done = new Set(); // files that ended: what they still report (stdout, diagnostics) is not progress
  const timer = setInterval(() => {
    const now = Date.now();
    for (const [file, s] of seen) {
      if (now - s.at < QUIET_MS) continue;
      // A module that defines tests for test files (the exported conformance suites in dist/src)
      // never ends as a file does: it is quiet, not hung, when none of its tests is running.
      if (!isTestFile(file) && s.running <= 0) continue;
      process.stderr.write(`[test] no progress for ${Math.round((now - s.at) / 1000)} s in ${file} (last started: ${s.last ?? 'nothing'})\n`);
      s.at = now;
    }
  }, Math.min(QUIET_MS, 30_000));
  timer.unref();
  try {
    for await (const event of source) {
      const file = event.data?.file;
      if (file === undefined) continue;
      if (event.type === 'test:complete' && event.data.name === file) {
        // Under process isolation each file is reported as a test whose name is its own path.
        seen.delete(file);
        done.add(file);
        const { duration_ms: ms, passed } = event.data.details;
        yield `${Math.round(ms)}\t${passed ? 'pass' : 'FAIL'}\t${file}\n`;
        continue;
      }
      // A file is announced (enqueue) long before it runs, and runs from its own dequeue. Node 20
      // reports a test's start only when it ends; its dequeue is what arrives as it begins.
      if (done.has(file) || (event.data.name === file && event.type === 'test:enqueue')) continue;
      const s = seen.get(file) ?? { at: 0, last: undefined, running: 0 };
      s.at = Date.now();
      if ((event.type === 'test:dequeue' || event.type === 'test:start') && event.data.name !== file) s.last = event.data.name;
      if (event.type === 'test:dequeue') s.running++;
      else if (event.type === 'test:pass' || event.type === 'test:fail') s.running--;
      seen.set(file, s);
    }
  } finally {
    clearInterval(timer);
  }
}
