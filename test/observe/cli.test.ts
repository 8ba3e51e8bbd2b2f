/**
 * The observability surface of the CLI, as real processes on loopback: `run --metrics-port
 * --health-port`, `status --watch [--json]`, and `dashboard`'s refusals (remote without
 * --allow-remote, writes, foreign Host headers) and its state.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Sandbox, assertOneLineError, until, type Running } from '../cli/helpers.js';

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

function jsonLines(text: string): Array<Record<string, unknown>> {
  return text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

async function stop(r: Running): Promise<void> {
  if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGTERM');
  await r.done;
}

void describe('CLI observability (sqlite, loopback)', () => {
  let sb: Sandbox;
  let store: string;
  before(async () => {
    sb = new Sandbox('observe');
    store = `sqlite:${sb.path('leases.db')}`;
    const r = await sb.run(['migrate', '--store', store]);
    assert.equal(r.code, 0, r.stderr);
  });
  after(() => sb.cleanup());

  void it('run --metrics-port 0 --health-port 0 serves /metrics, /healthz and /readyz for the wrapped command', async () => {
    const name = uniq('served');
    const leader = sb.start(['run', '--name', name, '--store', store, '--ttl', '2s', '--json', '--metrics-port', '0', '--health-port', '0', '--', 'sleep', '30']);
    let follower: Running | undefined;
    try {
      await until('the leader serves and leads', () => {
        const ev = jsonLines(leader.stderr);
        return ev.some((e) => e['event'] === 'acquired') && ev.filter((e) => e['event'] === 'serving').length === 2;
      });
      follower = sb.start(['run', '--name', name, '--store', store, '--ttl', '2s', '--json', '--health-port', '0', '--', 'sleep', '30']);
      const f = follower;
      await until('the follower serves and waits', () => jsonLines(f.stderr).some((e) => e['event'] === 'serving') && /waiting/.test(f.stderr));
      const served = jsonLines(leader.stderr).filter((e) => e['event'] === 'serving');
      const metricsUrl = String(served.find((e) => e['metrics'] !== undefined)!['metrics']);
      const healthUrl = String(served.find((e) => e['health'] !== undefined)!['health']);
      assert.match(metricsUrl, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/, 'loopback by default');
      const token = String(jsonLines(leader.stderr).find((e) => e['event'] === 'acquired')!['token']);
      const text = await (await fetch(metricsUrl)).text();
      assert.match(text, new RegExp(`^leasehold_leader\\{lease="${name}"\\} 1$`, 'm'));
      assert.match(text, new RegExp(`^leasehold_token\\{lease="${name}"\\} ${token}$`, 'm'));
      assert.match(text, new RegExp(`^leasehold_terms_won_total\\{lease="${name}"\\} 1$`, 'm'));
      assert.match(text, /^process_cpu_seconds_total/m, 'with the process metrics');
      assert.equal((await fetch(healthUrl)).status, 200);
      assert.equal((await fetch(healthUrl.replace('/healthz', '/readyz'))).status, 200, 'the leader is ready');
      const fUrl = String(jsonLines(f.stderr).find((e) => e['event'] === 'serving')!['health']);
      assert.equal((await fetch(fUrl)).status, 200, 'the follower is live');
      assert.equal((await fetch(fUrl.replace('/healthz', '/readyz'))).status, 503, 'the follower is not ready');
    } finally {
      await stop(leader);
      if (follower !== undefined) await stop(follower);
    }
  });

  void it('a bad port is a usage error (exit 2) before anything is taken', async () => {
    const r = await sb.run(['run', '--name', uniq('x'), '--store', store, '--metrics-port', '99999', '--', 'true']);
    assertOneLineError(r, 2, /--metrics-port "99999" is not a port/);
    const e = await sb.run(['run', '--name', uniq('x'), '--store', store, '--', 'true'], { LEASEHOLD_HEALTH_PORT: 'http' });
    assertOneLineError(e, 2, /LEASEHOLD_HEALTH_PORT "http" is not a port/);
  });

  void it('status --watch --json prints one line per change, and nothing while nothing changes', async () => {
    const name = uniq('watched');
    const watch = sb.start(['status', name, '--watch', '--json', '--store', store]);
    try {
      const first = sb.start(['run', '--name', name, '--store', store, '--ttl', '1s', '--', 'sleep', '30']);
      await until('the first holder is printed', () => jsonLines(watch.stdout).some((l) => l['holder'] !== null && l['state'] === 'held'));
      const t1 = jsonLines(watch.stdout).find((l) => l['state'] === 'held')!;
      const second = sb.start(['run', '--name', name, '--store', store, '--ttl', '1s', '--', 'sleep', '30']);
      await until('the second runner waits', () => /waiting/.test(second.stderr));
      first.proc.kill('SIGKILL');
      await first.done;
      await until('the takeover is printed', () => jsonLines(watch.stdout).some((l) => l['change'] === 'new-term' && l['token'] !== t1['token']));
      const lines = jsonLines(watch.stdout);
      const t2 = lines.find((l) => l['change'] === 'new-term' && l['token'] !== t1['token'])!;
      assert.ok(BigInt(String(t2['token'])) > BigInt(String(t1['token'])));
      assert.notEqual(t2['holder'], t1['holder']);
      // Renewals are not changes: two more TTLs of renewing print nothing.
      const count = lines.length;
      await new Promise((r) => setTimeout(r, 2000));
      assert.equal(jsonLines(watch.stdout).length, count, `no line for renewals: ${watch.stdout}`);
      await stop(second);
    } finally {
      watch.proc.kill('SIGINT');
      const d = await watch.done;
      assert.equal(d.code, 0, `status --watch exits 0 on SIGINT: ${d.stderr}`);
    }
  });

  void it('dashboard: loopback only unless --allow-remote; read-only; refuses foreign Host headers', async () => {
    const remote = await sb.run(['dashboard', '--store', store, '--host', '0.0.0.0', '--port', '0']);
    assertOneLineError(remote, 2, /not loopback.*--allow-remote/);
    const badPort = await sb.run(['dashboard', '--store', store, '--port', 'eighty']);
    assertOneLineError(badPort, 2, /not a port/);
    assertOneLineError(await sb.run(['dashboard', '--store', store, '--max-clients', '0']), 2, /--max-clients "0" is not a count/);
    assertOneLineError(await sb.run(['dashboard', '--store', store, '--client-timeout', '10ms']), 2, /--client-timeout 10ms would drop healthy pages/);
    const dash = sb.start(['dashboard', '--store', store, '--port', '0', '--max-clients', '1']);
    try {
      await until('the dashboard prints its URL', () => /dashboard at http:\/\/127\.0\.0\.1:\d+\//.test(dash.stdout));
      const url = /(http:\/\/127\.0\.0\.1:\d+\/)/.exec(dash.stdout)![1]!;
      const page = await fetch(url);
      assert.equal(page.status, 200);
      assert.match(await page.text(), /<title>leasehold dashboard<\/title>/);
      assert.equal((await fetch(`${url}state.json`, { method: 'POST' })).status, 405);
      assert.equal((await fetch(`${url}events`, { method: 'DELETE' })).status, 405);
      // DNS rebinding: a page elsewhere whose name resolves to 127.0.0.1 sends its own Host.
      const { request } = await import('node:http');
      const status = await new Promise<number>((resolve, reject) => {
        const req = request(`${url}state.json`, { headers: { host: 'attacker.example:80' } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
        req.end();
      });
      assert.equal(status, 403);
      const state = (await (await fetch(`${url}state.json`)).json()) as { remote: boolean; reads: { total: number } };
      assert.equal(state.remote, false);
      assert.ok(state.reads.total >= 1);
      // --max-clients 1: a second live page is refused, with a line saying why.
      const first = new AbortController();
      const stream = await fetch(`${url}events`, { signal: first.signal });
      assert.equal(stream.status, 200);
      const second = await fetch(`${url}events`);
      assert.equal(second.status, 503);
      assert.match(await second.text(), /at most 1 live pages at once \(--max-clients\)/);
      first.abort();
      await until('the refusal is logged', () => /refused a dashboard client: 1 live pages are open/.test(dash.stderr));
    } finally {
      dash.proc.kill('SIGINT');
      const d = await dash.done;
      assert.equal(d.code, 0, d.stderr);
    }
  });
});
