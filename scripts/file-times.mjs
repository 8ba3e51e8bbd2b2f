// A node:test reporter that writes one line per test file, "<wall ms>\t<passed>\t<file>", as each
// file ends. scripts/test.mjs runs it beside the spec reporter and prints the slowest files at
// the end, so a contributor sees where the suite's time goes without timing it by hand.
export default async function* fileTimes(source) {
  for await (const event of source) {
    // Under process isolation each file is reported as a test whose name is its own path.
    if (event.type !== 'test:complete' || event.data.name !== event.data.file) continue;
    const { duration_ms: ms, passed } = event.data.details;
    yield `${Math.round(ms)}\t${passed ? 'pass' : 'FAIL'}\t${event.data.file}\n`;
  }
}
