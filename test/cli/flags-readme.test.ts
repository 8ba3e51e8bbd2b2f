/**
 * One source of truth for flags: the CLI reference (docs/cli.md; the README links it),
 * `leasehold --help` and each `leasehold CMD --help` come from the command specs
 * (src/cli/flags.ts, each command's *_SPEC). docs/cli.md's generated parts (between marker
 * comments) must be exactly what `npm run docs:cli` writes; the prose around them is checked
 * for flags and variables no command has.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { commandIndex, usage } from '../../src/cli/main.js';
import { envNames, flagNames, helpText, synopsis, WIDTH } from '../../src/cli/flags.js';
import { CLI_REFERENCE_PARTS, generatedPart, renderCliReference } from '../../src/cli/reference.js';
import { ROOT, Sandbox } from './helpers.js';

/** docs/cli.md from `## Commands` to the next `## `. */
function readmeCliSection(): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  assert.match(readme, /\]\(docs\/cli\.md[)#]/, 'the README links the CLI reference');
  const doc = readFileSync(join(ROOT, 'docs', 'cli.md'), 'utf8');
  const start = doc.indexOf('\n## Commands\n');
  assert.ok(start >= 0, 'docs/cli.md has a "## Commands" section');
  const end = doc.indexOf('\n## ', start + 1);
  return doc.slice(start, end === -1 ? undefined : end);
}

/** The `leasehold ...` lines of the section's first code block, keyed by command. */
function readmeLines(section: string): Map<string, string> {
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block !== undefined, 'the CLI section starts with a ```sh block of usage lines');
  const lines = new Map<string, string>();
  for (const line of block.split('\n').filter((l) => l.trim() !== '')) {
    const cmd = /^leasehold (\S+)/.exec(line)?.[1];
    assert.ok(cmd !== undefined, `a line of the usage block that is not a leasehold command: ${line}`);
    assert.ok(!lines.has(cmd), `the usage block has two lines for ${cmd}`);
    lines.set(cmd, line);
  }
  return lines;
}

const flagsIn = (text: string): string[] => [...new Set([...text.matchAll(/(?<![\w-])--[a-z][a-z0-9-]*/g)].map((m) => m[0]))].sort();

void describe('flags: one declaration per command; help, usage and the CLI reference agree', async () => {
  const commands = await commandIndex();
  const section = readmeCliSection();
  const lines = readmeLines(section);

  void it('docs/cli.md is what `npm run docs:cli` writes from the specs', async () => {
    const doc = readFileSync(join(ROOT, 'docs', 'cli.md'), 'utf8');
    const want = await renderCliReference(doc);
    for (const part of CLI_REFERENCE_PARTS) {
      assert.equal(
        generatedPart(doc, part),
        generatedPart(want, part),
        `docs/cli.md's generated part "${part}" differs from the command specs: run \`npm run docs:cli\` and commit docs/cli.md`,
      );
    }
    assert.equal(doc, want, 'docs/cli.md differs from what `npm run docs:cli` writes: run it and commit docs/cli.md');
  });

  void it('the CLI reference lists every command, and only those', () => {
    assert.deepEqual([...lines.keys()].sort(), commands.map((c) => c.name).sort());
  });

  for (const { name, spec } of commands) {
    void it(`${name}: its docs/cli.md line is the one generated from its flags`, () => {
      const want = synopsis(spec, Infinity);
      assert.equal(lines.get(name), want, `docs/cli.md's Commands block should read, for ${name}:\n${want}`);
    });
    void it(`${name}: --help describes every flag and its variable, within ${WIDTH} columns`, async (t) => {
      const sb = new Sandbox('flags');
      t.after(() => sb.cleanup());
      const r = await sb.run([name, '--help']);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout.trimEnd(), helpText(spec).trimEnd());
      for (const flag of flagNames(spec)) assert.match(r.stdout, new RegExp(`^\\s+(-\\w, )?${flag}\\b`, 'm'), `${name} --help lists ${flag}`);
      for (const v of envNames(spec)) assert.ok(r.stdout.includes(v), `${name} --help names ${v}`);
      const long = r.stdout.split('\n').filter((l) => l.length > WIDTH);
      assert.deepEqual(long, [], `lines wider than ${WIDTH} columns`);
    });
  }

  void it('the CLI reference names no flag that no command has, and every variable a flag reads', () => {
    // --pdeathsig is setpriv's, named where docs/cli.md explains how a runner's child dies with it.
    const known = new Set(['--help', '--version', '--pdeathsig']);
    for (const c of commands) {
      for (const f of flagNames(c.spec)) known.add(f);
    }
    const unknown = flagsIn(section).filter((f) => !known.has(f));
    assert.deepEqual(unknown, [], 'flags in docs/cli.md that no command declares');
    const vars = new Set(commands.flatMap((c) => envNames(c.spec)));
    for (const v of vars) assert.ok(section.includes(v), `docs/cli.md's Commands section names ${v}`);
  });

  void it('`leasehold --help` has every command\'s generated usage line and fits in the width', async () => {
    const top = await usage();
    for (const { spec } of commands) assert.ok(top.includes(synopsis(spec, WIDTH, '  leasehold ')), `leasehold --help shows ${spec.name}'s synopsis`);
    assert.deepEqual(top.split('\n').filter((l) => l.length > WIDTH), [], `lines wider than ${WIDTH} columns`);
  });
});
