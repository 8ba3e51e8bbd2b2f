import type { HistoryEntry } from '../backends/store.js';
import type { Report, ReportOf, WriteRow } from './protocol.js';

/** What the demo did and saw, gathered for the timeline and the claims. */
export interface DemoFacts {
  t0: number;
  /** The store's history for the demo lease, in order. */
  history: HistoryEntry[];
  /** The accepted writes, from the demo table, in commit order. */
  rows: WriteRow[];
  /** Everything the workers reported. */
  reports: Report[];
  workerOf(holder: string | null): string;
  frozen?: { worker: string; token: bigint; seq: number; at: number; thawedAt?: number };
  killed?: { worker: string; token: bigint; at: number };
  stopped?: { at: number; workers: string[]; clean: boolean; killed: string[] };
}

interface Claim {
  label: string;
  held: boolean;
  detail: string;
}

const isGrant = (h: HistoryEntry): boolean => h.event === 'acquired' || h.event === 'takeover';
const of = <K extends Report['type']>(reports: Report[], type: K): ReportOf<K>[] => reports.filter((r): r is ReportOf<K> => r.type === type);

export function checkClaims(f: DemoFacts): Claim[] {
  const claims: Claim[] = [];

  const issued = f.history.filter(isGrant).map((h) => h.token);
  const badIssue = issued.findIndex((t, i) => i > 0 && t <= issued[i - 1]!);
  claims.push({
    label: '(a) every token issued is strictly larger than the previous',
    held: issued.length > 0 && badIssue === -1,
    detail:
      issued.length === 0
        ? 'the store recorded no term for the demo lease'
        : `${issued.join(' < ')} (the store's history, ${issued.length} terms)` + (badIssue === -1 ? '' : `; but token ${issued[badIssue]} came after ${issued[badIssue - 1]}`),
  });

  const dips = f.rows.filter((r, i) => i > 0 && r.token < f.rows[i - 1]!.token);
  const perToken = new Map<bigint, number>();
  for (const r of f.rows) perToken.set(r.token, (perToken.get(r.token) ?? 0) + 1);
  claims.push({
    label: "(b) accepted writes' tokens never decrease",
    held: f.rows.length > 0 && dips.length === 0,
    detail:
      `${f.rows.length} rows in commit order: ` +
      [...perToken].map(([t, n]) => `token ${t} x${n}`).join(', ') +
      (dips.length === 0 ? '' : `; but row ${dips[0]!.id} has token ${dips[0]!.token} after a higher one`),
  });

  const fz = f.frozen;
  const staleFenced = fz === undefined ? undefined : of(f.reports, 'fenced').find((r) => r.worker === fz.worker && r.seq === fz.seq && BigInt(r.token) === fz.token);
  const staleLanded = fz === undefined ? undefined : f.rows.find((r) => r.worker === fz.worker && r.seq === fz.seq);
  claims.push({
    label: "(c) the frozen leader's write after thawing was fenced",
    held: fz?.thawedAt !== undefined && staleFenced !== undefined && staleLanded === undefined,
    detail:
      fz === undefined
        ? 'no leader was frozen'
        : staleLanded !== undefined
          ? `${fz.worker}'s write #${fz.seq} with stale token ${fz.token} was ACCEPTED (row ${staleLanded.id})`
          : staleFenced === undefined
            ? `no fenced write was seen from ${fz.worker}'s unit #${fz.seq}`
            : `${fz.worker}'s write #${fz.seq} with token ${fz.token} was refused; the resource had accepted token ${staleFenced.highWater ?? '?'}`,
  });

  const accepted = of(f.reports, 'accepted').sort((x, y) => x.id - y.id);
  const byId = new Map(f.rows.map((r) => [r.id, r]));
  let max = -1n;
  const problems: string[] = [];
  for (const a of accepted) {
    const t = BigInt(a.token);
    const row = byId.get(a.id);
    if (row === undefined || row.worker !== a.worker || row.token !== t || row.seq !== a.seq) problems.push(`${a.worker}'s accepted write #${a.seq} is not in the table as reported`);
    if (t < max) problems.push(`${a.worker}'s write #${a.seq} with token ${t} was accepted after token ${max}`);
    if (t > max) max = t;
  }
  const fenced = of(f.reports, 'fenced');
  for (const x of fenced) {
    if (x.highWater === null || BigInt(x.token) >= BigInt(x.highWater)) problems.push(`${x.worker}'s write #${x.seq} was fenced without a higher token accepted`);
    if (f.rows.some((r) => r.worker === x.worker && r.seq === x.seq)) problems.push(`${x.worker}'s fenced write #${x.seq} left a row`);
  }
  claims.push({
    label: '(d) no accepted write carries a token lower than one accepted before it',
    held: accepted.length > 0 && problems.length === 0,
    detail:
      problems.length > 0
        ? problems.slice(0, 3).join('; ')
        : `all ${accepted.length} writes the workers saw accepted are in the table, in token order; ` +
          `${fenced.length} fenced attempt${fenced.length === 1 ? '' : 's'} carried a token below the resource's high-water mark and left no row`,
  });

  const k = f.killed;
  let next: HistoryEntry | undefined;
  if (k !== undefined) {
    const grantOfKilled = f.history.findIndex((h) => isGrant(h) && h.token === k.token);
    next = grantOfKilled === -1 ? undefined : f.history.slice(grantOfKilled + 1).find(isGrant);
  }
  claims.push({
    label: '(e) the takeover after SIGKILL got a higher token',
    held: k !== undefined && next !== undefined && next.token > k.token && f.workerOf(next.holder) !== k.worker,
    detail:
      k === undefined
        ? 'no leader was killed'
        : next === undefined
          ? `nobody took over after ${k.worker} (token ${k.token}) was killed`
          : `${f.workerOf(next.holder)} got token ${next.token} ${next.token > k.token ? '>' : '<='} ${k.worker}'s ${k.token}, ` +
            `${((next.atMs - k.at) / 1000).toFixed(2)}s after the kill`,
  });

  const s = f.stopped;
  const last = f.history.at(-1);
  const released = last?.event === 'released';
  claims.push({
    label: '(f) the remaining workers released the lease and exited on SIGTERM',
    held: s !== undefined && s.clean && released,
    detail:
      s === undefined
        ? 'the demo did not get as far as stopping the workers'
        : [
            s.clean ? `${s.workers.join(' and ')} exited with code 0` : `not a clean stop${s.killed.length > 0 ? ` (had to SIGKILL ${s.killed.join(', ')})` : ''}`,
            released ? `the store recorded ${f.workerOf(last.previousHolder)} releasing token ${last.token}` : 'the store recorded no release',
          ].join('; '),
  });
  return claims;
}

interface Item {
  at: number;
  token?: bigint;
  worker: string;
  text: string;
  /** Consecutive accepted writes of one worker and token collapse into one line. */
  write?: { seq: number };
}

/** The run as a few readable lines: terms from the store, writes from the table, fenced attempts from the workers. */
export function timeline(f: DemoFacts): string[] {
  const items: Item[] = [];
  for (const h of f.history) {
    if (h.event === 'acquired') items.push({ at: h.atMs, token: h.token, worker: f.workerOf(h.holder), text: 'acquired the lease' });
    else if (h.event === 'takeover') items.push({ at: h.atMs, token: h.token, worker: f.workerOf(h.holder), text: `took over from ${f.workerOf(h.previousHolder)}, whose term had expired` });
    else items.push({ at: h.atMs, token: h.token, worker: f.workerOf(h.previousHolder), text: `${h.event} the lease` });
  }
  for (const r of f.rows) items.push({ at: r.at, token: r.token, worker: r.worker, text: '', write: { seq: r.seq } });
  for (const x of of(f.reports, 'fenced')) {
    items.push({ at: x.at, token: BigInt(x.token), worker: x.worker, text: `write #${x.seq} FENCED: the resource had accepted token ${x.highWater ?? '?'}` });
  }
  if (f.frozen !== undefined) {
    items.push({ at: f.frozen.at, worker: f.frozen.worker, text: `frozen (SIGSTOP) in the middle of unit #${f.frozen.seq}` });
    if (f.frozen.thawedAt !== undefined) items.push({ at: f.frozen.thawedAt, worker: f.frozen.worker, text: 'thawed (SIGCONT)' });
  }
  if (f.killed !== undefined) items.push({ at: f.killed.at, worker: f.killed.worker, text: 'killed (SIGKILL)' });
  if (f.stopped !== undefined) items.push({ at: f.stopped.at, worker: f.stopped.workers.join(','), text: 'asked to stop (SIGTERM)' });
  items.sort((x, y) => x.at - y.at);

  const lines: string[] = [];
  for (let i = 0; i < items.length; i++) {
    const it = items[i]!;
    let text = it.text;
    if (it.write !== undefined) {
      let j = i;
      while (j + 1 < items.length && items[j + 1]!.write !== undefined && items[j + 1]!.worker === it.worker && items[j + 1]!.token === it.token) j++;
      const n = j - i + 1;
      const last = items[j]!.write!.seq;
      text = n === 1 ? `write #${it.write.seq} accepted` : `${n} writes accepted (#${it.write.seq}-#${last})`;
      i = j;
    }
    const when = `+${((it.at - f.t0) / 1000).toFixed(2)}s`.padStart(7);
    const token = it.token === undefined ? '' : `token ${it.token}`;
    lines.push(`  ${when}  ${token.padEnd(9)} ${it.worker.padEnd(3)} ${text}`);
  }
  return lines;
}
