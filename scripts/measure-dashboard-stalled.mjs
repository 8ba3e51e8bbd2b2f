#!/usr/bin/env node
// Measures `leasehold dashboard` under event-stream clients that never read (issue 28 row 4):
// a SQLite store whose history holds ~400 KB of revocation reasons, one lease changing every
// 200 ms, N raw sockets that send `GET /events` and then stop reading. Prints the dashboard's
// RSS (VmRSS from /proc) over time, after the clients leave, and how many extra clients were
// let in. Run after `npx tsc -p tsconfig.json`:
//
//   node scripts/measure-dashboard-stalled.mjs [--clients 10] [--seconds 60] [--extra 200]
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const { openStore } = await import(join(ROOT, 'dist/src/backends/index.js'));
const { values } = parseArgs({ options: { clients: { type: 'string', default: '10' }, seconds: { type: 'string', default: '60' }, extra: { type: 'string', default: '200' } } });
const CLIENTS = Number(values.clients);
const SECONDS = Number(values.seconds);
const EXTRA = Number(values.extra);

const rssMb = (pid) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? NaN : Math.round(Number(m[1]) / 1024);
};

const dir = mkdtempSync(join(tmpdir(), 'lh-dash-rss-'));
const url = `sqlite:${join(dir, 'leases.db')}`;
const store = await openStore(url);
await store.migrate();
const claim = (name) => store.claim([{ name, holder: `measure:${process.pid}`, ttlMs: 60_000, expect: null, nextNonce: randomBytes(16).toString('base64url') }]);
const reason = 'r'.repeat(1000);
for (let i = 0; i < 300; i++) {
  await claim('filler');
  await store.revoke('filler', `${i} ${reason}`);
}

const dash = spawn(process.execPath, [join(ROOT, 'bin/leasehold.js'), 'dashboard', '--store', url, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
let stdout = '';
dash.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
while (!/http:\/\/127\.0\.0\.1:(\d+)\//.test(stdout)) await sleep(50);
const port = Number(/http:\/\/127\.0\.0\.1:(\d+)\//.exec(stdout)[1]);
const stateSize = (await (await fetch(`http://127.0.0.1:${port}/state.json`)).text()).length;
console.log(`state message ${Math.round(stateSize / 1024)} KB; RSS at start ${rssMb(dash.pid)} MB`);

/** A client that asks for the event stream and never reads it; resolves with the status line seen, if any. */
function stalled() {
  const s = connect(port, '127.0.0.1');
  let head = '';
  const status = new Promise((resolve) => {
    s.once('data', (d) => {
      head = d.toString('latin1').split('\r\n')[0];
      s.pause(); // from here on nothing is read: the kernel buffers fill and the server must cope
      resolve(head);
    });
    s.once('close', () => resolve(head || 'closed'));
    s.on('error', () => {});
  });
  s.write(`GET /events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
  return { socket: s, status };
}

const clients = Array.from({ length: CLIENTS }, stalled);
await Promise.all(clients.map((c) => c.status));
let changing = true;
const driver = (async () => {
  while (changing) {
    await claim('busy');
    await store.revoke('busy', 'tick');
    await sleep(200);
  }
})();
const t0 = performance.now();
let peak = 0;
for (let t = 5; t <= SECONDS; t += 5) {
  await sleep(t0 + t * 1000 - performance.now());
  const r = rssMb(dash.pid);
  peak = Math.max(peak, r);
  const st = await (await fetch(`http://127.0.0.1:${port}/state.json`)).json();
  console.log(`t=${t}s RSS ${r} MB (the dashboard says: clients ${st.clients}, dropped ${st.dropped ?? '(not counted)'})`);
}
for (const c of clients) c.socket.destroy();
await sleep(10_000);
console.log(`10s after the clients left: RSS ${rssMb(dash.pid)} MB (peak ${peak} MB)`);

const extra = Array.from({ length: EXTRA }, stalled);
const statuses = await Promise.all(extra.map((c) => c.status));
const counts = {};
for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
console.log(`${EXTRA} more event-stream clients at once: ${JSON.stringify(counts)}`);
for (const c of extra) c.socket.destroy();

changing = false;
await driver;
dash.kill('SIGTERM');
await new Promise((r) => dash.once('close', r));
await store.close();
rmSync(dir, { recursive: true, force: true });
