/**
 * Each app under examples/ run as its README says, against a real PostgreSQL, checking what the
 * README promises: the library example migrates a fresh schema and runs a key once ever; the
 * node-cron and NestJS examples, started twice, print each second's slot in exactly one of them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { TEST_PG_URL, makeTestStore, selectedStores, type TestStore } from '../helpers/stores.js';
import { startReplica, until, type Replica } from './replicas.js';

// Compiled to dist/test/integrations/: the repository root is three levels up.
const root = fileURLToPath(new URL('../../../', import.meta.url));
const example = (p: string): string => `${root}examples/${p}`;
const skip = selectedStores().includes('postgres') ? false : 'needs PostgreSQL (LEASEHOLD_TEST_STORES)';
const stores: TestStore[] = [];
const schemas: string[] = [];
const running: Replica[] = [];
after(async () => {
  for (const r of running) r.proc.kill('SIGKILL');
  for (const s of stores) await s.cleanup();
  const c = new pg.Client({ connectionString: TEST_PG_URL });
  await c.connect();
  for (const s of schemas) await c.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  await c.end();
});

const slotLines = (out: string): string[] => [...out.matchAll(/^slot (\S+) token (\d+)/gm)].map((m) => m[1]!);

/** Two copies of an app for `ms`, then SIGTERM: each printed slot is printed by one of them only. */
async function twoCopies(script: string, url: string, ms: number, exit: number | string = 0): Promise<{ slots: string[]; outs: string[] }> {
  const copies = [startReplica(script, [], undefined, { DATABASE_URL: url }), startReplica(script, [], undefined, { DATABASE_URL: url })];
  running.push(...copies);
  // Startup, then at least `ms` of one-second slots.
  await until('the copies printed slots', () => slotLines(copies.map((c) => c.out).join('')).length >= 2, 25_000);
  await new Promise((r) => setTimeout(r, ms));
  for (const c of copies) c.proc.kill('SIGTERM');
  const codes = await Promise.all(copies.map((c) => c.exited));
  const outs = copies.map((c) => c.out);
  assert.deepEqual(codes, [exit, exit], outs.join('\n---\n'));
  const slots = outs.flatMap(slotLines);
  assert.equal(new Set(slots).size, slots.length, `a slot was printed twice:\n${outs.join('\n---\n')}`);
  return { slots, outs };
}

void describe('examples/', { concurrency: true, skip }, () => {
  void it('postgres-library: migrates a fresh schema; the key runs once across two copies started together and never again; each slot prints once', async () => {
    assert.match(readFileSync(example('postgres-library/README.md'), 'utf8'), /ran KEY with token N/);
    const schema = `lh_ex_${randomBytes(4).toString('hex')}`;
    schemas.push(schema);
    const url = `${TEST_PG_URL}${TEST_PG_URL.includes('?') ? '&' : '?'}schema=${schema}`;
    // The first copy migrates alone (two at once would race to create the schema); then two together.
    const first = startReplica(example('postgres-library/index.mjs'), ['k-2026-03'], undefined, { DATABASE_URL: url, RUN_FOR_MS: '100' });
    assert.equal(await first.exited, 0, first.out);
    assert.match(first.out, /^ran k-2026-03 with token \d+$/m);
    const pair = [0, 1].map(() => startReplica(example('postgres-library/index.mjs'), ['k-2026-04'], undefined, { DATABASE_URL: url, RUN_FOR_MS: '3000' }));
    running.push(...pair);
    const codes = await Promise.all(pair.map((p) => p.exited));
    const outs = pair.map((p) => p.out);
    assert.deepEqual(codes, [0, 0], outs.join('\n---\n'));
    assert.equal(outs.filter((o) => /^ran k-2026-04 with token \d+$/m.test(o)).length, 1, outs.join('\n---\n'));
    assert.equal(outs.filter((o) => /^k-2026-04 already succeeded \(token \d+\)$/m.test(o)).length, 1, outs.join('\n---\n'));
    const slots = outs.flatMap(slotLines);
    assert.ok(slots.length >= 2, outs.join('\n---\n'));
    assert.equal(new Set(slots).size, slots.length, `a slot was printed twice:\n${outs.join('\n---\n')}`);
    const again = startReplica(example('postgres-library/index.mjs'), ['k-2026-03'], undefined, { DATABASE_URL: url, RUN_FOR_MS: '100' });
    assert.equal(await again.exited, 0, again.out);
    assert.match(again.out, /^k-2026-03 already succeeded \(token \d+\)$/m);
  });

  void it('node-cron: two copies, each second printed by one of them', async () => {
    const ts = await makeTestStore('postgres');
    stores.push(ts);
    const { slots } = await twoCopies(example('node-cron/index.mjs'), ts.url, 3000);
    assert.ok(slots.length >= 3, `${slots.length} slots`);
  });

  void it('fleet-agent: two agents; place, owner live, the owner SIGKILLed reads dead (exit 5, never "no owner"), reassign raises the generation', async () => {
    const ts = await makeTestStore('postgres');
    stores.push(ts);
    // Short heartbeats so the dead owner is stale within the test, but a stale-after (the liveness
    // lease's TTL) the surviving agent keeps on a loaded host: with 1s, CI at load 20 saw it lose its
    // lease to a stall, and reassign found no live agent.
    const staleAfterMs = 3000;
    const env = { DATABASE_URL: ts.url, HEARTBEAT: '1s', STALE_AFTER: `${staleAfterMs}ms` };
    const agents = ['web-1', 'web-2'].map((id) => startReplica(example('fleet-agent/agent.mjs'), [id], undefined, env));
    running.push(...agents);
    await until('both agents live', () => agents.every((a) => /agent web-\d live/.test(a.out)), 20_000);
    const client = async (...args: string[]): Promise<{ code: number | string | null; out: string }> => {
      const c = startReplica(example('fleet-agent/fleet.mjs'), args, undefined, env);
      return { code: await c.exited, out: c.out };
    };
    const placed = await client('place', 'billing');
    const m = /^placed billing on (web-\d) generation (\d+)$/m.exec(placed.out);
    assert.ok(m !== null, placed.out);
    const [, owner, generation] = m;
    const live = await client('owner', 'billing');
    assert.match(live.out, new RegExp(`^billing owner ${owner!} generation ${generation!} live$`, 'm'));
    const victim = agents.find((a) => a.out.includes(`agent ${owner!} live`))!;
    victim.proc.kill('SIGKILL');
    await victim.exited;
    // Dead once the store's clock passes its stale-after since the last heartbeat: 4 stale-afters
    // bound the wait (each probe is a process of its own).
    let dead = await client('owner', 'billing');
    for (const end = Date.now() + 4 * staleAfterMs; dead.code !== 5 && Date.now() < end; dead = await client('owner', 'billing')) await new Promise((r) => setTimeout(r, 300));
    assert.equal(dead.code, 5, dead.out);
    assert.match(dead.out, /^billing owner is dead: /m);
    const moved = await client('reassign', 'billing', owner!);
    const n = /^moved billing to (web-\d) generation (\d+)$/m.exec(moved.out);
    assert.ok(n !== null, moved.out);
    assert.notEqual(n[1], owner);
    assert.ok(BigInt(n[2]!) > BigInt(generation!), `generation ${n[2]} is not above ${generation}`);
  });

  void it('nestjs: compiles with its tsconfig; two copies, each second printed by one of them', async () => {
    const tsc = spawnSync(process.execPath, [`${root}node_modules/typescript/bin/tsc`, '-p', example('nestjs')], { encoding: 'utf8' });
    assert.equal(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`);
    const ts = await makeTestStore('postgres');
    stores.push(ts);
    // enableShutdownHooks(): Nest closes the app (and the lease) on SIGTERM, then re-raises it.
    const { slots, outs } = await twoCopies(example('nestjs/dist/main.js'), ts.url, 3000, 'SIGTERM');
    assert.ok(slots.length >= 3, `${slots.length} slots`);
    assert.match(outs.join(''), /holder /, 'the injected Leasehold was not reachable from the job');
  });
});
