/**
 * Replicas of an app as real processes, and the checks every integration test makes of what they
 * left: the resource file (what ran) and the slot ledger (what was recorded).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { openStore } from '../../src/backends/index.js';
import { openSlotLedger } from '../../src/backends/index.js';
import type { SlotRecord } from '../../src/scheduler/ledger.js';
import { findFaketime } from '../chaos/services.js';

export interface Replica {
  proc: ChildProcess;
  pid: number;
  out: string;
  /** The exit code, or the signal that ended it. */
  exited: Promise<number | string | null>;
}

/** Starts `script` (compiled JS) with `args`; with `clockOffset` ("-0.4"), under libfaketime when installed. */
export function startReplica(script: string, args: string[], clockOffset?: string, extraEnv: NodeJS.ProcessEnv = {}): Replica {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extraEnv };
  const faketime = clockOffset === undefined ? null : findFaketime();
  if (faketime !== null && clockOffset !== undefined) {
    env['LD_PRELOAD'] = faketime;
    env['FAKETIME'] = clockOffset;
    // Only the wall clock lies: leasehold's local deadlines run on the monotonic one.
    env['FAKETIME_DONT_FAKE_MONOTONIC'] = '1';
  }
  const proc = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  const r: Replica = { proc, pid: proc.pid!, out: '', exited: new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? signal))) };
  proc.stdout!.setEncoding('utf8').on('data', (c: string) => (r.out += c));
  proc.stderr!.setEncoding('utf8').on('data', (c: string) => (r.out += c));
  return r;
}

export const hasFaketime = (): boolean => findFaketime() !== null;

export interface Run {
  what: 'start' | 'end';
  slot: string;
  token: string;
  pid: number;
}

export function readRuns(resource: string): Run[] {
  if (!existsSync(resource)) return [];
  return readFileSync(resource, 'utf8')
    .trim()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const [what, slot, token, pid] = l.split(' ');
      return { what: what as 'start' | 'end', slot: slot!, token: token!, pid: Number(pid) };
    });
}

/**
 * Waits for each replica's `ready` line. How long a process takes to boot is not what these tests
 * measure, and a boot (a NestJS app: 1-2 s of CPU) took over 25 s with ten of them starting at
 * once on a 2-core host at load 20 (CI): the bound is wide (2 minutes), and a replica that exits
 * before it is ready fails the wait at once with its output. The timing the tests do bound (slots
 * run, a takeover) starts from here.
 */
export async function whenReady(replicas: Replica[], line = 'ready'): Promise<void> {
  const end = performance.now() + 120_000;
  for (;;) {
    const gone = replicas.find((r) => r.proc.exitCode !== null || r.proc.signalCode !== null);
    if (gone !== undefined && !gone.out.includes(line)) throw new Error(`replica ${gone.pid} exited (${gone.proc.exitCode ?? gone.proc.signalCode}) before it was ${line}:\n${gone.out}`);
    if (replicas.every((r) => r.out.includes(line))) return;
    if (performance.now() > end) throw new Error(`replicas not ${line} after 120 s: ${replicas.filter((r) => !r.out.includes(line)).map((r) => r.pid).join(', ')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The shared wait (a last look past its deadline; see there). */
export { until } from '../cli/helpers.js';

export async function ledgerRows(url: string, name: string): Promise<SlotRecord[]> {
  const store = await openStore(url);
  const ledger = await openSlotLedger(store, url);
  try {
    return await ledger.records(name, { limit: 10_000 });
  } finally {
    await ledger.close();
    await store.close();
  }
}

/**
 * The promise: every slot from the first row to the last has exactly one row, `periodMs` apart;
 * each is final (succeeded, or skipped with a reason); no slot started twice at the resource
 * unless its row is the rerun of an interrupted term; every succeeded slot reached the resource.
 */
export function checkEverySlotOnce(rows: SlotRecord[], runs: Run[], periodMs: number): { succeeded: number; skipped: SlotRecord[]; twice: number } {
  assert.ok(rows.length > 0, 'the ledger has no rows');
  const times = rows.map((r) => r.slotAtMs!);
  assert.equal(new Set(times).size, times.length, 'a slot has two rows');
  for (let i = 1; i < times.length; i++) assert.equal(times[i]! - times[i - 1]!, periodMs, `a slot is missing from the ledger after ${rows[i - 1]!.key}: ${JSON.stringify(rows.map((r) => [r.key, r.status]))}`);
  for (const r of rows) {
    assert.ok(r.status === 'succeeded' || r.status === 'skipped', `slot ${r.key} is ${r.status} (${r.reason ?? ''}): not final`);
    if (r.status === 'skipped') assert.ok((r.reason ?? '') !== '', `slot ${r.key} skipped without a reason`);
  }
  const starts = new Map<string, number>();
  for (const run of runs.filter((x) => x.what === 'start')) starts.set(run.slot, (starts.get(run.slot) ?? 0) + 1);
  let twice = 0;
  for (const [slot, n] of starts) {
    if (n === 1) continue;
    twice++;
    const row = rows.find((r) => r.key === slot);
    assert.match(row?.reason ?? '', /rerun: term \d+ was interrupted/, `slot ${slot} started ${n} times without being a rerun`);
  }
  for (const r of rows.filter((x) => x.status === 'succeeded')) assert.ok(starts.has(r.key), `slot ${r.key} succeeded in the ledger but never reached the resource`);
  return { succeeded: rows.filter((r) => r.status === 'succeeded').length, skipped: rows.filter((r) => r.status === 'skipped'), twice };
}

/**
 * The overlap rows that are what they say: recorded (by the store's clock) while a run of an
 * earlier slot by the same holder was between its claim and its completion. One job at a time
 * makes such a skip correct whenever a job, with its two ledger writes, outlasts the period
 * (a loaded machine), or when fires queued behind a new term's takeover resume together; an
 * overlap row with no such run is a slot lost while a replica led.
 */
export function justifiedOverlaps(rows: SlotRecord[]): { justified: SlotRecord[]; unjustified: SlotRecord[] } {
  const overlaps = rows.filter((r) => r.status === 'skipped' && /^overlap/.test(r.reason ?? ''));
  const justified = overlaps.filter((o) =>
    rows.some(
      (r) =>
        r !== o &&
        r.holder === o.holder &&
        r.status === 'succeeded' &&
        r.slotAtMs! < o.slotAtMs! &&
        r.startedAtMs !== null &&
        r.endedAtMs !== null &&
        o.startedAtMs !== null &&
        r.startedAtMs <= o.startedAtMs &&
        o.startedAtMs <= r.endedAtMs,
    ),
  );
  return { justified, unjustified: overlaps.filter((o) => !justified.includes(o)) };
}
