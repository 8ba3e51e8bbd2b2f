/**
 * Flags, declared once per command. From one `CommandSpec` come the node:util parseArgs options
 * (`optionsOf`), the command's `--help` (`helpText`) and its line in the top-level usage
 * (`synopsis`); `npm run docs:cli` (reference.ts) writes the CLI reference's usage lines, variables
 * and flag tables (docs/cli.md) from the same specs, and test/cli/flags-readme.test.ts fails when
 * the file differs, so help, usage and the reference cannot drift apart.
 *
 * Converting a command that still declares its own options (run.ts and migrate.ts at the time of
 * writing) takes three steps:
 *  1. Replace its options literal and its hand-written usage with a spec, for example
 *       export const MIGRATE_SPEC = defineCommand({
 *         name: 'migrate', summary: 'Create or upgrade the schema ...', about: `Creates or ...`,
 *         flags: { ...STORE_FLAGS, ...LOG_FLAGS, json: { type: 'boolean', help: '...' } },
 *       });
 *     `run` adds `trailing: '-- COMMAND [ARGS...]'`, `required: true` on --name and
 *     `or: 'no-wait'` on --wait (printed as `[--wait D | --no-wait]`).
 *  2. Parse with `parseCommand(SPEC, argv)`, or keep the existing parseArgs call with
 *     `options: optionsOf(SPEC)` (the values keep their types), and print `helpText(SPEC)` for
 *     --help. Pass `'store-file'` on to openStoreFromFlags with `store` and `schema`.
 *  3. In main.ts's COMMANDS, give the entry `spec: async () => (await import('./x.js')).X_SPEC` and
 *     delete its hand-written `synopsis`. The top-level usage and `npm run docs:cli` pick the
 *     command up from there.
 */
import { parseArgs } from 'node:util';

/** One flag. The key it is declared under is its long name, without the dashes. */
interface FlagSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  /** The LEASEHOLD_* variable that supplies it when the flag is absent (flags win). */
  readonly env?: string;
  /** The placeholder for a string flag's value in usage and help: URL, PATH, D, N. */
  readonly value?: string;
  /** What it does, in a phrase; help wraps it. */
  readonly help: string;
  /** The default, as a person would say it; shown in --help. */
  readonly default?: string;
  /** Shown without brackets in the synopsis (the command checks it; parseArgs cannot). */
  readonly required?: boolean;
  /** The long name of its alternative: the synopsis shows `[--this V | --other]`. */
  readonly or?: string;
}

type Flags = Readonly<Record<string, FlagSpec>>;

export interface CommandSpec<F extends Flags = Flags> {
  readonly name: string;
  /** One line (wrapped as needed) for the command list in `leasehold --help`. */
  readonly summary: string;
  /** Operands before the flags in the synopsis: `NAME`, `[NAME]`. */
  readonly operands?: string;
  /** What follows the flags in the synopsis: `-- COMMAND [ARGS...]`. */
  readonly trailing?: string;
  /** The paragraph(s) of `--help` between the synopsis and the options. */
  readonly about: string;
  readonly flags: F;
  /** After the options in `--help`: output shapes, exit statuses. */
  readonly footer?: string;
}

/** Keeps the flags' literal types, so parsed values are typed `string` or `boolean` per flag. */
export function defineCommand<const F extends Flags>(spec: CommandSpec<F>): CommandSpec<F> {
  for (const [long, f] of Object.entries(spec.flags)) {
    // A declaration mistake is a bug in leasehold, caught by any test that loads the command.
    if (long === 'help' || f.short === 'h') throw new Error(`${spec.name}: --help/-h is added to every command; do not declare it`);
    if (f.type === 'string' && f.value === undefined) throw new Error(`${spec.name}: --${long} needs a value placeholder`);
    if (f.or !== undefined && spec.flags[f.or] === undefined) throw new Error(`${spec.name}: --${long} names an unknown alternative --${f.or}`);
  }
  return spec;
}

// ---- shared declarations -------------------------------------------------------------------

/** Every command that opens a store. Resolved by openStoreFromFlags (common.ts). */
export const STORE_FLAGS = {
  store: {
    type: 'string',
    value: 'URL',
    env: 'LEASEHOLD_STORE',
    or: 'store-file',
    help: 'where the leases live: postgres://user@host/db, sqlite:/path/file.db, redis://host:6379 (redis+sentinel://s1:26379,s2:26379/mymaster), etcd://host:2379',
    default: 'sqlite:$XDG_STATE_HOME/leasehold/leasehold.db',
  },
  'store-file': {
    type: 'string',
    value: 'PATH',
    env: 'LEASEHOLD_STORE_FILE',
    help: 'read the store URL from the first non-empty line of PATH: the way to pass a password, which ps shows to every user in --store',
  },
  schema: {
    type: 'string',
    value: 'NAME',
    env: 'LEASEHOLD_SCHEMA',
    help: "PostgreSQL schema for leasehold's tables",
    default: '?schema= in the URL, else "leasehold"',
  },
} as const satisfies Flags;

/** Every command that writes diagnostics (warnings, errors) to stderr. See cliLog in common.ts. */
export const LOG_FLAGS = {
  'log-format': {
    type: 'string',
    value: 'FORMAT',
    env: 'LEASEHOLD_LOG_FORMAT',
    help: 'text, or json: one JSON object per line on stderr (time, level, command, msg)',
    default: 'text',
  },
} as const satisfies Flags;

/** Where `--metrics-port` and `--health-port` listen: `run` and `agent` take the same flag. */
export const HTTP_HOST_FLAG = {
  'http-host': {
    type: 'string',
    value: 'HOST',
    env: 'LEASEHOLD_HTTP_HOST',
    default: '127.0.0.1',
    help: 'the address --metrics-port and --health-port listen on; 0.0.0.0 for Kubernetes probes and scrapes',
  },
} as const satisfies Flags;

// ---- parsing -------------------------------------------------------------------------------

type OptionOf<S extends FlagSpec> = S extends { readonly short: infer C extends string } ? { type: S['type']; short: C } : { type: S['type'] };

/** The parseArgs options of a spec, with `--help`/`-h` added. */
type OptionsOf<F extends Flags> = { -readonly [K in keyof F]: OptionOf<F[K]> } & { help: { type: 'boolean'; short: 'h' } };

export type ValuesOf<F extends Flags> = { [K in keyof F]?: F[K]['type'] extends 'boolean' ? boolean : string } & { help?: boolean };

export function optionsOf<F extends Flags>(spec: CommandSpec<F>): OptionsOf<F> {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {};
  for (const [long, f] of Object.entries(spec.flags)) options[long] = f.short === undefined ? { type: f.type } : { type: f.type, short: f.short };
  options['help'] = { type: 'boolean', short: 'h' };
  return options as OptionsOf<F>;
}

/**
 * Strict parsing: an unknown flag, a missing value or a value on a boolean flag throws node's
 * ERR_PARSE_ARGS_* error, which main.ts turns into one line and exit 2.
 */
export function parseCommand<F extends Flags>(spec: CommandSpec<F>, argv: string[]): { values: ValuesOf<F>; positionals: string[] } {
  const { values, positionals } = parseArgs({ args: argv, options: optionsOf(spec) as Record<string, { type: 'string' | 'boolean' }>, strict: true, allowPositionals: true });
  return { values: values as ValuesOf<F>, positionals };
}

// ---- text ----------------------------------------------------------------------------------

/** Help and usage are wrapped to this many columns. */
export const WIDTH = 100;

function flagWithValue(long: string, f: FlagSpec): string {
  return f.type === 'string' ? `--${long} ${f.value ?? 'VALUE'}` : `--${long}`;
}

/** The synopsis' pieces: operands, then each flag (or pair of alternatives), then what trails. */
function synopsisParts(spec: CommandSpec): string[] {
  const parts: string[] = [];
  if (spec.operands !== undefined) parts.push(spec.operands);
  const alternatives = new Set(Object.values(spec.flags).flatMap((f) => (f.or === undefined ? [] : [f.or])));
  for (const [long, f] of Object.entries(spec.flags)) {
    if (alternatives.has(long)) continue;
    const text = f.or === undefined ? flagWithValue(long, f) : `${flagWithValue(long, f)} | ${flagWithValue(f.or, spec.flags[f.or]!)}`;
    parts.push(f.required === true ? text : `[${text}]`);
  }
  if (spec.trailing !== undefined) parts.push(spec.trailing);
  return parts;
}

/** `leasehold status [NAME] [--store URL | --store-file PATH] ...`, wrapped to `width` (Infinity: one line). */
export function synopsis(spec: CommandSpec, width = WIDTH, prefix = 'leasehold '): string {
  const head = `${prefix}${spec.name}`;
  return fill(head, synopsisParts(spec), width, ' '.repeat(head.length + 1));
}

/** Joins words into lines no wider than `width`, continuing with `indent`; a word is never split. */
function fill(first: string, words: string[], width: number, indent: string): string {
  const lines: string[] = [];
  let line = first;
  for (const w of words) {
    const blank = line.trim() === '';
    if (!blank && line.length + 1 + w.length > width) {
      lines.push(line);
      line = `${indent}${w}`;
    } else {
      line = blank ? `${line}${w}` : `${line} ${w}`;
    }
  }
  lines.push(line);
  return lines.join('\n');
}

/** Wraps prose to `width`, continuing with `indent`. */
export function wrapText(text: string, width: number, first: string, indent: string): string {
  return fill(first, text.split(/\s+/).filter((w) => w !== ''), width, indent);
}

/** The help of one flag: its phrase, then where else it comes from and its default. */
function flagHelp(f: FlagSpec): string {
  const extra = [f.env === undefined ? undefined : `env ${f.env}`, f.default === undefined ? undefined : `default ${f.default}`].filter((x) => x !== undefined);
  return extra.length === 0 ? f.help : `${f.help} (${extra.join('; ')})`;
}

/** The option list of `--help`: two columns, the help wrapped under its own column. */
function optionList(spec: CommandSpec, width = WIDTH): string {
  const rows: Array<[string, string]> = Object.entries(spec.flags).map(([long, f]) => [
    `${f.short === undefined ? '' : `-${f.short}, `}${flagWithValue(long, f)}`,
    flagHelp(f),
  ]);
  rows.push(['-h, --help', 'this help']);
  const col = Math.min(24, Math.max(...rows.map(([l]) => l.length))) + 4;
  return rows
    .map(([left, help]) => {
      const head = `  ${left}`;
      const indent = ' '.repeat(col);
      // A flag wider than the column gets its help on the next line.
      return head.length + 2 > col ? `${head}\n${wrapText(help, width, indent, indent)}` : wrapText(help, width, head.padEnd(col - 1), indent);
    })
    .join('\n');
}

/** The whole `leasehold CMD --help`. */
export function helpText(spec: CommandSpec, width = WIDTH): string {
  const parts = [synopsis(spec, width, 'Usage: leasehold '), spec.about.trim(), `Options:\n${optionList(spec, width)}`];
  if (spec.footer !== undefined) parts.push(spec.footer.trim());
  return parts.join('\n\n');
}

/** Every `--long` flag of a spec, for the drift test: `--help` is everywhere and not listed. */
export function flagNames(spec: CommandSpec): string[] {
  return Object.keys(spec.flags).map((long) => `--${long}`);
}

/** Every environment variable a spec's flags read. */
export function envNames(spec: CommandSpec): string[] {
  return Object.values(spec.flags).flatMap((f) => (f.env === undefined ? [] : [f.env]));
}
