/**
 * The README is the front door and docs/ the rooms behind it: every relative link in README.md
 * and docs/**\/*.md points at a file that exists, every #anchor at a heading that file has (as
 * GitHub names headings), and every page under docs/ can be reached from the README.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

function markdownUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...markdownUnder(p));
    else if (p.endsWith('.md')) out.push(p);
  }
  return out.sort();
}

/** The text outside fenced code blocks and inline code, where a `[x](y)` is not a link. */
function prose(md: string): string {
  return md.replace(/^(```|~~~)[\s\S]*?^\1/gm, '').replace(/`[^`\n]*`/g, '');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen; repeats get -1, -2. */
export function anchorsOf(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of md.replace(/^(```|~~~)[\s\S]*?^\1/gm, '').matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const text = m[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/<[^>]+>/g, '');
    const base = text.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  // An explicit anchor, kept where a section moved so that links from elsewhere still land.
  for (const m of md.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) out.add(m[1]!);
  return out;
}

function linksOf(md: string): string[] {
  return [...prose(md).matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]!);
}

const pages = [join(ROOT, 'README.md'), ...markdownUnder(join(ROOT, 'docs'))];

void describe('docs: the README and docs/ link only to what exists', () => {
  void it('finds pages and links to check (a check of nothing proves nothing)', () => {
    assert.ok(pages.length > 10, `only ${pages.length} pages`);
    assert.ok(linksOf(readFileSync(pages[0]!, 'utf8')).length > 20, 'the README has few links');
  });

  for (const page of pages) {
    const name = relative(ROOT, page);
    void it(`${name}: every relative link resolves, anchors included`, () => {
      const md = readFileSync(page, 'utf8');
      const broken: string[] = [];
      for (const link of linksOf(md)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // https:, mailto: ...
        const [path, anchor] = link.split('#', 2) as [string, string | undefined];
        const target = path === '' ? page : resolve(dirname(page), decodeURIComponent(path));
        if (!target.startsWith(ROOT) || !existsSync(target)) {
          broken.push(`${link}: no such file`);
          continue;
        }
        if (anchor !== undefined && anchor !== '' && target.endsWith('.md') && !anchorsOf(readFileSync(target, 'utf8')).has(anchor)) {
          broken.push(`${link}: ${relative(ROOT, target)} has no heading #${anchor}`);
        }
      }
      assert.deepEqual(broken, [], `${name} has broken links`);
    });
  }

  void it('every page under docs/ is reachable from the README', () => {
    const reached = new Set<string>();
    const queue = [join(ROOT, 'README.md')];
    while (queue.length > 0) {
      const page = queue.pop()!;
      if (reached.has(page)) continue;
      reached.add(page);
      for (const link of linksOf(readFileSync(page, 'utf8'))) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue;
        const target = resolve(dirname(page), decodeURIComponent(link.split('#')[0]!));
        if (target.endsWith('.md') && target.startsWith(join(ROOT, 'docs')) && existsSync(target)) queue.push(target);
      }
    }
    const unreached = markdownUnder(join(ROOT, 'docs')).filter((p) => !reached.has(p)).map((p) => relative(ROOT, p));
    assert.deepEqual(unreached, [], 'pages no link from the README leads to');
  });

  void it('anchors are named as GitHub names them', () => {
    const a = anchorsOf('# Fencing: what it covers\n## `npm test`: what it needs\n## TLS\n## TLS\n```\n# not a heading\n```\n');
    assert.deepEqual([...a], ['fencing-what-it-covers', 'npm-test-what-it-needs', 'tls', 'tls-1']);
  });
});
