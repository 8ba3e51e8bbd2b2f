/**
 * The `leasehold` command line: dispatch, `--help`, `--version`, and the one place errors become
 * exit codes. Each command lives in its own file and returns its exit code; none calls
 * process.exit (bin/leasehold.js sets process.exitCode once main() resolves).
 *
 * Exit codes (also in `leasehold --help` and docs/cli.md):
 *   0    success; for `run`, the command's own exit status (128 + N when killed by signal N)
 *   1    a check failed (`doctor`), nothing to revoke (`release`), or an unexpected error
 *   2    usage or configuration: unknown flag, missing `--`, bad duration, bad store URL,
 *        bad lease name, inconsistent timing (renew > ttl/2, grace too large)
 *   3    the store is unreachable (for a waiting `run`: still, when the wait ends), its schema
 *        is missing/old (run `leasehold migrate`), or it refused a statement (a StoreError)
 *   4    `fleet owner`: no owner on record
 *   5    `fleet owner`: an owner on record that is not alive (by the store's clock)
 *   6    `fleet place`/`reassign`: no live, non-draining agent can take the resource
 *   7    `fleet place`: already owned; `fleet reassign`: the owner is not --from
 *   75   `run` never became leader (`--no-wait`, or `--wait D` ran out)
 *   76   `run` lost the lease while the command was running; the command was killed
 *   126, 127  `run`: COMMAND not executable / not found (no lease taken)
 *   128+N `run` stopped by signal N before COMMAND started
 */
import { readFileSync } from 'node:fs';
import { rememberLauncher } from './parent-watch.js';
import { EXIT, err, exitCodeFor, out, reportError, setLogContext, sniffLogFormat } from './common.js';
import { envNames, synopsis, wrapText, WIDTH, type CommandSpec } from './flags.js';

type Command = (argv: string[]) => Promise<number>;

interface Entry {
  /** Lazy: `leasehold status` need not load the runner, nor the demo. */
  load: () => Promise<Command>;
  /** Its flags (flags.ts). Loaded for `leasehold --help` only. */
  spec: () => Promise<CommandSpec>;
}

/**
 * Every command. Its `spec` gives its usage line, summary and variables in `leasehold --help`,
 * and `npm run docs:cli` writes its docs/cli.md line and flag table from the same spec.
 */
const COMMANDS: Record<string, Entry> = {
  run: { load: async () => (await import('./run.js')).runCommand, spec: async () => (await import('./run-args.js')).RUN_SPEC },
  status: { load: async () => (await import('./status.js')).statusCommand, spec: async () => (await import('./status.js')).STATUS_SPEC },
  history: { load: async () => (await import('./history.js')).historyCommand, spec: async () => (await import('./history.js')).HISTORY_SPEC },
  release: { load: async () => (await import('./release.js')).releaseCommand, spec: async () => (await import('./release.js')).RELEASE_SPEC },
  migrate: { load: async () => (await import('./migrate.js')).migrateCommand, spec: async () => (await import('./migrate.js')).MIGRATE_SPEC },
  doctor: { load: async () => (await import('./doctor.js')).doctorCommand, spec: async () => (await import('./doctor.js')).DOCTOR_SPEC },
  dashboard: { load: async () => (await import('./dashboard.js')).dashboardCommand, spec: async () => (await import('./dashboard.js')).DASHBOARD_SPEC },
  agent: { load: async () => (await import('./agent.js')).agentCommand, spec: async () => (await import('./agent.js')).AGENT_SPEC },
  fleet: { load: async () => (await import('./fleet.js')).fleetCommand, spec: async () => (await import('./fleet.js')).FLEET_SPEC },
  demo: { load: async () => (await import('./demo.js')).demoCommand, spec: async () => (await import('./demo.js')).DEMO_SPEC },
  cron: { load: async () => (await import('./cron.js')).cronCommand, spec: async () => (await import('./cron.js')).CRON_SPEC },
  prune: { load: async () => (await import('./prune.js')).pruneCommand, spec: async () => (await import('./prune.js')).PRUNE_SPEC },
};

interface CommandInfo {
  name: string;
  spec: CommandSpec;
}

/** Every command, in order, with its spec (for `--help` and the drift test). */
export async function commandIndex(): Promise<CommandInfo[]> {
  const all: CommandInfo[] = [];
  for (const [name, e] of Object.entries(COMMANDS)) all.push({ name, spec: await e.spec() });
  return all;
}

/** `leasehold --help`: generated from the specs, so it lists what the commands accept. */
export async function usage(): Promise<string> {
  const lines: string[] = [];
  const summaries: string[] = [];
  const env: string[] = [];
  for (const { name, spec } of await commandIndex()) {
    lines.push(synopsis(spec, WIDTH, '  leasehold '));
    summaries.push(wrapText(spec.summary, WIDTH, name.padEnd(9), ' '.repeat(10)));
    env.push(...envNames(spec));
  }
  return `leasehold: leases with fencing tokens for singleton work

Usage:
${lines.join('\n')}
  leasehold help [COMMAND] | --help | --version

${summaries.join('\n')}

Durations: 30s, 500ms, 2m, 1h, 1d, 1m30s, or whole milliseconds.
Store: --store, else --store-file, else LEASEHOLD_STORE_FILE or LEASEHOLD_STORE (both set: they
       must agree), else sqlite:$XDG_STATE_HOME/leasehold/leasehold.db (~/.local/state/leasehold/
       without XDG_STATE_HOME). postgres://user@host[,host2]/db[?schema=S], sqlite:/path/file.db,
       redis://host:6379, redis+sentinel://s1:26379,s2:26379/mymaster, etcd://host:2379[,host2].
       A password in --store is visible to every user in
       ps: put the URL in a file (--store-file, chmod 600) or in LEASEHOLD_STORE instead.
${wrapText([...new Set(env)].join(', '), WIDTH, 'Flags override environment:', '       ')}
Diagnostics: --log-format json (or LEASEHOLD_LOG_FORMAT=json): one JSON object per line on stderr.

Exit codes:
  0    success; for run, COMMAND's own status (128+N if killed by signal N)
  1    doctor found a failure; release found nothing to revoke; unexpected error
  2    usage or configuration error (one line on stderr says what to fix)
  3    store unreachable (run --wait: when the wait ends), schema missing/old
       (run \`leasehold migrate\`), or the store refused a statement
  4    fleet owner: no owner on record
  5    fleet owner: the owner on record is not alive (stale or deregistered)
  6    fleet place/reassign: no live, non-draining agent can take it
  7    fleet place: already owned; fleet reassign: the owner is not --from
  75   run: never became leader (--no-wait, or --wait ran out)
  76   run: lost the lease while COMMAND was running (COMMAND was killed)
  126  run: COMMAND is not executable; 127: not found (no lease taken)
  128+N run: stopped by signal N before COMMAND started
`;
}

function version(): string {
  try {
    // dist/src/cli/main.js -> package.json at the package root.
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Runs the CLI and resolves with the exit code. Never throws, never exits the process. */
export async function main(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === undefined || first === '--help' || first === '-h') {
    (first === undefined ? err : out)((await usage()).trimEnd());
    return first === undefined ? EXIT.USAGE : EXIT.OK;
  }
  if (first === '--version' || first === '-V' || first === 'version') {
    out(version());
    return EXIT.OK;
  }
  if (first === 'help') {
    const sub = rest[0];
    if (sub !== undefined && COMMANDS[sub] !== undefined) return main([sub, '--help']);
    out((await usage()).trimEnd());
    return EXIT.OK;
  }
  const entry = COMMANDS[first];
  if (entry === undefined) {
    const hint = first.startsWith('-') ? 'put the command first' : `the commands are ${Object.keys(COMMANDS).join(', ')}`;
    err(`leasehold: unknown command ${JSON.stringify(first)}; ${hint} (see \`leasehold --help\`)`);
    return EXIT.USAGE;
  }
  rememberLauncher(); // while npm, if it launched us, is still our parent (parent-watch.ts)
  // Before parsing, so that a bad flag is reported in the format that was asked for.
  setLogContext({ command: first, format: sniffLogFormat(rest) });
  try {
    const command = await entry.load();
    return await command(rest);
  } catch (e) {
    reportError(e, first);
    if (process.env['LEASEHOLD_DEBUG'] === '1' && e instanceof Error && e.stack !== undefined) err(e.stack);
    return exitCodeFor(e);
  }
}
