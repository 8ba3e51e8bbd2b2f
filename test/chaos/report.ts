/**
 * The three faces of a run: a summary table for the terminal, a JSON file for machines, and an
 * HTML page with an SVG timeline for people (docs/chaos.md explains how to read it).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HistoryEntry } from '../../src/backends/store.js';
import type { Belief, CheckResult } from './checker.js';
import { FAULT_KINDS, type FaultKind, type FaultRecord, type ResourceRow, type StoreKind, type Timing, type WorkerInfo } from './types.js';

export interface RunMeta {
  store: StoreKind;
  storeDescription: string;
  seed: number;
  profile: 'short' | 'long';
  requestedMs: number;
  workers: number;
  timing: Timing;
  unfenced: boolean;
  /** The workers' liveness (absent in reports from before it was an option: 'ttl'). */
  liveness?: 'ttl' | 'session';
  startedAt: string;
  resourceSchema: string;
  kinds: FaultKind[];
  unsupported: Partial<Record<FaultKind, string>>;
  faketime: string | null;
  command: string;
}

export interface ChaosReport {
  meta: RunMeta;
  runStart: number;
  runEnd: number;
  /** Date.now() - mono, measured by the harness (whose clock is never faked). */
  wallMinusMono: number;
  faults: FaultRecord[];
  trims: Array<{ worker: string; at: number }>;
  workers: WorkerInfo[];
  history: HistoryEntry[];
  writes: ResourceRow[];
  highWater: string | null;
  result: CheckResult;
  /** 0: the run proved what it set out to (see docs/chaos.md, "Exit codes"). */
  exitCode: number;
  verdict: string;
  harnessErrors: string[];
}

// ---- summary -----------------------------------------------------------------------------------

const s = (ms: number | null): string => (ms === null ? '-' : ms >= 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms)}ms`);

export function summaryText(r: ChaosReport): string {
  const { meta, result } = r;
  const c = result.counts;
  const ran = (r.runEnd - r.runStart) / 1000;
  const lines: string[] = [];
  lines.push(
    `leasehold chaos: store ${meta.store}, seed ${meta.seed}, ${ran.toFixed(0)}s, ${meta.workers} workers, ttl ${meta.timing.ttlMs}ms ` +
      `${meta.timing.storeTtlMs === meta.timing.ttlMs ? '' : `(${meta.timing.storeTtlMs}ms as the store grants it) `}` +
      `(renew ${meta.timing.renewMs}ms, units ${meta.timing.workMinMs}-${meta.timing.workMaxMs}ms), ${meta.unfenced ? 'UNFENCED (negative control)' : 'fenced'}, liveness ${meta.liveness ?? 'ttl'}`,
  );
  const total = Object.values(result.faultsByKind).reduce((a, b) => a + (b ?? 0), 0);
  const kinds = FAULT_KINDS.filter((k) => meta.kinds.includes(k))
    .map((k) => `${k} ${result.faultsByKind[k] ?? 0}`)
    .join(' | ');
  const rows: Array<[string, string]> = [
    ['faults injected', `${total}: ${kinds}`],
    ...Object.entries(meta.unsupported).map(([k, why]): [string, string] => [`  not here: ${k}`, why ?? '']),
    ['terms granted', `${c.terms} seen by workers, ${c.historyGrants} in the store's history`],
    ...(meta.liveness === 'session' ? [['  tied to a session', `${c.sessionTied} of ${c.terms} (liveness session; an untied term ends at its TTL)`] as [string, string]] : []),
    ['writes accepted', `${c.accepted} (${c.resumedWrites} by restored processes finishing a unit)`],
    ['writes rejected', `${c.rejected} by the fence, ${c.duplicates} by the idempotency key, ${c.writeErrors} failed (resource unreachable)`],
    [
      'belief overlap',
      `${s(result.overlap.totalMs)} in ${result.overlap.episodes} episodes, longest ${s(result.overlap.longestMs)}, up to ${result.overlap.maxConcurrent} at once (measured, not failed)`,
    ],
    [
      'worst failover',
      result.worstFailover === null
        ? '-'
        : `${s(result.worstFailover.ms)} after #${result.worstFailover.n} ${result.worstFailover.kind} (bound ${s(result.worstFailover.boundMs)})`,
    ],
    ...takeoverRows(result.takeovers, meta.timing.ttlMs),
    ['terms written by 2+ processes', `${result.cloneTerms.length} (a restored copy finishing the snapshotted unit)`],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) lines.push(`  ${k.padEnd(w)}  ${v}`);
  lines.push('  failover by kind (worst):');
  for (const k of FAULT_KINDS) {
    const fs = result.failovers.filter((f) => f.kind === k && f.ms !== null);
    if (fs.length === 0) continue;
    const worst = Math.max(...fs.map((f) => f.ms!));
    lines.push(`    ${k.padEnd(16)} ${String(fs.length).padStart(4)} faults, worst ${s(worst).padStart(7)}, bound ${s(fs[0]!.boundMs)}`);
  }
  lines.push('  invariants:');
  for (const v of result.verdicts) {
    const mark = v.ok ? 'PASS' : meta.unfenced && v.safety ? 'VIOLATED (expected)' : 'FAIL';
    lines.push(`    ${mark.padEnd(4)}  ${v.title}: ${v.detail}${v.ok ? '' : `; ${v.violations.length}${v.violations.length >= 25 ? '+' : ''} violation(s)`}`);
    for (const x of v.violations.slice(0, 3)) lines.push(`            - ${x}`);
  }
  for (const e of r.harnessErrors) lines.push(`  harness error: ${e}`);
  lines.push(`verdict: ${r.verdict}`);
  return lines.join('\n');
}

/** Takeover after a leader's SIGKILL and after its session ended, with the belief overlap of the latter. */
function takeoverRows(ts: CheckResult['takeovers'], ttlMs: number): Array<[string, string]> {
  const rows: Array<[string, string]> = [];
  const ms = (x: number): string => `${x}ms (${(x / ttlMs).toFixed(2)}x TTL)`;
  const spread = (xs: number[]): string => {
    const v = [...xs].sort((a, b) => a - b);
    return v.length === 0 ? '-' : `median ${ms(v[Math.floor((v.length - 1) / 2)]!)}, worst ${ms(v[v.length - 1]!)}`;
  };
  const kills = ts.filter((t) => t.kind === 'kill');
  if (kills.length > 0) {
    const took = kills.flatMap((t) => (t.tookOverMs === null ? [] : [t.tookOverMs]));
    const tied = kills.filter((t) => t.tied);
    const tiedTook = tied.flatMap((t) => (t.tookOverMs === null ? [] : [t.tookOverMs]));
    rows.push(['takeover after SIGKILL (leader)', `${kills.length} kills: next leader believed after ${spread(took)}`]);
    if (tied.length > 0) rows.push(['  of a session-tied term', `${tied.length}: ${spread(tiedTook)}`]);
  }
  const ends = ts.filter((t) => t.kind === 'session-end');
  if (ends.length > 0) {
    const down = ends.flatMap((t) => (t.stoodDownMs === null ? [] : [t.stoodDownMs]));
    const took = ends.flatMap((t) => (t.tookOverMs === null ? [] : [t.tookOverMs]));
    const over = ends.flatMap((t) => (t.overlapMs === null ? [] : [t.overlapMs]));
    rows.push(['session ended (leader lives)', `${ends.length}: it stood down after ${spread(down)}; the next leader believed after ${spread(took)}`]);
    rows.push(['  belief overlap there', `${over.filter((x) => x > 0).length} of ${over.length} overlapped, ${spread(over)} (the fence covers it)`]);
  }
  return rows;
}

// ---- JSON --------------------------------------------------------------------------------------

function json(r: ChaosReport): string {
  const { workers, writes, ...rest } = r;
  return JSON.stringify(
    {
      ...rest,
      // Events stay in workers/*.jsonl; the resource log is summarised (full rows in writes.jsonl).
      workers: workers.map(({ events, ...w }) => ({ ...w, events: events.length })),
      writes: writes.length,
    },
    (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v),
    2,
  );
}

export function writeReport(dir: string, r: ChaosReport): { json: string; html: string; svg: string } {
  const paths = { json: join(dir, 'report.json'), html: join(dir, 'report.html'), svg: join(dir, 'timeline.svg') };
  writeFileSync(paths.json, json(r));
  writeFileSync(join(dir, 'writes.jsonl'), r.writes.map((w) => JSON.stringify({ ...w, token: String(w.token) })).join('\n') + '\n');
  const svg = renderSvg(r);
  writeFileSync(paths.svg, svg);
  writeFileSync(paths.html, renderHtml(r, svg));
  writeFileSync(join(dir, 'summary.txt'), summaryText(r) + '\n');
  return paths;
}

// ---- SVG timeline ------------------------------------------------------------------------------

export const KIND_COLOR: Record<FaultKind, string> = {
  pause: '#8e44ad',
  kill: '#c0392b',
  term: '#e67e22',
  snapshot: '#16a085',
  fork: '#2980b9',
  'clock-jump': '#d35400',
  'clock-past': '#7f8c8d',
  'proxy-delay': '#b7950b',
  'proxy-blackhole': '#2c3e50',
  'proxy-reset': '#e74c3c',
  restart: '#27ae60',
  'session-end': '#6c3483',
};

const esc = (x: string): string => x.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const f1 = (x: number): string => x.toFixed(1);

function tokenLabel(token: string): string {
  return token.length > 6 ? `…${token.slice(-4)}` : token;
}

interface StoreTerm {
  worker: string;
  token: string;
  from: number;
  to: number;
  /** Not in the store's history (a Redis that restarted empty lost it): drawn from the grant a worker saw. */
  inferred: boolean;
}

/** Store-recorded terms from the history, placed at the grant the worker saw when it can be matched. */
function storeTerms(r: ChaosReport, holderToWorker: Map<string, string>): StoreTerm[] {
  const grantAt = new Map(r.result.grants.map((g) => [`${g.holder}|${g.token}`, g.at]));
  const at = (h: HistoryEntry): number => grantAt.get(`${h.holder}|${h.token}`) ?? h.atMs - r.wallMinusMono;
  const out: StoreTerm[] = [];
  const hs = r.history;
  const recorded = new Set<string>();
  for (let i = 0; i < hs.length; i++) {
    const h = hs[i]!;
    if (h.event !== 'acquired' && h.event !== 'takeover') continue;
    recorded.add(String(h.token));
    const worker = h.holder === null ? undefined : holderToWorker.get(h.holder);
    if (worker === undefined) continue;
    const from = Math.max(r.runStart, at(h));
    const next = hs[i + 1];
    const to = Math.min(r.runEnd, next === undefined ? r.runEnd : Math.max(from, at(next)));
    out.push({ worker, token: String(h.token), from, to, inferred: false });
  }
  const grants = r.result.grants;
  grants.forEach((g, i) => {
    if (recorded.has(String(g.token))) return;
    const next = grants[i + 1];
    const belief = r.result.beliefs.find((b) => b.worker === g.worker && b.token === String(g.token));
    const to = Math.min(r.runEnd, next === undefined ? r.runEnd : next.at, belief === undefined ? r.runEnd : belief.to);
    out.push({ worker: g.worker, token: String(g.token), from: g.at, to: Math.max(g.at, to), inferred: true });
  });
  return out;
}

export function renderSvg(r: ChaosReport): string {
  const t0 = r.runStart;
  const dur = Math.max(1, r.runEnd - t0);
  const plotW = Math.min(24_000, Math.max(900, (dur / 1000) * 40));
  const left = 120;
  const X = (t: number): number => left + ((t - t0) / dur) * plotW;
  const W = left + plotW + 20;

  // Lanes: a process takes the first lane free since its predecessor exited.
  const laneEnd: number[] = [];
  const laneOf = new Map<string, number>();
  for (const w of [...r.workers].sort((a, b) => a.spawnedAt - b.spawnedAt)) {
    let lane = laneEnd.findIndex((end) => end + 300 < w.spawnedAt);
    if (lane < 0) lane = laneEnd.push(0) - 1;
    laneEnd[lane] = w.exitedAt ?? r.runEnd;
    laneOf.set(w.id, lane);
  }
  // A holder id belongs to the process the store granted it to (restored copies reuse it).
  const holderToWorker = new Map<string, string>();
  for (const g of r.result.grants) if (!holderToWorker.has(g.holder)) holderToWorker.set(g.holder, g.worker);
  const tokens = [...new Set([...r.writes.map((w) => String(w.token)), ...r.result.grants.map((g) => String(g.token))])].sort((a, b) =>
    BigInt(a) < BigInt(b) ? -1 : 1,
  );
  const hueOf = new Map(tokens.map((t, i) => [t, Math.round((i * 137.508) % 360)]));
  const color = (token: string, l = 45): string => `hsl(${hueOf.get(token) ?? 0},65%,${l}%)`;

  const axisH = 22;
  const faultY = axisH + 4;
  const faultH = 30;
  const resY = faultY + faultH + 8;
  const resH = 26;
  const laneY0 = resY + resH + 10;
  const laneH = 40;
  const lanesH = Math.max(1, laneEnd.length) * laneH;
  const legendY = laneY0 + lanesH + 16;
  // The legend, wrapped to the picture's width.
  const items: Array<[string, string, number]> = [
    ['believes it leads', `<rect width="18" height="9" fill="hsl(200,65%,80%)" stroke="hsl(200,65%,45%)"/>`, 24],
    ['… in jeopardy', `<rect width="18" height="9" fill="url(#jeop)"/>`, 24],
    ['store: term (token)', `<rect y="2" width="18" height="5" fill="hsl(200,65%,45%)"/>`, 24],
    ['write accepted', `<line x1="9" y1="0" x2="9" y2="9" stroke="#2e8b57" stroke-width="1.5"/>`, 24],
    ['write fenced', `<g stroke="#d00" stroke-width="1.6"><line x1="6" y1="0" x2="12" y2="9"/><line x1="6" y1="9" x2="12" y2="0"/></g>`, 24],
    ['duplicate refused', `<rect x="6" y="1" width="7" height="7" fill="#8e44ad"/>`, 24],
    ['frozen (SIGSTOP)', `<rect width="18" height="9" fill="url(#hatch)"/>`, 24],
    ['✕ killed  ■ exited  ! crashed', '', 0],
    ...FAULT_KINDS.filter((k) => r.meta.kinds.includes(k)).map((k): [string, string, number] => [k, `<rect width="12" height="9" fill="${KIND_COLOR[k]}"/>`, 16]),
  ];
  const legend: string[] = [];
  let lx = left;
  let legendRows = 1;
  for (const [label, glyph, textX] of items) {
    const w = textX + label.length * 6.2 + 16;
    if (lx + w > left + plotW && lx > left) {
      lx = left;
      legendRows++;
    }
    legend.push(`<g transform="translate(${f1(lx)},${legendY + (legendRows - 1) * 20})">${glyph}<text x="${textX}" y="9">${esc(label)}</text></g>`);
    lx += w;
  }
  const H = legendY + legendRows * 20 + 24;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${f1(W)}" height="${H}" viewBox="0 0 ${f1(W)} ${H}" font-family="ui-monospace,Menlo,Consolas,monospace" font-size="10">`,
    `<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#999" stroke-width="2"/></pattern>` +
      `<pattern id="jeop" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><line x1="0" y1="0" x2="0" y2="4" stroke="#e67e22" stroke-width="2"/></pattern></defs>`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
  );

  // Fault bands behind everything, and the axis.
  for (const f of r.faults) {
    if (f.params['skipped'] === true) continue;
    const x = X(f.start);
    const w = Math.max(2, X(Math.max(f.heal, f.start)) - x);
    out.push(`<rect x="${f1(x)}" y="${faultY}" width="${f1(w)}" height="${f1(laneY0 + lanesH - faultY)}" fill="${KIND_COLOR[f.kind]}" opacity="0.07"/>`);
  }
  const stepS = [1, 2, 5, 10, 15, 30, 60, 120, 300].find((st) => (st * 1000 * plotW) / dur >= 70) ?? 600;
  for (let sec = 0; sec * 1000 <= dur; sec += stepS) {
    const x = X(t0 + sec * 1000);
    out.push(`<line x1="${f1(x)}" y1="${axisH - 4}" x2="${f1(x)}" y2="${laneY0 + lanesH}" stroke="#eee"/>`, `<text x="${f1(x)}" y="${axisH - 8}" text-anchor="middle" fill="#666">${sec}s</text>`);
  }

  // Faults row.
  out.push(`<text x="6" y="${faultY + 18}" fill="#333" font-weight="bold">faults</text>`);
  r.faults.forEach((f, i) => {
    if (f.params['skipped'] === true) return;
    const x = X(f.start);
    const w = Math.max(3, X(Math.max(f.heal, f.start)) - x);
    const y = faultY + (i % 2) * 15;
    out.push(
      `<g><title>#${f.n} ${esc(f.kind)}: ${esc(f.note)}</title><rect x="${f1(x)}" y="${y}" width="${f1(w)}" height="13" rx="2" fill="${KIND_COLOR[f.kind]}"/>` +
        `<text x="${f1(x + 2)}" y="${y + 10}" fill="#fff" font-size="9">${esc(`#${f.n} ${f.kind}`)}</text></g>`,
    );
  });

  // The resource: every accepted write, coloured by term; rejections below the line.
  out.push(`<text x="6" y="${resY + 16}" fill="#333" font-weight="bold">resource</text>`, `<line x1="${left}" y1="${resY + resH / 2}" x2="${f1(left + plotW)}" y2="${resY + resH / 2}" stroke="#ddd"/>`);
  for (const w of r.writes) {
    out.push(`<line x1="${f1(X(w.t))}" y1="${resY + 2}" x2="${f1(X(w.t))}" y2="${resY + resH / 2}" stroke="${color(String(w.token))}" stroke-width="1.5"><title>#${w.id} ${esc(w.worker)} token ${w.token}</title></line>`);
  }

  // Worker lanes.
  const byWorker = new Map<string, Belief[]>();
  for (const b of r.result.beliefs) byWorker.set(b.worker, [...(byWorker.get(b.worker) ?? []), b]);
  const terms = storeTerms(r, holderToWorker);
  for (let lane = 0; lane < laneEnd.length; lane++) {
    const y = laneY0 + lane * laneH;
    out.push(`<rect x="${left}" y="${y}" width="${f1(plotW)}" height="${laneH - 4}" fill="${lane % 2 === 0 ? '#fafafa' : '#f4f4f4'}"/>`);
    out.push(`<text x="6" y="${y + 22}" fill="#333">lane ${lane + 1}</text>`);
  }
  for (const w of r.workers) {
    const lane = laneOf.get(w.id)!;
    const y = laneY0 + lane * laneH;
    const x0 = X(w.spawnedAt);
    const x1 = X(w.exitedAt ?? r.runEnd);
    out.push(`<line x1="${f1(x0)}" y1="${y + 20}" x2="${f1(x1)}" y2="${y + 20}" stroke="#bbb"/>`);
    for (const [a, b] of w.stopped) out.push(`<rect x="${f1(X(a))}" y="${y}" width="${f1(Math.max(1, X(b) - X(a)))}" height="${laneH - 4}" fill="url(#hatch)" opacity="0.8"><title>${esc(w.id)} frozen (SIGSTOP)</title></rect>`);
    for (const b of byWorker.get(w.id) ?? []) {
      const bx = X(b.from);
      const bw = Math.max(1, X(b.to) - bx);
      out.push(`<rect x="${f1(bx)}" y="${y + 3}" width="${f1(bw)}" height="11" fill="${color(b.token, 80)}" stroke="${color(b.token)}" stroke-width="0.8"><title>${esc(w.id)} believes it leads, token ${b.token}; ended: ${esc(b.end)}</title></rect>`);
      for (const [a, c] of b.jeopardy) out.push(`<rect x="${f1(X(a))}" y="${y + 3}" width="${f1(Math.max(1, X(c) - X(a)))}" height="11" fill="url(#jeop)"/>`);
    }
    for (const t of terms.filter((x) => x.worker === w.id)) {
      const tx = X(t.from);
      const tw = Math.max(1, X(t.to) - tx);
      const title = t.inferred ? `store history lost (store restarted empty); ${w.id} was granted token ${t.token}` : `store: ${w.id} holds token ${t.token}`;
      out.push(`<rect x="${f1(tx)}" y="${y + 16}" width="${f1(tw)}" height="5" fill="${color(t.token)}"${t.inferred ? ' opacity="0.35"' : ''}><title>${esc(title)}</title></rect>`);
      if (tw > 34) out.push(`<text x="${f1(tx + 2)}" y="${y + 12}" font-size="8" fill="#222">${esc(tokenLabel(t.token))}</text>`);
    }
    for (const e of w.events) {
      const x = X(e.t);
      if (e.ev === 'accepted') out.push(`<line x1="${f1(x)}" y1="${y + 24}" x2="${f1(x)}" y2="${y + 32}" stroke="#2e8b57" stroke-width="1.2"/>`);
      else if (e.ev === 'fenced')
        out.push(`<g stroke="#d00" stroke-width="1.6"><title>${esc(w.id)}: write with token ${e.token} fenced (high-water ${e.highWater ?? '?'})</title><line x1="${f1(x - 3)}" y1="${y + 24}" x2="${f1(x + 3)}" y2="${y + 32}"/><line x1="${f1(x - 3)}" y1="${y + 32}" x2="${f1(x + 3)}" y2="${y + 24}"/></g>`);
      else if (e.ev === 'duplicate') out.push(`<rect x="${f1(x - 3)}" y="${y + 25}" width="6" height="6" fill="#8e44ad"><title>${esc(w.id)}: duplicate unit refused by the idempotency key</title></rect>`);
      else if (e.ev === 'write-error') out.push(`<circle cx="${f1(x)}" cy="${y + 28}" r="2" fill="#999"/>`);
    }
    const origin = w.origin === 'initial' ? '' : ` ${w.origin}${w.parent === undefined ? '' : ` of ${w.parent}`}`;
    out.push(`<text x="${f1(x0 + 2)}" y="${y + 38}" font-size="8" fill="#555">${esc(w.id + origin)}</text>`);
    if (w.exitedAt !== null) {
      const mark = w.exit.startsWith('SIGKILL') ? '✕' : w.exit.startsWith('exit 0') ? '■' : '!';
      out.push(`<text x="${f1(x1)}" y="${y + 24}" text-anchor="middle" font-size="11" fill="${mark === '!' ? '#d00' : '#333'}"><title>${esc(w.id)}: ${esc(w.exit)}</title>${mark}</text>`);
    }
  }

  out.push(...legend);
  out.push(
    `<text x="${left}" y="${legendY + legendRows * 20 + 12}" fill="#555">${esc(`leasehold chaos · ${r.meta.store} · seed ${r.meta.seed} · ttl ${r.meta.timing.ttlMs}ms · ${r.meta.unfenced ? 'UNFENCED' : 'fenced'} · ${r.verdict}`)}</text>`,
  );
  out.push('</svg>');
  return out.join('\n');
}

// ---- HTML ----------------------------------------------------------------------------------------

export function renderHtml(r: ChaosReport, svg: string): string {
  const rel = (t: number): string => `${((t - r.runStart) / 1000).toFixed(1)}s`;
  const fo = new Map(r.result.failovers.map((f) => [f.n, f]));
  const faultRows = r.faults
    .map((f) => {
      const x = fo.get(f.n);
      return `<tr><td>${f.n}</td><td><span class="k" style="background:${KIND_COLOR[f.kind]}"></span>${esc(f.kind)}</td><td>${esc(f.targets.join(', '))}</td><td>${esc(f.role)}</td><td>${rel(f.start)}</td><td>${s(f.heal - f.start)}</td><td>${x === undefined ? '' : `${s(x.ms)} / ${s(x.boundMs)}${x.from === undefined ? '' : ` (from ${esc(x.from)})`}`}</td><td>${esc(f.note)}</td></tr>`;
    })
    .join('\n');
  const verdictRows = r.result.verdicts
    .map(
      (v) =>
        `<tr class="${v.ok ? 'ok' : r.meta.unfenced && v.safety ? 'exp' : 'bad'}"><td>${v.ok ? 'PASS' : r.meta.unfenced && v.safety ? 'VIOLATED (expected)' : 'FAIL'}</td><td>${esc(v.title)}</td><td>${esc(v.detail)}${
          v.violations.length === 0 ? '' : `<ul>${v.violations.map((x) => `<li>${esc(x)}</li>`).join('')}</ul>`
        }</td></tr>`,
    )
    .join('\n');
  const budget = new Map(r.result.budgets.map((b) => [b.worker, b]));
  const workerRows = r.workers
    .map((w) => {
      const b = budget.get(w.id);
      const acc = w.events.filter((e) => e.ev === 'accepted').length;
      const fen = w.events.filter((e) => e.ev === 'fenced').length;
      const terms = w.events.filter((e) => e.ev === 'acquired').length;
      return `<tr><td>${esc(w.id)}</td><td>${esc(w.origin)}${w.parent === undefined ? '' : ` of ${esc(w.parent)}`}</td><td>${esc(w.mode)}</td><td>${rel(w.spawnedAt)} - ${w.exitedAt === null ? 'end' : rel(w.exitedAt)}</td><td>${esc(w.exit)}</td><td>${terms}</td><td>${acc}</td><td>${fen}</td><td>${b === undefined ? '' : `${b.claims} (${b.perTtl}/TTL, budget ${b.allowed})`}</td></tr>`;
    })
    .join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>leasehold chaos: ${esc(r.meta.store)} seed ${r.meta.seed}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222}
pre{background:#f6f6f6;padding:12px;overflow:auto;font-size:12px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ddd;padding:3px 8px;vertical-align:top;font-size:13px}
tr.ok td:first-child{color:#1e7e34;font-weight:bold}tr.bad td:first-child{color:#c00;font-weight:bold}tr.exp td:first-child{color:#b36b00;font-weight:bold}
.scroll{overflow-x:auto;border:1px solid #ddd}.k{display:inline-block;width:10px;height:10px;margin-right:6px}
</style></head><body>
<h1>leasehold chaos: ${esc(r.meta.store)}, seed ${r.meta.seed}${r.meta.unfenced ? ' (UNFENCED negative control)' : ''}</h1>
<p><b>${esc(r.verdict)}</b>. Started ${esc(r.meta.startedAt)}; replay with <code>${esc(r.meta.command)}</code>.</p>
<h2>Timeline</h2>
<p>One lane per worker process (a lane is reused once its process has gone). Top bar of a lane: when the process <i>believed</i> it led
(hatched orange: jeopardy, token withheld). Thin bar: the term the <i>store</i> recorded, with its token. Ticks below: writes the resource
accepted (green) and fenced (red ✕). Coloured bands: faults. Hover for details. Overlapping top bars in two lanes are belief overlap:
expected under pauses, harmless while every stale write is fenced.</p>
<div class="scroll">${svg}</div>
<h2>Summary</h2>
<pre>${esc(summaryText(r))}</pre>
<h2>Invariants</h2>
<table><tr><th>verdict</th><th>invariant</th><th>detail</th></tr>${verdictRows}</table>
<h2>Faults</h2>
<table><tr><th>#</th><th>kind</th><th>target</th><th>role</th><th>at</th><th>lasted</th><th>failover / bound</th><th>what was done</th></tr>${faultRows}</table>
<h2>Workers</h2>
<table><tr><th>id</th><th>origin</th><th>mode</th><th>alive</th><th>end</th><th>terms</th><th>accepted</th><th>fenced</th><th>acquisition claims</th></tr>${workerRows}</table>
<p>Raw data next to this file: <code>report.json</code>, <code>writes.jsonl</code> (the resource log), <code>workers/*.jsonl</code> (each worker's own log), <code>nemesis.jsonl</code>.</p>
</body></html>
`;
}
