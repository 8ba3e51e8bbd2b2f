/**
 * The generated parts of the CLI reference (docs/cli.md), written from the command specs
 * (flags.ts, each command's *_SPEC) by `npm run docs:cli` (scripts/cli-docs.mjs). Each part sits
 * between two marker comments; the prose around them is written by hand and left as it is.
 * test/cli/flags-readme.test.ts fails when the file differs from what this would write, so a flag
 * added to a spec reaches the reference in the same commit.
 */
import { commandIndex } from './main.js';
import { envNames, synopsis, type CommandSpec } from './flags.js';

interface Command {
  name: string;
  spec: CommandSpec;
}

const begin = (part: string): string => `<!-- generated: ${part} (npm run docs:cli writes it from the command specs; edit those, not this) -->`;
const end = (part: string): string => `<!-- end generated: ${part} -->`;

/** A table cell: pipes escaped, line breaks joined, so that a help phrase stays one cell. */
const cell = (s: string): string => s.replace(/\s+/g, ' ').replace(/\|/g, '\\|').trim();

/** The generated parts, by name. */
function parts(commands: Command[]): Record<string, string> {
  const usage = ['```sh', ...commands.map((c) => synopsis(c.spec, Infinity)), '```'].join('\n');
  const env = [...new Set(commands.flatMap((c) => envNames(c.spec)))].map((v) => `\`${v}\``).join(', ');
  const flags = commands
    .map(({ name, spec }) => {
      const rows = Object.entries(spec.flags).map(([long, f]) => {
        const flag = `${f.short === undefined ? '' : `\`-${f.short}\`, `}\`--${long}${f.type === 'string' ? ` ${f.value ?? 'VALUE'}` : ''}\``;
        return `| ${cell(flag)} | ${f.env === undefined ? '' : `\`${f.env}\``} | ${cell(f.default ?? '')} | ${cell(f.help)} |`;
      });
      return [`### leasehold ${name}`, '', cell(spec.summary), '', '| flag | variable | default | what it does |', '|---|---|---|---|', ...rows].join('\n');
    })
    .join('\n\n');
  return { usage, environment: `Flags override these variables: ${env}.`, flags };
}

/**
 * `doc` with every generated part rewritten from `commands` (default: every command of the
 * CLI). A part whose markers are missing is an error naming them, not a silent skip.
 */
export async function renderCliReference(doc: string, commands?: Command[]): Promise<string> {
  const generated = parts(commands ?? (await commandIndex()));
  let out = doc;
  for (const [part, text] of Object.entries(generated)) {
    const b = out.indexOf(begin(part));
    const e = out.indexOf(end(part));
    if (b === -1 || e === -1 || e < b) throw new Error(`docs/cli.md lacks the markers of the generated part "${part}":\n${begin(part)}\n...\n${end(part)}`);
    out = `${out.slice(0, b + begin(part).length)}\n${text}\n${out.slice(e)}`;
  }
  return out;
}

/** The names of the generated parts, for a test that says which one differs. */
export const CLI_REFERENCE_PARTS = ['usage', 'environment', 'flags'] as const;

/** The text of one generated part as it stands in `doc` (undefined without its markers). */
export function generatedPart(doc: string, part: string): string | undefined {
  const b = doc.indexOf(begin(part));
  const e = doc.indexOf(end(part));
  return b === -1 || e === -1 ? undefined : doc.slice(b + begin(part).length, e).trim();
}
