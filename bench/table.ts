/**
 * The figures table of docs/benchmarks.md, written from a bench run's JSON (bench/run.ts
 * `--json`), so the published figures are one run's, on one machine, and not edited by hand.
 * scripts/bench-docs.mjs runs the full bench and calls {@link replaceTable}.
 */
import type { Result } from './lib.js';

export interface BenchRun {
  mode: string;
  machine: string;
  date: string;
  seconds: number;
  results: Result[];
  skipped: { figure: string; store: string; why: string }[];
}

/** What the run does not record but the reader needs: the load it ran under. */
export interface RunContext {
  loadBefore: number[];
  loadAfter: number[];
  command: string;
}

export const TABLE_START = '<!-- bench-table:start (written by scripts/bench-docs.mjs; do not edit by hand) -->';
export const TABLE_END = '<!-- bench-table:end -->';

const STORE_NAMES: Record<string, string> = { postgres: 'PostgreSQL', sqlite: 'SQLite', redis: 'Redis', etcd: 'etcd', mysql: 'MySQL (MariaDB)' };

function num(x: number): string {
  if (!Number.isFinite(x) || Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : a >= 1 ? x.toFixed(2) : x.toFixed(3);
}

/** Pipes and line breaks would break a Markdown table cell. */
function cell(s: string): string {
  return s.replace(/\|/g, '\\|').replace(/\s*\n\s*/g, ' ');
}

function stat(s: { median: number; p90: number }, unit: string): string {
  // No sample measured (a baseline that failed every time: the row says why among its extras).
  if (Number.isNaN(s.median)) return 'failed';
  return `${num(s.median)} ${unit} (p90 ${num(s.p90)})`;
}

function extras(e: Result['extra']): string {
  if (e === undefined) return '';
  return Object.entries(e)
    .map(([k, v]) => `${k} ${typeof v === 'number' ? num(v) : v}`)
    .join('; ');
}

/** The table, with the run it came from above it and what it could not measure below it. */
export function renderTable(run: BenchRun, ctx: RunContext): string {
  const load = (l: number[]): string => l.map((x) => x.toFixed(1)).join(' / ');
  const lines = [
    `One \`${ctx.command}\` run (${run.mode}), ${run.date.slice(0, 10)}, ${run.machine}, ${Math.round(run.seconds)} s; ` +
      (ctx.loadBefore.length === 0 ? 'load not recorded. ' : `load average (1 / 5 / 15 min) ${load(ctx.loadBefore)} before and ${load(ctx.loadAfter)} after. `) +
      `Read the ratios, not the milliseconds: ` +
      `each baseline ran interleaved with its figure, on the same store, in the same minutes.`,
    '',
    '| figure | store | what | leasehold median (p90) | baseline, same run | ratio | also counted |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const r of run.results) {
    lines.push(
      `| ${cell(r.figure)} | ${cell(STORE_NAMES[r.store] ?? r.store)} | ${cell(r.label)} | ${cell(stat(r.leasehold, r.unit))} | ${cell(`${r.baselineName}: ${stat(r.baseline, r.unit)}`)} | ${Number.isFinite(r.ratio) ? `${num(r.ratio)}x` : 'n/a'} | ${cell(extras(r.extra))} |`,
    );
  }
  if (run.skipped.length > 0) {
    lines.push('', 'Not measured in this run:', '');
    for (const s of run.skipped) lines.push(`- ${s.figure} on ${STORE_NAMES[s.store] ?? s.store}: ${s.why.replace(/\s*\n\s*/g, ' ')}`);
  }
  return lines.join('\n');
}

/**
 * `doc` with the text between the markers replaced by the table.
 * @throws {Error} when the markers are missing or out of order: the table's place is chosen by hand once.
 */
export function replaceTable(doc: string, table: string): string {
  const start = doc.indexOf(TABLE_START);
  const end = doc.indexOf(TABLE_END);
  if (start === -1 || end === -1 || end < start) {
    throw new Error(`the document has no "${TABLE_START}" ... "${TABLE_END}" section to write the table into`);
  }
  return `${doc.slice(0, start + TABLE_START.length)}\n${table}\n${doc.slice(end)}`;
}
