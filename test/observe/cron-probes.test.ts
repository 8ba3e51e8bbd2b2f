/**
 * `leasehold cron --metrics-port --health-port`, as a real process on loopback against a real
 * SQLite store: the schedule's metrics count its slots and report the last success from the
 * ledger, the probes answer, and a port that cannot be bound stops the replica with one line
 * (exit 2) before it runs a slot.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { existsSync } from 'node:fs';
import { Sandbox, until } from '../cli/helpers.js';
import { selectedStores } from '../helpers/stores.js';

// Complete lines only: a line still being written is not parsed until its newline arrives.
const events = (text: string): Array<Record<string, unknown>> =>
  text
    .split('\n')
    .slice(0, -1)
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

void describe('leasehold cron serves metrics and probes (sqlite)', { skip: selectedStores().includes('sqlite') ? false : 'sqlite not selected (LEASEHOLD_TEST_STORES)' }, () => {
  const sb = new Sandbox('cron-probes');
  after(() => sb.cleanup());

  void it('slots by outcome and the last success appear at /metrics; /healthz is 200', async () => {
    const store = `sqlite:${sb.path('cron.db')}`;
    const log = sb.path('ran.log');
    const job = sb.script('job.sh', `echo "$LEASEHOLD_SLOT" >> ${log}`);
    const cron = sb.start(['cron', '--name', 'tick', '--every', '1s', '--ttl', '3s', '--store', store, '--json', '--metrics-port', '0', '--health-port', '0', '--', job]);
    try {
      await until('the replica serves both endpoints', () => events(cron.stderr).filter((e) => e['event'] === 'serving').length === 2, 30_000);
      const ev = events(cron.stderr);
      const metrics = String(ev.find((e) => e['metrics'] !== undefined)!['metrics']);
      const health = String(ev.find((e) => e['health'] !== undefined)!['health']);
      assert.match(metrics, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/, 'loopback by default');
      // A slot a second: two succeed within a few seconds; the bound is for a loaded host.
      await until('two slots ran', () => existsSync(log) && sb.read('ran.log').trim().split('\n').length >= 2, 30_000);
      await until(
        'the metrics count them',
        async () => /^leasehold_cron_slots_total\{schedule="tick",outcome="succeeded"\} ([2-9]|\d\d+)$/m.test(await (await fetch(metrics)).text()),
        10_000,
      );
      const text = await (await fetch(metrics)).text();
      assert.match(text, /^leasehold_cron_last_success_timestamp_seconds\{schedule="tick"\} \d+(\.\d+)?(e\+\d+)?$/m, 'the last success, read from the ledger');
      assert.match(text, /^leasehold_cron_start_lateness_seconds_count\{schedule="tick"\} \d+$/m);
      assert.match(text, /^leasehold_cron_next_slot_timestamp_seconds\{schedule="tick"\} /m);
      assert.equal((await fetch(health)).status, 200, 'a replica between slots is live');
    } finally {
      cron.proc.kill('SIGTERM');
    }
    const d = await cron.done;
    assert.equal(d.code, 143, d.stderr);
  });

  void it('a metrics port in use: exit 2 with a line that says so, and no slot runs', async () => {
    const busy: Server = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const port = (busy.address() as { port: number }).port;
    try {
      const log = sb.path('never.log');
      const job = sb.script('never.sh', `echo ran >> ${log}`);
      const r = await sb.run(['cron', '--name', 'busy-port', '--every', '1s', '--store', `sqlite:${sb.path('busy.db')}`, '--metrics-port', String(port), '--', job]);
      // The replica said it was scheduled before it tried the port: the error is its last line.
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr.trim().split('\n').at(-1)!, /^leasehold: metrics port \d+ on 127\.0\.0\.1 is in use; pick another port$/);
      assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
      assert.equal(existsSync(log), false, 'no slot ran');
    } finally {
      busy.close();
    }
  });
});
