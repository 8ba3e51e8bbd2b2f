/**
 * The results as one SVG (no dependencies): a bar per figure, its length the ratio to the
 * baseline measured in the same run, on a log scale with 1x marked. Left of 1x leasehold is
 * cheaper than its baseline, right of it dearer.
 */
import type { Result } from './lib.js';

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function chartSvg(results: readonly Result[], title: string): string {
  const rows = results.filter((r) => Number.isFinite(r.ratio) && r.ratio > 0);
  const rowH = 22;
  const left = 430;
  const width = 980;
  const plotW = width - left - 90;
  const top = 50;
  const height = top + rows.length * rowH + 40;
  const ratios = rows.map((r) => r.ratio);
  const lo = Math.min(0.1, ...ratios);
  const hi = Math.max(10, ...ratios);
  const x = (v: number): number => left + ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * plotW;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="15" font-weight="bold">${esc(title)}</text>`,
    `<text x="10" y="38" fill="#555">median ratio to the baseline measured in the same run (log scale); left of 1x is cheaper than the baseline</text>`,
  ];
  for (let d = Math.ceil(Math.log10(lo)); d <= Math.floor(Math.log10(hi)); d++) {
    const v = 10 ** d;
    out.push(`<line x1="${x(v)}" y1="${top - 5}" x2="${x(v)}" y2="${height - 30}" stroke="${d === 0 ? '#000' : '#ddd'}"/>`);
    out.push(`<text x="${x(v)}" y="${height - 15}" text-anchor="middle">${v >= 1 ? v : v.toFixed(-d)}x</text>`);
  }
  rows.forEach((r, i) => {
    const y = top + i * rowH;
    const one = x(1);
    const end = x(r.ratio);
    const colour = r.ratio <= 1.15 ? '#4a9' : r.ratio <= 3 ? '#e9a23b' : '#d55';
    out.push(`<text x="${left - 8}" y="${y + 14}" text-anchor="end">${esc(`${r.figure} ${r.store} ${r.label} vs ${r.baselineName}`)}</text>`);
    out.push(`<rect x="${Math.min(one, end)}" y="${y + 3}" width="${Math.max(1, Math.abs(end - one))}" height="${rowH - 6}" fill="${colour}"/>`);
    out.push(`<text x="${Math.max(one, end) + 4}" y="${y + 14}">${r.ratio.toFixed(2)}x</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
