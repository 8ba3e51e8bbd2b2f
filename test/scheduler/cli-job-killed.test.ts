/**
 * `leasehold cron`: a job that dies of SIGKILL while its replica lives. The replica saw the job
 * end and records what it saw: the slot `failed`, exit 137, a final outcome that is not rerun
 * (only `interrupted`, a slot whose term ended or whose replica was stopped, is owed). The per-slot
 * kill tests SIGKILL the replica before its job for that reason: killed the other way round, the
 * replica lived long enough to record `failed` (CI, MySQL). This pins the product's side of it.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Sandbox, until } from '../cli/helpers.js';

const sb = new Sandbox('cron-job-killed');
after(() => sb.cleanup());

interface HistoryRow {
  slot: string;
  status: string;
  exitCode: number | null;
}

void describe('leasehold cron: a job killed while its replica lives', () => {
  void it('its slot is recorded failed with exit 137 and not run again; the next slots run', async () => {
    const store = `sqlite:${sb.path('killed.db')}`;
    // The first run kills itself with SIGKILL (as the OOM killer would); the later runs succeed.
    const job = sb.script(
      'job.sh',
      `echo "$LEASEHOLD_SLOT" >> "${sb.path('runs')}"
if [ ! -e "${sb.path('killed-once')}" ]; then : > "${sb.path('killed-once')}"; kill -9 $$; fi`,
    );
    const replica = sb.start(['cron', '--name', 'k', '--every', '1s', '--store', store, '--', job]);
    try {
      const runs = (): string[] => (sb.has('runs') ? sb.read('runs').trim().split('\n') : []);
      // Three runs: the killed one and two after it, each at its own slot (one per second).
      await until('three runs', () => runs().length >= 3, 30_000);
    } finally {
      replica.proc.kill('SIGTERM');
    }
    // Stopped by SIGTERM: 128 + 15, as a signal-stopped leasehold says.
    const done = await replica.done;
    assert.equal(done.code, 143, done.stderr);
    const runs = sb.read('runs').trim().split('\n');
    const killed = runs[0]!;
    assert.equal(runs.filter((s) => s === killed).length, 1, `the killed job's slot ran once: ${runs.join(', ')}`);
    const h = await sb.run(['cron', 'history', 'k', '--json', '--store', store]);
    assert.equal(h.code, 0, h.stderr);
    const rows = JSON.parse(h.stdout) as HistoryRow[];
    const row = rows.find((r) => r.slot === killed);
    assert.ok(row !== undefined, `a row for ${killed}: ${h.stdout}`);
    assert.equal(row.status, 'failed', h.stdout);
    assert.equal(row.exitCode, 137, h.stdout);
    const later = rows.filter((r) => r.slot > killed && runs.includes(r.slot));
    assert.ok(later.length >= 2 && later.every((r) => r.status === 'succeeded'), `the later slots ran: ${h.stdout}`);
  });
});
